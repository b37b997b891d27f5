"""Projection GEMMs with a norm prologue and a fused epilogue.

`source(name, spec)` emits one `@triton.jit` kernel `name`; `launch(kernel, spec, ...)` runs it.
out = epilogue(prologue(x) @ w.T), accumulated in fp32:

- prologue "none": the GEMM row is x[t] ([rows, K], act dtype or fp32);
  "rmsnorm": the row is x[t] and the result row is scaled by rsqrt(mean(x[t]^2) + eps);
  "mean_rmsnorm": x is [rows, streams, K] fp32, the row is mean_i x[t, i] and is scaled likewise.
  The norm weight is folded into w, so the kernel streams x once for both the dot and sum(x^2).
- epilogue "store": out [rows, N] = result, cast to out's dtype;
  "swiglu": w is [2I, K] (gate rows, then up rows), out [rows, I] = silu(min(g, L)) * clamp(u, L);
  "residual": out [rows, N] fp32 = stream + result (out may be stream);
  "hc_post": out[t, j] = post[t, j] * result[t] + sum_i comb[t, i, j] * X[t, i], X = stream
  [rows, hc, N] fp32 (out may be X: a block loads all hc stream tiles before storing any).

Tensors may be row-strided views (only the last dim must be contiguous); w is contiguous [N, K].
Two paths, picked in `launch` by rows: rows <= 16 take a GEMV-style tiling (one row block holding
every row, so each weight element is read once per launch, narrow column blocks, deep K steps);
more rows take tensor-core tiles sized for Hopper bf16. Under CONFIG.interpret the source upcasts
every tl.dot operand to fp32 (the interpreter mis-computes bf16 dots).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from hyperloom.config import CONFIG

PROLOGUES = ("none", "rmsnorm", "mean_rmsnorm")
EPILOGUES = ("store", "swiglu", "residual", "hc_post")
GEMV_MAX_ROWS = 16


@dataclass(frozen=True)
class MatmulSpec:
    k: int  # reduction size (hidden size)
    n: int  # output columns of the GEMM (swiglu: 2*I weight rows, I output columns)
    prologue: str = "none"  # "none" | "rmsnorm" | "mean_rmsnorm"
    eps: float = 1e-6  # norm prologues
    streams: int = 1  # mean_rmsnorm: x is [T, streams, K]
    epilogue: str = "store"  # "store" | "swiglu" | "residual" | "hc_post"
    limit: float | None = None  # swiglu clamp (None: plain SwiGLU)
    hc: int = 1  # hc_post: number of streams

    def __post_init__(self) -> None:
        if self.prologue not in PROLOGUES or self.epilogue not in EPILOGUES:
            raise ValueError(f"unknown prologue/epilogue {self.prologue!r}/{self.epilogue!r}")
        if self.k < 1 or self.n < 1 or (self.epilogue == "swiglu" and self.n % 2):
            raise ValueError(f"bad GEMM size k={self.k} n={self.n} for {self.epilogue}")
        if self.streams < 1 or self.hc < 1:
            raise ValueError(f"streams={self.streams} and hc={self.hc} must be >= 1")

    @property
    def n_out(self) -> int:
        """Output columns: swiglu halves the GEMM width."""
        return self.n // 2 if self.epilogue == "swiglu" else self.n


# ---------------------------------------------------------------- source


def _params(spec: MatmulSpec) -> list[str]:
    """Runtime parameters of the kernel, in order; `launch` binds them by name."""
    names = ["x_ptr", "w_ptr", "out_ptr"]
    if spec.epilogue in ("residual", "hc_post"):
        names.append("stream_ptr")
    if spec.epilogue == "hc_post":
        names += ["post_ptr", "comb_ptr"]
    names += ["rows", "sx_t"]
    if spec.prologue == "mean_rmsnorm":
        names.append("sx_s")
    names.append("so_t")
    if spec.epilogue == "hc_post":
        names.append("so_h")
    if spec.epilogue in ("residual", "hc_post"):
        names.append("sst_t")
    if spec.epilogue == "hc_post":
        names += ["sst_h", "sp_t", "sc_t", "sc_i"]
    return names


_CONSTEXPRS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "USE_DOT")


def _signature(name: str, spec: MatmulSpec) -> list[str]:
    args = _params(spec) + [f"{c}: tl.constexpr" for c in _CONSTEXPRS]
    lines = ['@triton.jit(do_not_specialize=["rows"])', f"def {name}("]
    line = "    "
    for arg in args:  # wrap the argument list at 100 columns
        if len(line) + len(arg) + 2 > 100:
            lines.append(line.rstrip())
            line = "    "
        line += arg + ", "
    lines.append(line.rstrip().rstrip(",") + "):")
    return lines


def _setup(spec: MatmulSpec) -> list[str]:
    """Grouped program order (row blocks of GROUP_M share weight column blocks in L2)."""
    return [
        "pid = tl.program_id(0)",
        "num_m = tl.cdiv(rows, BLOCK_M)",
        f"num_n = tl.cdiv({spec.n_out}, BLOCK_N)",
        "group = GROUP_M * num_n",
        "first_m = (pid // group) * GROUP_M",
        "size_m = tl.minimum(num_m - first_m, GROUP_M)",
        "pid_m = first_m + (pid % group) % size_m",
        "pid_n = (pid % group) // size_m",
        "rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        "rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
        "rk = tl.arange(0, BLOCK_K)",
        "m_ok = rm < rows",
        f"n_ok = rn < {spec.n_out}",
        "rm64 = rm.to(tl.int64)  # row offsets of big activations overflow int32",
        "x_rows = x_ptr + rm64[:, None] * sx_t",
        f"w_cols = w_ptr + rn.to(tl.int64)[None, :] * {spec.k}",
    ]


def _weights(spec: MatmulSpec) -> list[tuple[str, str]]:
    """(accumulator, weight tile pointer offset) pairs: swiglu reads gate and up rows together."""
    if spec.epilogue == "swiglu":
        return [("acc_g", ""), ("acc_u", f" + {spec.n_out * spec.k}")]
    return [("acc", "")]


def _loop(spec: MatmulSpec) -> list[str]:
    norm = spec.prologue != "none"
    lines = [f"{acc} = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)" for acc, _ in _weights(spec)]
    if norm:
        lines.append("sq = tl.zeros([BLOCK_M], dtype=tl.float32)")
    lines += [f"for k0 in range(0, {spec.k}, BLOCK_K):", "    kk = k0 + rk",
              f"    k_ok = kk < {spec.k}", "    x_ok = m_ok[:, None] & k_ok[None, :]"]
    if spec.prologue == "mean_rmsnorm":
        lines += ["    a = tl.zeros([BLOCK_M, BLOCK_K], dtype=tl.float32)",
                  f"    for s in tl.static_range({spec.streams}):",
                  "        a += tl.load(x_rows + s * sx_s + kk[None, :], mask=x_ok, other=0.0)",
                  f"    a = a / {spec.streams}"]
    else:
        lines.append("    a = tl.load(x_rows + kk[None, :], mask=x_ok, other=0.0)")
    if norm:
        lines += ["    af = a.to(tl.float32)", "    sq += tl.sum(af * af, axis=1)"]
    w_ok = "k_ok[:, None] & n_ok[None, :]"
    for i, (acc, off) in enumerate(_weights(spec)):
        lines.append(f"    b{i} = tl.load(w_cols{off} + kk[:, None], mask={w_ok}, other=0.0)")
    lines.append("    if USE_DOT:")
    for i, (acc, _) in enumerate(_weights(spec)):
        lines.append(f"        {acc} = {_dot('a', f'b{i}', acc)}")
    lines.append("    else:  # GEMV: fp32 FMAs, the K axis reduced in registers")
    for i, (acc, _) in enumerate(_weights(spec)):
        prod = f"a.to(tl.float32)[:, :, None] * b{i}.to(tl.float32)[None, :, :]"
        lines.append(f"        {acc} += tl.sum({prod}, axis=1)")
    if norm:
        lines.append(f"scale = tl.rsqrt(sq / {spec.k} + {float(spec.eps)!r})[:, None]")
        lines += [f"{acc} = {acc} * scale" for acc, _ in _weights(spec)]
    return lines


def _dot(a: str, b: str, acc: str) -> str:
    if CONFIG.interpret:  # the interpreter mis-computes low-precision dots: upcast both operands
        return f"tl.dot({a}.to(tl.float32), {b}.to(tl.float32), {acc})"
    return f"tl.dot({a}.to({b}.dtype), {b}, {acc})"


def _epilogue(spec: MatmulSpec) -> list[str]:
    lines = ["o_ok = m_ok[:, None] & n_ok[None, :]", "o_rows = out_ptr + rm64[:, None] * so_t"]
    store = "tl.store(o_rows + rn[None, :], {}.to(out_ptr.dtype.element_ty), mask=o_ok)"
    if spec.epilogue == "store":
        return lines + [store.format("acc")]
    if spec.epilogue == "swiglu":
        g, u, lim = "acc_g", "acc_u", spec.limit
        if lim is not None:
            lines += [f"acc_g = tl.minimum(acc_g, {float(lim)!r})",
                      f"acc_u = tl.minimum(tl.maximum(acc_u, {-float(lim)!r}), {float(lim)!r})"]
        return lines + [f"h = {g} * tl.sigmoid({g}) * {u}", store.format("h")]
    lines.append("s_rows = stream_ptr + rm64[:, None] * sst_t")
    if spec.epilogue == "residual":
        return lines + ["r = tl.load(s_rows + rn[None, :], mask=o_ok, other=0.0)",
                        store.format("(r + acc)")]
    return lines + _hc_post(spec)


def _hc_post(spec: MatmulSpec) -> list[str]:
    # every stream tile is loaded before any store, so out may alias the stream X
    n = spec.hc
    lines = [f"x{i} = tl.load(s_rows + {i} * sst_h + rn[None, :], mask=o_ok, other=0.0)"
             for i in range(n)]
    lines += ["p_rows = post_ptr + rm64 * sp_t", "c_rows = comb_ptr + rm64 * sc_t"]
    for j in range(n):
        lines.append(f"o = tl.load(p_rows + {j}, mask=m_ok, other=0.0)[:, None] * acc")
        for i in range(n):
            lines.append(f"o += tl.load(c_rows + {i} * sc_i + {j}, mask=m_ok, other=0.0)"
                         f"[:, None] * x{i}")
        lines.append(f"tl.store(o_rows + {j} * so_h + rn[None, :], o, mask=o_ok)")
    return lines


def source(name: str, spec: MatmulSpec, header: str = "") -> str:
    """Triton source defining the kernel `name` for `spec` (deterministic: same spec, same text)."""
    head = [f"# {line}".rstrip() for line in header.splitlines()]
    body = _setup(spec) + _loop(spec) + _epilogue(spec)
    lines = head + ["import triton", "import triton.language as tl", "", ""]
    lines += _signature(name, spec) + ["    " + line for line in body]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- launch


@dataclass(frozen=True)
class Tiles:
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    use_dot: bool
    num_warps: int
    num_stages: int


def tiles(spec: MatmulSpec, rows: int) -> Tiles:
    """Block sizes for `rows` rows: the GEMV tiling up to GEMV_MAX_ROWS, tensor-core tiles above."""
    if rows <= GEMV_MAX_ROWS:
        return _gemv_tiles(spec, rows)
    wide = spec.epilogue in ("swiglu", "hc_post")  # two accumulators / hc stream tiles in registers
    block_m = 64 if rows <= 64 else 128
    block_n = 64 if wide or block_m == 64 else 128
    return Tiles(block_m, block_n, 64, 8, True, 4 if block_m == 64 else 8, 3)


def _gemv_tiles(spec: MatmulSpec, rows: int) -> Tiles:
    r = triton.next_power_of_2(rows)
    # about 8K fp32 products per step keeps the [rows, BLOCK_K, BLOCK_N] product in registers
    block_k = min(triton.next_power_of_2(spec.k), 256 if r == 1 else 128 if r <= 4 else 64)
    block_n = max(8, 8192 // (r * block_k))
    return Tiles(r, block_n, block_k, 1, False, 4, 4)


def _strides(spec: MatmulSpec, x, out, stream, post, comb) -> dict[str, int]:
    s = {"sx_t": x.stride(0), "so_t": out.stride(0)}
    if spec.prologue == "mean_rmsnorm":
        s["sx_s"] = x.stride(1)
    if spec.epilogue in ("residual", "hc_post"):
        s["sst_t"] = stream.stride(0)
    if spec.epilogue == "hc_post":
        s.update(so_h=out.stride(1), sst_h=stream.stride(1), sp_t=post.stride(0),
                 sc_t=comb.stride(0), sc_i=comb.stride(1))
    return s


def _check(spec: MatmulSpec, x, w, out, stream, post, comb) -> None:
    x_dims = 3 if spec.prologue == "mean_rmsnorm" else 2
    o_dims = 3 if spec.epilogue == "hc_post" else 2
    assert x.dim() == x_dims and x.shape[-1] == spec.k, f"x {tuple(x.shape)} for {spec}"
    assert tuple(w.shape) == (spec.n, spec.k) and w.is_contiguous(), f"w {tuple(w.shape)}"
    assert out.dim() == o_dims and out.shape[-1] == spec.n_out, f"out {tuple(out.shape)}"
    if spec.prologue == "mean_rmsnorm":
        assert x.shape[1] == spec.streams, f"x {tuple(x.shape)}: {spec.streams} streams"
    if spec.epilogue in ("residual", "hc_post"):
        assert stream is not None and stream.shape[1:] == out.shape[1:], "stream shape"
    if spec.epilogue == "hc_post":
        assert out.shape[1] == spec.hc and post is not None and comb is not None
        assert post.stride(-1) == 1 and comb.stride(-1) == 1, "post/comb: last dim contiguous"
    for t in (x, out, stream):
        assert t is None or t.stride(-1) == 1, "the last dim must be contiguous"


def launch(kernel, spec: MatmulSpec, *, x: torch.Tensor, w: torch.Tensor, out: torch.Tensor,
           rows: int, stream: torch.Tensor | None = None, post: torch.Tensor | None = None,
           comb: torch.Tensor | None = None) -> None:
    """Run `kernel` (from `source(..., spec)`) on the first `rows` rows of the operands."""
    _check(spec, x, w, out, stream, post, comb)
    if rows <= 0:
        return
    t = tiles(spec, rows)
    bound = {"x_ptr": x, "w_ptr": w, "out_ptr": out, "stream_ptr": stream, "post_ptr": post,
             "comb_ptr": comb, "rows": rows, **_strides(spec, x, out, stream, post, comb)}
    grid = (triton.cdiv(rows, t.block_m) * triton.cdiv(spec.n_out, t.block_n),)
    kernel[grid](*(bound[p] for p in _params(spec)), BLOCK_M=t.block_m, BLOCK_N=t.block_n,
                 BLOCK_K=t.block_k, GROUP_M=t.group_m, USE_DOT=t.use_dot,
                 num_warps=t.num_warps, num_stages=t.num_stages)
