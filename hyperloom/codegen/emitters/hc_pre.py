"""mHC pre-site kernel: exactly `hyperloom.ir.semantics.hc.hc_pre`, in one launch.

Inputs X fp32 [rows, n, D], fn [(2+n)*n, n*D] (bf16 or fp32), base fp32 [(2+n)*n], scale fp32 [3];
outputs y [rows, D] (fp32, or the weights' dtype with the site norm folded in), post fp32
[rows, n], comb fp32 [rows, n, n].

Grid (cdiv(rows, BLOCK_T), splits): split-K over D (every stream of a D range in one program), so
a few rows still spread over the multiprocessors (decode: one row block, up to 32 splits) and many
rows sweep X once. Each program writes to a scratch row [split, row] its partial projections m =
X_flat @ fn^T (JP columns) and its partial Gram matrix G[a, b] = <X_a, X_b> (n*n columns): the
stream norm is trace(G) and |y|^2 = pre^T G pre, so no pass over y is needed for either norm.
It then takes a ticket from its row block's counter; the last program of the block sums the
partials, forms the gates, runs every Sinkhorn iteration in registers, writes post, comb and y =
sum_i pre[i] * X[i] (X is still in L2: row by row for a decode block's few live rows, in [rows,
n, 128] tiles otherwise), and resets the counter for the next launch (CUDA-graph replays too).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from hyperloom.codegen.emitters.loops import runtime_loop
from hyperloom.config import CONFIG

BLOCK_T = 16  # rows per program; tl.dot needs M >= 16
SMS = 132  # H200 multiprocessors
MAX_SPLITS = 32  # the finishing program sums one partial row per split
FEW_ROWS = 4  # up to this many live rows, y is formed row by row

# The projections feed sigmoids and 20 Sinkhorn rounds, and plain tf32 would cost ~1e-3 relative.
# bf16 weights are exact in bf16: X split as hi + lo bf16 parts gives ~2^-16 relative error from
# two bf16 MMAs; fp32 weights and the Gram matrix take tf32x3. The interpreter computes in fp32.
_INTERPRET_DOTS = """        acc = tl.dot(x2, tl.trans(w2.to(tl.float32)), acc)
        gram = tl.dot(xf, tl.trans(xf), gram)"""
_GPU_DOTS = """        wt = tl.trans(w2)
        if fn_ptr.dtype.element_ty == tl.bfloat16:
            x_hi = x2.to(tl.bfloat16)
            acc = tl.dot(x_hi, wt, acc)
            acc = tl.dot((x2 - x_hi.to(tl.float32)).to(tl.bfloat16), wt, acc)
        else:
            acc = tl.dot(x2, wt.to(tl.float32), acc, input_precision="tf32x3")
        gram = tl.dot(xf, tl.trans(xf), gram, input_precision="tf32x3")"""


@dataclass(frozen=True)
class HCPreSpec:
    n: int
    d: int
    norm_eps: float
    hc_eps: float
    iters: int
    out_eps: float | None = None  # the site's RMSNorm folded in: y = rms(y)


def _comment(header: str) -> str:
    return "".join(f"# {line}\n" for line in header.splitlines())


def _blocks(spec: HCPreSpec) -> dict[str, int]:
    d2 = triton.next_power_of_2(spec.d)
    j = (2 + spec.n) * spec.n  # projections: n pre, n post, n*n comb logits
    np_ = triton.next_power_of_2(spec.n)
    jp = max(16, triton.next_power_of_2(j))  # tl.dot needs N >= 16
    return {
        "J": j, "NP": np_, "JP": jp,
        "JQ": jp + np_ * np_,  # a partial row: JP projections, then the NP x NP Gram matrix
        "BLOCK_K": max(16, min(32, d2)),  # D columns of every stream per step
        "BLOCK_D": max(16, min(128, d2)),  # y columns per step of a many-row block
        "BLOCK_Y": max(16, min(1024, d2)),  # y columns per step of one row
    }


def _mix(spec: HCPreSpec) -> str:
    """This split's partial projections and Gram matrix, stored to its scratch row."""
    dots = _INTERPRET_DOTS if CONFIG.interpret else _GPU_DOTS
    head, tail = runtime_loop("d0", "0", "d_split", "BLOCK_K", " " * 4)
    return f'''    acc = tl.zeros((BLOCK_T, JP), tl.float32)
    gram = tl.zeros((BLOCK_T * NP, BLOCK_T * NP), tl.float32)
{head}        d = d_lo + d0 + kk  # d_split is a multiple of BLOCK_K
        dmask = d < D
        x = tl.load(x_ptr + t64[:, None, None] * sx_row + ii[None, :, None] * sx_stream
                    + d[None, None, :], mask=tmask[:, None, None] & smask[None, :, None]
                    & dmask[None, None, :], other=0.0).to(tl.float32)
        w = tl.load(fn_ptr + j[:, None, None] * s_fn + ii[None, :, None] * D + d[None, None, :],
                    mask=jmask[:, None, None] & smask[None, :, None] & dmask[None, None, :],
                    other=0.0)
        x2 = tl.reshape(x, (BLOCK_T, NP * BLOCK_K))
        w2 = tl.reshape(w, (JP, NP * BLOCK_K))
        xf = tl.reshape(x, (BLOCK_T * NP, BLOCK_K))
{dots}
{tail}    # the Gram matrix of row t is the (t, t) diagonal block of the stacked rows' products
    g4 = tl.reshape(gram, (BLOCK_T, NP, BLOCK_T, NP))
    eye = rr[:, None] == rr[None, :]
    g = tl.sum(tl.where(eye[:, None, :, None], g4, 0.0), axis=2)  # [BLOCK_T, NP, NP]
    prow = part_ptr + (tl.program_id(1) * rows_pad + t64) * JQ
    tl.store(prow[:, None] + j[None, :], acc, mask=tmask[:, None])
    tl.store(prow[:, None, None] + JP + ii[None, :, None] * NP + ii[None, None, :], g,
             mask=tmask[:, None, None])
'''


