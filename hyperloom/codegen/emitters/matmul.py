"""Projection GEMMs with a norm prologue and a fused epilogue.

`source(name, spec)` emits the `@triton.jit` kernels `kernel_names(name, spec)`;
`matmul_launch.launch(kernels, spec, ...)` runs them in that order. out = epilogue(prologue(x)
@ w.T), accumulated in fp32:

- prologue "none": the GEMM row is x[t] ([rows, K], act dtype or fp32);
  "rmsnorm": the row is x[t] and the result row is scaled by rsqrt(mean(x[t]^2) + eps); one pass
  over K yields the dot and sum(x^2) together (the tiled path loads each x tile twice, the second
  time from cache: see below);
  "mean_rmsnorm": x is [rows, streams, K] fp32 and the row is h[t] = m * rsqrt(mean(m^2) + eps),
  m = mean_i x[t, i]. A row kernel `{name}_norm` writes h, in w's dtype, to a scratch buffer
  [>= rows, K] (the caller's, `h=`), then `{name}` is the prologue-"none" GEMM of the same spec
  reading h: loading `streams` fp32 tiles per K step inside the GEMM starved its pipeline.
  The norm weight is folded into w.
  "gated_rmsnorm" (spec.group > 0: KDA's o_norm): the row is x[t] normed over each group of
  `group` columns, times the norm weight and sigmoid(gate[t]) (`gate=`, `nw=`): `emitters.norm`'s
  gated kernel `{name}_norm` writes it to a scratch h [>= rows, K], then the plain GEMM reads h.
  Applying it to each x tile inside the GEMV (K steps of whole groups) took 56 us on the H200
  for GLM-5.3's o_proj at one row, against 21.7 for norm kernel + GEMV: the register work on
  the x tile stalls the GEMV's async-copy pipeline.
- epilogue "store": out [rows, N] = result, cast to out's dtype;
  "swiglu": w is [2I, K] (gate rows, then up rows), out [rows, I] = silu(min(g, L)) * clamp(u, L);
  "residual": out [rows, N] fp32 = stream + result (out may be stream);
  "kda_gate" (spec.gate: KDA's decay gate on f_b's projection): out [rows, N] fp32 = the gate
  (`emitters.kda_gate`) of result + dt_bias (`dt=`), each column at its head's rate exp(A_log)
  (`alog=`);
  "gated_norm" (spec.group: KDA's o_norm gated by g_b's projection): out [rows, N] = the gated
  RMSNorm of normed[t] (`normed=` [rows, N], norm weight `nw=` [group]) over each group of
  columns, times sigmoid(result); every tiling's column block is one group;
  "hc_post": out[t, j] = post[t, j] * result[t] + sum_i comb[t, i, j] * X[t, i], X = stream
  [rows, hc, N] fp32, over column chunks of the tile (out may be X: a chunk loads all its hc
  stream tiles before storing any). A step of more than SPLIT_ROWS rows runs it apart instead:
  the plain GEMM stores result rows to a scratch y [rows, N] (`scratch_y`), then the `hc_post`
  emitter's kernel mixes the streams (on the H200 at 2048 rows, o_proj-sized: 107 + 75 us
  against 279 fused, because a tile's epilogue stream traffic does not overlap any GEMM work).
  With spec.addend (residual or hc_post), result[t] += addend[t] first ([rows, N], `addend=`: a
  MoE block's routed output added to its shared expert's down projection); a wide hc_post
  step's GEMM stores result + addend to y (the "residual" epilogue into y).
  With spec.site (CONFIG.fold_sites), a one-row step also runs the hc_pre of the site that reads
  the new streams: partials of X' @ fn^T per program, then `hc_pre`'s row finish in the last
  program by ticket (`finishes_site`). With spec.site_parts it writes the partials with the
  streams' sum(x^2) in column J and the streams' hi/lo parts (`Site.parts`) instead, and the
  GEMV after the site forms y (spec.site_in: `matmul_sites`'s form_gates, form_loads, form_result).

Tensors may be row-strided views (only the last dim must be contiguous); w is contiguous [N, K].
Two GEMM paths, picked at launch by rows: rows <= 16 take a GEMV-style tiling (one row block
holding every row, so each weight element is read once per launch, narrow column blocks, deep K
steps); more rows take tensor-core tiles sized for Hopper bf16. Under CONFIG.interpret the source
upcasts every tl.dot operand to fp32 (the interpreter mis-computes bf16 dots).
"""

from __future__ import annotations

import dataclasses

from hyperloom.codegen.emitters import hc_post, hc_pre, norm
from hyperloom.codegen.emitters.matmul_epilogues import epilogue, hc_post_helpers
from hyperloom.codegen.emitters.matmul_spec import (  # noqa: F401 (API: the spec and its vocabularies)
    EPILOGUES, NORM_KERNEL, PROLOGUES, MatmulSpec)
