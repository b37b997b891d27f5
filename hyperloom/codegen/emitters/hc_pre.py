"""mHC pre-site kernels: exactly `hyperloom.ir.semantics.hc.hc_pre`, in two launches
(`kernel_names`) for any number of rows.

Inputs X fp32 [rows, n, D], fn [(2+n)*n, n*D] (bf16 or fp32), base fp32 [(2+n)*n], scale fp32 [3];
outputs y [rows, D] (fp32, or the weights' dtype with the site norm folded in), post fp32
[rows, n], comb fp32 [rows, n, n].

{name}_proj, grid (cdiv(rows, BLOCK_T), splits): split-K over column blocks of D, every stream
of a block at once, so a few rows still spread over the multiprocessors (decode: one split per
block) and many rows sweep X once with contiguous vector loads. A program writes to a scratch row
[split, row, JP + GP] its partial projections m = X_flat @ fn^T and the partial Gram matrix
G[i, k] = x_i . x_k of the row's streams (i <= k): trace(G) is sum(x^2) for the stream norm, and
pre^T G pre is sum(y^2) for the folded site norm, so no program needs a whole row.

{name}_finish, grid (rows, cdiv(D, BLOCK_Y)): a program sums its row's partials, forms the gates
and writes its BLOCK_Y columns of y = sum_i pre[i] * X[i] (times rms(y) with out_eps); the
program of column block 0 also writes post and comb (Sinkhorn, in registers).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from hyperloom.codegen.emitters.loops import runtime_loop
from hyperloom.codegen.emitters.text import comment, wrap
from hyperloom.config import CONFIG

BLOCK_T = 16  # rows per projection program; tl.dot needs M >= 16
BLOCK_K = 64  # columns of every stream a projection program loads at once
SMS = 132  # H200 multiprocessors
MAX_SPLITS = 128
SPLIT_BLOCK = 64  # splits whose partials a finish sums per load
BLOCK_Y = 512  # columns of y per finish program: [n, 512] of X, 16 registers a thread
PROJ_WARPS, FINISH_WARPS = 4, 4

_INTERPRET_DOT = "acc = tl.dot(x{i}, tl.trans(w.to(tl.float32)), acc)\n"
# The projections feed sigmoids and 20 Sinkhorn rounds, and plain tf32 would cost ~1e-3 relative.
# bf16 weights are exact in bf16: X split as hi + lo bf16 parts gives ~2^-16 relative error from
# two bf16 MMAs; fp32 weights take tf32x3.
_GPU_DOT = """wt = tl.trans(w)
if fn_ptr.dtype.element_ty == tl.bfloat16:
    hi = x{i}.to(tl.bfloat16)
    acc = tl.dot(hi, wt, acc)
    acc = tl.dot((x{i} - hi.to(tl.float32)).to(tl.bfloat16), wt, acc)
else:
    acc = tl.dot(x{i}, wt.to(tl.float32), acc, input_precision="tf32x3")