def _gates() -> str:
    """Summed partials -> stream norm, gates, Sinkhorn; post and comb stored."""
    head, tail = runtime_loop("s", "0", "splits", "1", " " * 4)
    return f'''    acc = tl.zeros((BLOCK_T, JP), tl.float32)
    g = tl.zeros((BLOCK_T, NP, NP), tl.float32)
{head}        prow = part_ptr + (s * rows_pad + t64) * JQ
        acc += tl.load(prow[:, None] + j[None, :], mask=tmask[:, None], other=0.0,
                       cache_modifier=".cg")
        g += tl.load(prow[:, None, None] + JP + ii[None, :, None] * NP + ii[None, None, :],
                     mask=tmask[:, None, None], other=0.0, cache_modifier=".cg")
{tail}    diag = ii[:, None] == ii[None, :]
    ss = tl.sum(tl.sum(tl.where(diag[None], g, 0.0), axis=2), axis=1)  # trace: sum of x^2
    # rms(x) @ fn^T == rsqrt(mean(x^2) + eps) * (x @ fn^T)
    m = acc * tl.rsqrt(ss / (N * D) + NORM_EPS)[:, None]

    s0 = tl.load(scale_ptr)
    s1 = tl.load(scale_ptr + 1)
    s2 = tl.load(scale_ptr + 2)
    sc = tl.where(j < N, s0, tl.where(j < 2 * N, s1, s2))
    z = m * sc[None, :] + tl.load(base_ptr + j, mask=jmask, other=0.0)[None, :]
    sig = tl.sigmoid(z)

    is_post = (j >= N) & (j < 2 * N)
    tl.store(post_ptr + t64[:, None] * spost_row + (j - N)[None, :], 2.0 * sig,
             mask=tmask[:, None] & is_post[None, :])

    # register tensors cannot be sliced: pick columns out with one-hot masked sums
    pre = tl.sum(tl.where(j[None, None, :] == ii[None, :, None], sig[:, None, :], 0.0), axis=2)
    pre = pre + HC_EPS  # [BLOCK_T, NP]; padded streams meet masked (zero) X below
    col = 2 * N + ii[:, None] * N + ii[None, :]  # [NP, NP] column of comb logit (a, b)
    valid = (ii[:, None] < N) & (ii[None, :] < N)
    hit = (j[None, None, :] == col[:, :, None]) & valid[:, :, None]
    logits = tl.sum(tl.where(hit[None], z[:, None, None, :], 0.0), axis=3)  # [BLOCK_T, NP, NP]

    # Sinkhorn; finite fill keeps padded rows NaN-free, they are zeroed after the softmax
    logits = tl.where(valid[None], logits, -1e30)
    e = tl.exp(logits - tl.max(logits, axis=2)[:, :, None])
    c = tl.where(valid[None], e / tl.sum(e, axis=2)[:, :, None] + HC_EPS, 0.0)
    c = c / (tl.sum(c, axis=1)[:, None, :] + HC_EPS)
    for _ in range(ITERS - 1):
        c = c / (tl.sum(c, axis=2)[:, :, None] + HC_EPS)
        c = c / (tl.sum(c, axis=1)[:, None, :] + HC_EPS)
    tl.store(comb_ptr + t64[:, None, None] * scomb_row + ii[None, :, None] * scomb_i
             + ii[None, None, :], c, mask=tmask[:, None, None] & valid[None])
'''