from hyperloom.codegen.emitters.gemv import site_block, site_programs  # noqa: F401 (API)
from hyperloom.codegen.emitters.matmul_sites import (  # noqa: F401 (API: Site, SiteIn, ...)
    Site, SiteIn, bind_form, bind_site, finishes_site, form_gates, form_loads, form_result,
    form_rows, site_parts)
from hyperloom.codegen.emitters.matmul_tiles import Tiles, tiles  # noqa: F401 (API)
from hyperloom.codegen.emitters.text import indented, pdl, wrap
from hyperloom.config import CONFIG
from hyperloom.passes.kernel_plan import APART_ROWS

SPLIT_ROWS = APART_ROWS  # hc_post epilogue: wider steps run the GEMM and hc_post apart


def gemm_spec(spec: MatmulSpec) -> MatmulSpec:
    """The spec of the GEMM kernel: mean_rmsnorm's and gated_rmsnorm's run on rows their norm
    kernel already normed."""
    if spec.prologue in NORM_KERNEL:
        return dataclasses.replace(spec, prologue="none", group=0, mean_in=False)
    return spec


def mean_spec(spec: MatmulSpec) -> MatmulSpec:
    """The GEMM of a spec.mean_in step: the rmsnorm prologue on the stored stream mean."""
    return dataclasses.replace(spec, prologue="rmsnorm", streams=1, mean_in=False)


def kernel_names(name: str, spec: MatmulSpec) -> tuple[str, ...]:
    """The kernels `source(name, spec)` defines: (norm, GEMM) for mean_rmsnorm and
    gated_rmsnorm; hc_post adds its wide-step pair (plain GEMM into y, hc_post); mean_in the
    GEMM on the stored stream mean (mean_spec)."""
    names = (f"{name}_norm", name) if spec.prologue in NORM_KERNEL else (name,)
    names += (f"{name}_mean",) if spec.mean_in else ()
    return names + ((f"{name}_y", f"{name}_post") if spec.epilogue == "hc_post" else ())


def split_spec(spec: MatmulSpec) -> MatmulSpec:
    """The GEMM of a wide hc_post step: the same product, stored as is (with the addend:
    stored with it added, the "residual" epilogue over the addend)."""
    epilogue = "residual" if spec.addend else "store"
    return dataclasses.replace(gemm_spec(spec), epilogue=epilogue, hc=1, site=None,
                               site_parts=False, addend=False, mean_out=False)


def norm_spec(spec: MatmulSpec) -> norm.NormSpec:
    """gated_rmsnorm's row kernel."""
    return norm.NormSpec("gated_rmsnorm", spec.k, spec.group, spec.eps)


SITE_PARAMS = ("fn_ptr", "base_ptr", "scale_ptr", "y_ptr", "spost_ptr", "scomb_ptr", "part_ptr",
               "count_ptr", "s_fn", "s_y", "s_post", "s_comb", "s_comb_i")
SITE_PARTS_PARAMS = ("fn_ptr", "part_ptr", "parts_ptr", "s_fn")  # spec.site_parts
SITE_IN_PARAMS = ("parts_ptr", "part_ptr", "base_ptr", "scale_ptr", "spost_ptr", "scomb_ptr",
                  "s_comb_i")


# ---------------------------------------------------------------- source


def params(spec: MatmulSpec) -> list[str]:
    """Runtime parameters of the kernel, in order; `matmul_launch` binds them by name."""
    names = ["x_ptr", "w_ptr", "out_ptr"]
    if spec.epilogue in ("residual", "hc_post"):
        names.append("stream_ptr")
    if spec.epilogue == "hc_post":
        names += ["post_ptr", "comb_ptr"]
    if spec.addend:
        names += ["add_ptr", "sa_t"]
    if spec.epilogue == "kda_gate":
        names += ["bias_ptr", "alog_ptr"]
    if spec.epilogue == "gated_norm":
        names += ["normed_ptr", "nw_ptr", "sn_t"]
    names += ["rows", "sx_t", "so_t"]
    if spec.epilogue == "hc_post":
        names.append("so_h")
    if spec.epilogue in ("residual", "hc_post"):
        names.append("sst_t")
    if spec.epilogue == "hc_post":
        names += ["sst_h", "sp_t", "sc_t", "sc_i"]
    if spec.mean_out:
        names += ["mean_ptr", "sm_t"]
    if spec.site_in:
        return names + list(SITE_IN_PARAMS)
    if not spec.site:
        return names
    if spec.site_parts:
        return names + list(SITE_PARTS_PARAMS)
    return names + list(SITE_PARAMS) + ["ow_ptr"] * spec.site.out_weight