"""


@dataclass(frozen=True)
class HCPreSpec:
    n: int
    d: int
    norm_eps: float
    hc_eps: float
    iters: int
    out_eps: float | None = None  # the site's RMSNorm folded in: y = rms(y)


def kernel_names(name: str) -> tuple[str, str]:
    """(projection kernel, finish kernel) defined by source(name, ...)."""
    return f"{name}_proj", f"{name}_finish"


def _indent(text: str, by: int) -> str:
    return "".join(" " * by + line if line.strip() else line
                   for line in text.splitlines(keepends=True))


def _blocks(spec: HCPreSpec) -> dict[str, int]:
    d2 = triton.next_power_of_2(spec.d)
    np2 = triton.next_power_of_2(spec.n)
    j = (2 + spec.n) * spec.n  # projections: n pre, n post, n*n comb logits
    jp = max(16, triton.next_power_of_2(j))  # tl.dot N >= 16
    gp = np2 * np2  # Gram entries i * N + k
    return {"J": j, "NP": np2, "JP": jp, "GP": gp, "JQ": jp + gp,
            "BLOCK_K": max(16, min(BLOCK_K, d2)), "BLOCK_Y": min(BLOCK_Y, d2)}


_CONSTS = ("N", "D", "J", "NP", "JP", "GP", "JQ", "BLOCK_T", "BLOCK_K", "BLOCK_Y", "SB",
           "NORM_EPS", "HC_EPS", "ITERS")
_SIG = ["x_ptr", "fn_ptr", "base_ptr", "scale_ptr", "y_ptr", "post_ptr", "comb_ptr", "part_ptr",
        "rows", "rows_pad", "splits", "kb_split", "sx_row", "sx_stream", "s_fn", "sy_row",
        "spost_row", "scomb_row", "scomb_i"]


def _constexprs(spec: HCPreSpec) -> list[str]:
    vals = _blocks(spec) | {"N": spec.n, "D": spec.d, "BLOCK_T": BLOCK_T, "SB": SPLIT_BLOCK,
                            "NORM_EPS": spec.norm_eps, "HC_EPS": spec.hc_eps,
                            "ITERS": spec.iters}
    return [f"{k}: tl.constexpr = {vals[k]!r}" for k in _CONSTS]


def _stream_block(n: int) -> str:
    """Loop body over one column block: each stream's [BLOCK_T, BLOCK_K] tile, its MMAs, and
    its Gram products with the streams before it (unrolled: n is fixed per kernel)."""
    dot = _INTERPRET_DOT if CONFIG.interpret else _GPU_DOT
    lines = []
    for i in range(n):
        lines.append(f"x{i} = tl.load(x_row + {i} * sx_stream + c[None, :], mask=xmask, "
                     "other=0.0).to(tl.float32)\n"
                     f"w = tl.load(fn_ptr + j[:, None] * s_fn + {i} * D + c[None, :], "
                     "mask=wmask, other=0.0)\n" + dot.format(i=i))
        lines += [f"p{k}_{i} += x{k} * x{i}\n" for k in range(i + 1)]
    return "".join(lines)


def _gram(n: int, op: str) -> str:
    """The Gram products' elementwise accumulators: zeroed ("init") before the column loop,
    reduced into gram[:, k * n + i] ("reduce") after it, once."""
    pairs = [(k, i) for i in range(n) for k in range(i + 1)]
    if op == "init":
        return "".join(f"p{k}_{i} = tl.zeros((BLOCK_T, BLOCK_K), tl.float32)\n"
                       for k, i in pairs)
    return "".join(f"gram += tl.where(g[None, :] == {k * n + i}, "
                   f"tl.sum(p{k}_{i}, axis=1)[:, None], 0.0)\n" for k, i in pairs)


def _proj_source(name: str, spec: HCPreSpec) -> str:
    head, tail = runtime_loop("b", "b_lo", "b_hi", "1", " " * 4)
    params = _SIG + _constexprs(spec)
    return f'''
@triton.jit(do_not_specialize=["rows", "rows_pad", "splits", "kb_split"])
{wrap(f"def {name}(", params, "):", 8)}
    """This program's column blocks of m = X_flat @ fn^T and of the Gram matrix of its BLOCK_T
    rows, to the scratch."""
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    tmask = t < rows
    j = tl.arange(0, JP)
    g = tl.arange(0, GP)
    cc = tl.arange(0, BLOCK_K)
    x_row = x_ptr + t.to(tl.int64)[:, None] * sx_row
    b_lo = tl.program_id(1) * kb_split
    b_hi = tl.minimum(b_lo + kb_split, (D + BLOCK_K - 1) // BLOCK_K)
    acc = tl.zeros((BLOCK_T, JP), tl.float32)
{_indent(_gram(spec.n, "init"), 4)}{head}        c = b * BLOCK_K + cc
        xmask = tmask[:, None] & (c < D)[None, :]
        wmask = (j < J)[:, None] & (c < D)[None, :]
{_indent(_stream_block(spec.n), 8)}{tail}    gram = tl.zeros((BLOCK_T, GP), tl.float32)
{_indent(_gram(spec.n, "reduce"), 4)}    srow = (tl.program_id(1) * rows_pad + t).to(tl.int64)
    part = part_ptr + srow[:, None] * JQ
    tl.store(part + j[None, :], acc, mask=tmask[:, None])
    tl.store(part + JP + g[None, :], gram, mask=tmask[:, None])
'''


def _finish_source(name: str, spec: HCPreSpec) -> str:
    sums, sume = runtime_loop("s0", "0", "splits", "SB", "    ")
    out_eps = [] if spec.out_eps is None else [f"OUT_EPS: tl.constexpr = {spec.out_eps!r}"]
    norm = "" if spec.out_eps is None else '''
    # sum(y^2) = pre^T G pre, G stored as its upper triangle
    gi, gk = g // N, g % N
    tri = (gi <= gk) & (gi < N)
    pre_i = tl.sum(tl.where(gi[:, None] == ii[None, :], pre[None, :], 0.0), axis=1)
    pre_k = tl.sum(tl.where(gk[:, None] == ii[None, :], pre[None, :], 0.0), axis=1)
    yy = tl.sum(tl.where(tri, tl.where(gi == gk, 1.0, 2.0) * pre_i * pre_k * gm, 0.0), axis=0)
    y = y * tl.rsqrt(tl.maximum(yy, 0.0) / D + OUT_EPS)'''
    return f'''
@triton.jit(do_not_specialize=["rows", "rows_pad", "splits", "kb_split"])
{wrap(f"def {name}(", _SIG + _constexprs(spec) + out_eps, "):", 8)}
    """Row program_id(0): the gates from its partials, BLOCK_Y columns of y; block 0 also
    post and comb."""
    row = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, JP)
    g = tl.arange(0, GP)
    ii = tl.arange(0, NP)
    sb = tl.arange(0, SB)
    m = tl.zeros((JP,), tl.float32)
    gm = tl.zeros((GP,), tl.float32)
{sums}        part = part_ptr + ((s0 + sb)[:, None] * rows_pad + row) * JQ
        live = (s0 + sb < splits)[:, None]
        m += tl.sum(tl.load(part + j[None, :], mask=live, other=0.0, cache_modifier=".cg"), 0)
        gm += tl.sum(tl.load(part + JP + g[None, :], mask=live, other=0.0,
                             cache_modifier=".cg"), 0)
{sume}    # rms(x) @ fn^T == rsqrt(mean(x^2) + eps) * (x @ fn^T); sum(x^2) = trace(G)
    ss = tl.sum(tl.where((g // N == g % N) & (g < N * N), gm, 0.0), axis=0)
    sc = tl.where(j < N, tl.load(scale_ptr), tl.where(j < 2 * N, tl.load(scale_ptr + 1),
                                                       tl.load(scale_ptr + 2)))
    z = m * tl.rsqrt(ss / (N * D) + NORM_EPS) * sc + tl.load(base_ptr + j, mask=j < J,
                                                             other=0.0)
    sig = tl.sigmoid(z)
    # register tensors cannot be sliced: pick columns out with one-hot masked sums
    pre = tl.sum(tl.where(j[None, :] == ii[:, None], sig[None, :], 0.0), axis=1) + HC_EPS

    d = tl.program_id(1) * BLOCK_Y + tl.arange(0, BLOCK_Y)
    x = tl.load(x_ptr + row * sx_row + ii[:, None] * sx_stream + d[None, :],
                mask=(ii < N)[:, None] & (d < D)[None, :], other=0.0)
    y = tl.sum(pre[:, None] * x, axis=0){norm}
    tl.store(y_ptr + row * sy_row + d, y.to(y_ptr.dtype.element_ty), mask=d < D)
    if tl.program_id(1) == 0:
        tl.store(post_ptr + row * spost_row + (j - N), 2.0 * sig, mask=(j >= N) & (j < 2 * N))
        _sinkhorn(z, comb_ptr + row * scomb_row, scomb_i, N, NP, JP, HC_EPS, ITERS)
'''


_SINKHORN = '''
@triton.jit
def _sinkhorn(z, comb_ptr, scomb_i, N: tl.constexpr, NP: tl.constexpr, JP: tl.constexpr,
              HC_EPS: tl.constexpr, ITERS: tl.constexpr):
    """comb from the logits z[2N:]: a row softmax, then alternate column and row norms."""
    j = tl.arange(0, JP)
    ii = tl.arange(0, NP)
    col = 2 * N + ii[:, None] * N + ii[None, :]  # [NP, NP] column of comb logit (a, b)
    valid = (ii[:, None] < N) & (ii[None, :] < N)
    hit = (j[None, None, :] == col[:, :, None]) & valid[:, :, None]
    logits = tl.sum(tl.where(hit, z[None, None, :], 0.0), axis=2)
    # a finite fill keeps padded rows NaN-free, they are zeroed after the softmax
    logits = tl.where(valid, logits, -1e30)
    e = tl.exp(logits - tl.max(logits, axis=1)[:, None])
    c = tl.where(valid, e / tl.sum(e, axis=1)[:, None] + HC_EPS, 0.0)
    c = c / (tl.sum(c, axis=0)[None, :] + HC_EPS)
    for _ in range(ITERS - 1):
        c = c / (tl.sum(c, axis=1)[:, None] + HC_EPS)
        c = c / (tl.sum(c, axis=0)[None, :] + HC_EPS)
    tl.store(comb_ptr + ii[:, None] * scomb_i + ii[None, :], c, mask=valid)
'''


def source(name: str, spec: HCPreSpec, header: str = "") -> str:
    proj, finish = kernel_names(name)
    return (f"{comment(header)}import triton\nimport triton.language as tl\n\n{_SINKHORN}\n"
            f"{_proj_source(proj, spec)}\n{_finish_source(finish, spec)}")


def splits(spec: HCPreSpec, rows: int) -> int:
    """K splits of the projection: enough programs for ~4 per multiprocessor."""
    k_blocks = triton.cdiv(spec.d, _blocks(spec)["BLOCK_K"])
    return max(1, min(k_blocks, MAX_SPLITS, triton.cdiv(4 * SMS, triton.cdiv(rows, BLOCK_T))))


def scratch(spec: HCPreSpec, max_rows: int, device) -> torch.Tensor:
    """fp32 partials for any launch of up to max_rows rows."""
    jq = _blocks(spec)["JQ"]
    part = max(splits(spec, r) * triton.cdiv(r, BLOCK_T) * BLOCK_T
               for r in range(1, max_rows + 1, BLOCK_T)) * jq
    return torch.empty(part, dtype=torch.float32, device=device)


def launch(kernels, spec: HCPreSpec, *, x: torch.Tensor, fn: torch.Tensor, base: torch.Tensor,
           scale: torch.Tensor, y: torch.Tensor, post: torch.Tensor, comb: torch.Tensor,
           part: torch.Tensor, rows: int) -> None:
    """kernels: the two of kernel_names(name), loaded; part: from scratch(spec, >= rows)."""
    if rows == 0:
        return
    for t in (x, fn, y, post, comb):
        assert t.stride(-1) == 1, "last dims must be contiguous"
    assert base.is_contiguous() and scale.is_contiguous()
    proj, finish = kernels
    b, nsplit = _blocks(spec), splits(spec, rows)
    row_blocks = triton.cdiv(rows, BLOCK_T)
    rows_pad = row_blocks * BLOCK_T
    assert part.numel() >= nsplit * rows_pad * b["JQ"], "hc_pre scratch too small"
    kb_split = triton.cdiv(triton.cdiv(spec.d, b["BLOCK_K"]), nsplit)
    args = (x, fn, base, scale, y, post, comb, part, rows, rows_pad, nsplit, kb_split,
            x.stride(0), x.stride(1), fn.stride(0), y.stride(0), post.stride(0), comb.stride(0),
            comb.stride(1))
    proj[(row_blocks, nsplit)](*args, num_warps=PROJ_WARPS)
    finish[(rows, triton.cdiv(spec.d, b["BLOCK_Y"]))](*args, num_warps=FINISH_WARPS)