def _collapse(spec: HCPreSpec) -> str:
    """y = sum_i pre[i] * X[i], scaled by rms(y)'s inverse when the site norm is folded in."""
    if spec.out_eps is None:
        inv = "    inv = tl.full((BLOCK_T,), 1.0, tl.float32)\n"
    else:  # |y|^2 = pre^T G pre
        inv = ("    ysq = tl.sum(tl.sum(pre[:, :, None] * pre[:, None, :] * g, axis=2), axis=1)\n"
               "    inv = tl.rsqrt(ysq / D + OUT_EPS)\n")
    rhead, rtail = runtime_loop("r", "0", "n_live", "1", " " * 8)
    return inv + f'''    n_live = tl.minimum(rows - tl.program_id(0) * BLOCK_T, BLOCK_T)
    if n_live <= FEW_ROWS:  # decode: the live rows one at a time, wide steps
        dy = tl.arange(0, BLOCK_Y)
{rhead}            one = rr == r
            pre_r = tl.sum(tl.where(one[:, None], pre, 0.0), axis=0) \\
                * tl.sum(tl.where(one, inv, 0.0), axis=0)  # [NP]
            row = (tl.program_id(0) * BLOCK_T + r).to(tl.int64)
            x_row = x_ptr + row * sx_row + ii[:, None] * sx_stream
            for d0 in range(0, D, BLOCK_Y):
                d = d0 + dy
                x = tl.load(x_row + d[None, :], mask=smask[:, None] & (d < D)[None, :],
                            other=0.0)
                y = tl.sum(pre_r[:, None] * x.to(tl.float32), axis=0)
                tl.store(y_ptr + row * sy_row + d, y.to(y_ptr.dtype.element_ty), mask=d < D)
{rtail}    else:  # the whole block in [BLOCK_T, NP, BLOCK_D] tiles
        w_r = pre * inv[:, None]
        dd = tl.arange(0, BLOCK_D)
        for d0 in range(0, D, BLOCK_D):
            d = d0 + dd
            x = tl.load(x_ptr + t64[:, None, None] * sx_row + ii[None, :, None] * sx_stream
                        + d[None, None, :], mask=tmask[:, None, None] & smask[None, :, None]
                        & (d < D)[None, None, :], other=0.0).to(tl.float32)
            y = tl.sum(w_r[:, :, None] * x, axis=1)
            tl.store(y_ptr + t64[:, None] * sy_row + d[None, :], y.to(y_ptr.dtype.element_ty),
                     mask=tmask[:, None] & (d < D)[None, :])
'''


def _indented(text: str) -> str:
    return "".join("    " + line if line.strip() else line
                   for line in text.splitlines(keepends=True))