_CONSTEXPRS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "GEMV")


def _constexprs(spec: MatmulSpec) -> tuple[str, ...]:
    return _CONSTEXPRS + (("SITE",) if spec.site else ()) \
        + (("FORM",) if spec.site_in else ())


def _signature(name: str, spec: MatmulSpec) -> list[str]:
    args = params(spec) + [f"{c}: tl.constexpr" for c in _constexprs(spec)]
    return ['@triton.jit(do_not_specialize=["rows"])', f"def {name}(",
            *wrap("    ", args, "):", 4).splitlines()]


def _setup(spec: MatmulSpec) -> list[str]:
    """Grouped program order (row blocks of GROUP_M share weight column blocks in L2)."""
    # a step that forms spec.site_in's y runs one program more, first (`form_gates`)
    return [
        "pid = tl.program_id(0) - FORM" if spec.site_in else "pid = tl.program_id(0)",
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
    """The K loop. Row statistics of the norm prologues accumulate elementwise in a [BLOCK_M,
    BLOCK_K] tile, reduced once after the loop (no cross-thread reduction inside it)."""
    accs = _weights(spec)
    lines = [f"{acc} = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)" for acc, _ in accs]
    if spec.prologue in ("rmsnorm", "mean_rmsnorm"):
        lines.append("sq2 = tl.zeros([BLOCK_M, BLOCK_K], dtype=tl.float32)")
    if spec.prologue == "rmsnorm":
        lines.append("sqm = tl.zeros([BLOCK_M, BLOCK_M], dtype=tl.float32)  # GEMV: x x^T")
    lines += [f"for k0 in range(0, {spec.k}, BLOCK_K):", "    kk = k0 + rk",
              f"    k_ok = kk < {spec.k}", "    x_ok = m_ok[:, None] & k_ok[None, :]"]
    w_ok = "k_ok[:, None] & n_ok[None, :]"
    lines += [f"    b{i} = tl.load(w_cols{off} + kk[:, None], mask={w_ok}, other=0.0)"
              for i, (_, off) in enumerate(accs)]
    body = _register_body(spec)
    if spec.site_in:  # the A rows: the streams' hi parts, then their lo parts
        form = [f"a = tl.load(x_rows + kk[None, :], mask=(rm < {form_rows(spec)})[:, None] "
                "& k_ok[None, :], other=0.0)"]
        body = ["if FORM:"] + indented(form) + ["else:"] + indented(body[:1]) + body[1:]
    if spec.prologue == "rmsnorm":
        # GEMV: sum(x^2) = diag(x x^T) on the tensor cores too, so the x tile feeds only dots
        # and stays in the async-copy pipeline (reducing it in registers cost 2-3x here)
        gemv = ["a = tl.load(x_rows + kk[None, :], mask=x_ok, other=0.0)",
                f"sqm = {_dot('a', 'tl.trans(a)', 'sqm', cast=False)}"] + _dots_of("a", spec)
        body = ["if GEMV:"] + indented(gemv) + ["else:"] + indented(body)
    return lines + indented(body) + _normalize(spec)


def _dots_of(a: str, spec: MatmulSpec) -> list[str]:
    return [f"{acc} = {_dot(a, f'b{i}', acc)}" for i, (acc, _) in enumerate(_weights(spec))]


def _register_body(spec: MatmulSpec) -> list[str]:
    if spec.prologue == "rmsnorm":
        # a second load for the statistics: on the H200, one loaded tile feeding both a wgmma
        # (from shared memory) and a register reduction gave rows scaled off by up to 15%, a
        # race; the differing eviction hint keeps the two loads from being merged
        lines = ["a = tl.load(x_rows + kk[None, :], mask=x_ok, other=0.0)",
                 "af = tl.load(x_rows + kk[None, :], mask=x_ok, other=0.0,",
                 '             eviction_policy="evict_last").to(tl.float32)',
                 "sq2 += af * af"]
    else:
        lines = ["a = tl.load(x_rows + kk[None, :], mask=x_ok, other=0.0)"]
    return lines + _dots_of("a", spec)


def _normalize(spec: MatmulSpec) -> list[str]:
    if spec.prologue == "none":
        return []
    assert spec.prologue == "rmsnorm", "mean_rmsnorm's GEMM is gemm_spec(spec)'s"
    lines = ["if GEMV:", "    i = tl.arange(0, BLOCK_M)",
             "    sq = tl.sum(tl.where(i[:, None] == i[None, :], sqm, 0.0), axis=1)",
             "else:", "    sq = tl.sum(sq2, axis=1)"]
    lines.append(f"scale = tl.rsqrt(sq / {spec.k} + {float(spec.eps)!r})[:, None]")
    return lines + [f"{acc} = {acc} * scale" for acc, _ in _weights(spec)]


def _dot(a: str, b: str, acc: str, cast: bool = True) -> str:
    if CONFIG.interpret:  # the interpreter mis-computes low-precision dots: upcast both operands
        return f"tl.dot({a}.to(tl.float32), {b}.to(tl.float32), {acc})"
    return f"tl.dot({a}.to({b}.dtype), {b}, {acc})" if cast else f"tl.dot({a}, {b}, {acc})"


def _mean_row(spec: MatmulSpec, policy: str) -> list[str]:
    """One BLOCK_K chunk of the stream mean m of row t, in fp32."""
    return ["kk = k0 + rk", f"k_ok = kk < {spec.k}",
            "m = tl.zeros([BLOCK_K], dtype=tl.float32)",
            f"for s in tl.static_range({spec.streams}):",
            "    m += tl.load(x_row + s * sx_s + kk, mask=k_ok, other=0.0,",
            f'                 eviction_policy="{policy}").to(tl.float32)',
            f"m = m / {spec.streams}"]


def _norm_kernel(name: str, spec: MatmulSpec) -> list[str]:
    """mean_rmsnorm's row kernel, one program a row: h[t] = m * rsqrt(mean(m^2) + eps) with
    m = mean_i x[t, i], in h's dtype. Two passes over the row: sum(m^2) (accumulated elementwise,
    reduced once), then scale and store (the second pass reads x from cache: the first pass
    asks L2 to keep the row, the second lets it go)."""
    body = [*pdl("").splitlines(),
            "t = tl.program_id(0).to(tl.int64)  # row offsets of big activations overflow int32",
            "x_row = x_ptr + t * sx_t", "h_row = h_ptr + t * sh_t", "rk = tl.arange(0, BLOCK_K)",
            "sq2 = tl.zeros([BLOCK_K], dtype=tl.float32)",
            f"for k0 in range(0, {spec.k}, BLOCK_K):"]
    body += indented(_mean_row(spec, "evict_last") + ["sq2 += m * m"])
    body += [f"scale = tl.rsqrt(tl.sum(sq2, axis=0) / {spec.k} + {float(spec.eps)!r})",
             f"for k0 in range(0, {spec.k}, BLOCK_K):"]
    body += indented(_mean_row(spec, "evict_first")
                    + ["tl.store(h_row + kk, (m * scale).to(h_ptr.dtype.element_ty), mask=k_ok)"])
    return ["@triton.jit", f"def {name}(x_ptr, h_ptr, sx_t, sx_s, sh_t, BLOCK_K: tl.constexpr):"] \
        + indented(body)


def _gemm_kernel(name: str, spec: MatmulSpec) -> list[str]:
    wait = pdl("").splitlines()
    if spec.site_in:
        body = _setup(spec) + wait + form_gates(spec) + form_loads(spec) + _loop(spec) \
            + form_result(spec, [acc for acc, _ in _weights(spec)]) + epilogue(spec)
    else:
        body = _setup(spec) + wait + _loop(spec) + epilogue(spec)
    return _signature(name, spec) + indented(body)


def source(name: str, spec: MatmulSpec, header: str = "") -> str:
    """Triton source defining the kernels `kernel_names(name, spec)` (deterministic: same spec,
    same text). mean_rmsnorm: the norm kernel, then exactly the GEMM of `gemm_spec(spec)`."""
    head = [f"# {line}".rstrip() for line in header.splitlines()]
    lines = head + ["import triton", "import triton.language as tl", "", ""]
    if spec.prologue == "mean_rmsnorm":
        lines += _norm_kernel(kernel_names(name, spec)[0], spec) + ["", ""]
    if spec.prologue == "gated_rmsnorm":
        lines += norm.kernel_source(kernel_names(name, spec)[0], norm_spec(spec)).strip(
            "\n").splitlines() + ["", ""]
    if spec.epilogue == "hc_post":
        lines += hc_post_helpers(spec) + ["", ""]
    if spec.site and not spec.site_parts:
        lines += hc_pre.finish_source(spec.site).strip("\n").splitlines() + ["", ""]
    if spec.site_in:
        lines += hc_pre.gates_source(spec.site_in).strip("\n").splitlines() + ["", ""]
    lines += _gemm_kernel(name, gemm_spec(spec))
    if spec.mean_in:
        lines += ["", ""] + _gemm_kernel(f"{name}_mean", mean_spec(spec))
    if spec.epilogue == "hc_post":
        lines += ["", ""] + _gemm_kernel(f"{name}_y", split_spec(spec)) + ["", ""]
        lines.append(hc_post.kernel_source(f"{name}_post", hc_post.HCPostSpec(spec.hc, spec.n_out)))
    return "\n".join(lines).rstrip("\n") + "\n"