def source(name: str, spec: HCPreSpec, header: str = "") -> str:
    b = _blocks(spec)
    out_eps = "" if spec.out_eps is None else f",\n        OUT_EPS: tl.constexpr = {spec.out_eps!r}"
    return f'''{_comment(header)}import triton
import triton.language as tl


@triton.jit(do_not_specialize=["rows", "rows_pad", "splits", "d_split"])
def {name}(x_ptr, fn_ptr, base_ptr, scale_ptr, y_ptr, post_ptr, comb_ptr, part_ptr, count_ptr,
        rows, rows_pad, splits, d_split, sx_row, sx_stream, s_fn, sy_row, spost_row, scomb_row,
        scomb_i, N: tl.constexpr = {spec.n}, D: tl.constexpr = {spec.d},
        J: tl.constexpr = {b["J"]}, NP: tl.constexpr = {b["NP"]}, JP: tl.constexpr = {b["JP"]},
        JQ: tl.constexpr = {b["JQ"]}, BLOCK_T: tl.constexpr = {BLOCK_T},
        BLOCK_K: tl.constexpr = {b["BLOCK_K"]}, BLOCK_D: tl.constexpr = {b["BLOCK_D"]},
        BLOCK_Y: tl.constexpr = {b["BLOCK_Y"]}, FEW_ROWS: tl.constexpr = {FEW_ROWS},
        NORM_EPS: tl.constexpr = {spec.norm_eps!r}, HC_EPS: tl.constexpr = {spec.hc_eps!r},
        ITERS: tl.constexpr = {spec.iters}{out_eps}):
    rr = tl.arange(0, BLOCK_T)
    t = tl.program_id(0) * BLOCK_T + rr
    tmask = t < rows
    t64 = t.to(tl.int64)
    j = tl.arange(0, JP)
    jmask = j < J
    ii = tl.arange(0, NP)
    smask = ii < N
    kk = tl.arange(0, BLOCK_K)
    d_lo = tl.program_id(1) * d_split

{_mix(spec)}
    # every thread's partials are written before the ticket; the last ticket finishes the block
    tl.debug_barrier()
    ticket = tl.atomic_add(count_ptr + tl.program_id(0), 1, sem="acq_rel")
    if ticket == splits - 1:
        tl.debug_barrier()
        tl.store(count_ptr + tl.program_id(0), 0)
{_indented(_gates() + _collapse(spec))}'''


def splits(spec: HCPreSpec, rows: int) -> int:
    """D splits: enough programs for ~4 per multiprocessor, at most MAX_SPLITS."""
    d_blocks = triton.cdiv(spec.d, _blocks(spec)["BLOCK_K"])
    return max(1, min(d_blocks, MAX_SPLITS, triton.cdiv(4 * SMS, triton.cdiv(rows, BLOCK_T))))


def scratch(spec: HCPreSpec, max_rows: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 partials, int32 zeroed ticket counters) for any launch of up to max_rows rows; the
    kernel leaves the counters zeroed, so one pair serves every site in turn."""
    jq = _blocks(spec)["JQ"]
    part = max(splits(spec, r) * triton.cdiv(r, BLOCK_T) * BLOCK_T
               for r in range(1, max_rows + 1, BLOCK_T)) * jq
    return (torch.empty(part, dtype=torch.float32, device=device),
            torch.zeros(triton.cdiv(max_rows, BLOCK_T), dtype=torch.int32, device=device))


def launch(kernel, spec: HCPreSpec, *, x: torch.Tensor, fn: torch.Tensor, base: torch.Tensor,
           scale: torch.Tensor, y: torch.Tensor, post: torch.Tensor, comb: torch.Tensor,
           part: torch.Tensor, count: torch.Tensor, rows: int) -> None:
    """part, count: from scratch(spec, >= rows)."""
    if rows == 0:
        return
    for t in (x, fn, y, post, comb):
        assert t.stride(-1) == 1, "last dims must be contiguous"
    assert base.is_contiguous() and scale.is_contiguous()
    b, nsplit = _blocks(spec), splits(spec, rows)
    row_blocks = triton.cdiv(rows, BLOCK_T)
    rows_pad = row_blocks * BLOCK_T
    assert part.numel() >= nsplit * rows_pad * b["JQ"] and count.numel() >= row_blocks, \
        "hc_pre scratch too small"
    d_split = triton.cdiv(triton.cdiv(spec.d, nsplit), b["BLOCK_K"]) * b["BLOCK_K"]
    kernel[(row_blocks, nsplit)](
        x, fn, base, scale, y, post, comb, part, count, rows, rows_pad, nsplit, d_split,
        x.stride(0), x.stride(1), fn.stride(0), y.stride(0), post.stride(0), comb.stride(0),
        comb.stride(1), num_warps=4)
