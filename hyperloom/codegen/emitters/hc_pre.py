"""mHC pre-site kernel: exactly `hyperloom.ir.semantics.hc.hc_pre`, in one launch.

Inputs X fp32 [rows, n, D], fn [(2+n)*n, n*D] (bf16 or fp32), base fp32 [(2+n)*n], scale fp32 [3];
outputs y [rows, D] (fp32, or the weights' dtype with the site norm folded in), post fp32
[rows, n], comb fp32 [rows, n, n].

Grid (cdiv(rows, BLOCK_T), splits): split-K over the flat n*D axis, so a few rows still spread
over every multiprocessor (decode: one row block, up to 128 splits) and many rows sweep X once.
Each program streams its K range of X and fn, and writes the partial projections m = X_flat @
fn^T and the partial sum of squares (column J) to a scratch row [split, row, JP]. It then takes a
ticket from its row block's counter; the last program of the block sums the partials, forms the
gates, runs every Sinkhorn iteration in registers, writes post and comb and y = sum_i pre[i] *
X[i] row by row (X is still in L2; with out_eps, y = rms(y) in a second pass over the row), and
resets the counter for the next launch (CUDA-graph replays too).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from hyperloom.codegen.emitters.loops import runtime_loop
from hyperloom.config import CONFIG

BLOCK_T = 16  # rows per program; tl.dot needs M >= 16
SMS = 132  # H200 multiprocessors
MAX_SPLITS = 128

_INTERPRET_DOT = "        acc = tl.dot(x, tl.trans(w.to(tl.float32)), acc)"
# The projections feed sigmoids and 20 Sinkhorn rounds, and plain tf32 would cost ~1e-3 relative.
# bf16 weights are exact in bf16: X split as hi + lo bf16 parts gives ~2^-16 relative error from
# two bf16 MMAs; fp32 weights take tf32x3.
_GPU_DOT = """        wt = tl.trans(w)
        if fn_ptr.dtype.element_ty == tl.bfloat16:
            x_hi = x.to(tl.bfloat16)
            acc = tl.dot(x_hi, wt, acc)
            acc = tl.dot((x - x_hi.to(tl.float32)).to(tl.bfloat16), wt, acc)
        else:
            acc = tl.dot(x, wt.to(tl.float32), acc, input_precision="tf32x3")"""


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
    return {
        "J": j,
        "NP": triton.next_power_of_2(spec.n),
        "JP": max(16, triton.next_power_of_2(j + 1)),  # column J holds sum(x^2); tl.dot N >= 16
        "BLOCK_K": max(16, min(128, d2)),
        "BLOCK_Y": max(16, min(1024, d2)),  # y columns per step of one row
    }


def _finish(spec: HCPreSpec) -> str:
    """The last program of a row block: partials -> gates -> Sinkhorn -> post, comb, y."""
    head, tail = runtime_loop("s", "0", "splits", "1", " " * 4)
    rhead, rtail = runtime_loop("r", "0", "n_live", "1", " " * 4)
    norm = "        inv = 1.0\n"
    if spec.out_eps is not None:  # a first pass for sum(y^2); the second reads X from cache
        norm = """        sq = tl.zeros((BLOCK_Y,), tl.float32)
        for d0 in range(0, D, BLOCK_Y):
            d = d0 + dd
            x = tl.load(x_row + d[None, :], mask=smask & (d < D)[None, :], other=0.0)
            y = tl.sum(pre_r[:, None] * x.to(tl.float32), axis=0)
            sq += y * y
        inv = tl.rsqrt(tl.sum(sq, axis=0) / D + OUT_EPS)
"""
    return f'''    acc = tl.zeros((BLOCK_T, JP), tl.float32)
{head}        acc += tl.load(part_ptr + (s * rows_pad + t64)[:, None] * JP + j[None, :],
                       mask=tmask[:, None], other=0.0, cache_modifier=".cg")
{tail}    ss = tl.sum(tl.where(j[None, :] == J, acc, 0.0), axis=1)
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
    ii = tl.arange(0, NP)
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

    # y = sum_i pre[i] * X[i] (then rms(y) when the site norm is folded in), row by row: a
    # decode block has one live row of BLOCK_T
    rr = tl.arange(0, BLOCK_T)
    dd = tl.arange(0, BLOCK_Y)
    smask = (ii < N)[:, None]
    n_live = tl.minimum(rows - tl.program_id(0) * BLOCK_T, BLOCK_T)
{rhead}        pre_r = tl.sum(tl.where(rr[:, None] == r, pre, 0.0), axis=0)  # [NP]
        row = (tl.program_id(0) * BLOCK_T + r).to(tl.int64)
        x_row = x_ptr + row * sx_row + ii[:, None] * sx_stream
{norm}        for d0 in range(0, D, BLOCK_Y):
            d = d0 + dd
            x = tl.load(x_row + d[None, :], mask=smask & (d < D)[None, :], other=0.0)
            y = tl.sum(pre_r[:, None] * x.to(tl.float32), axis=0) * inv
            tl.store(y_ptr + row * sy_row + d, y.to(y_ptr.dtype.element_ty), mask=d < D)
{rtail}'''


def source(name: str, spec: HCPreSpec, header: str = "") -> str:
    b = _blocks(spec)
    dot = _INTERPRET_DOT if CONFIG.interpret else _GPU_DOT
    head, tail = runtime_loop("k0", "0", "k_split", "BLOCK_K", " " * 4)
    out_eps = "" if spec.out_eps is None else f",\n        OUT_EPS: tl.constexpr = {spec.out_eps!r}"
    finish = "".join("    " + line if line else line
                     for line in _finish(spec).splitlines(keepends=True))
    return f'''{_comment(header)}import triton
import triton.language as tl


@triton.jit(do_not_specialize=["rows", "rows_pad", "splits", "k_split"])
def {name}(x_ptr, fn_ptr, base_ptr, scale_ptr, y_ptr, post_ptr, comb_ptr, part_ptr, count_ptr,
        rows, rows_pad, splits, k_split, sx_row, sx_stream, s_fn, sy_row, spost_row, scomb_row,
        scomb_i, N: tl.constexpr = {spec.n}, D: tl.constexpr = {spec.d},
        J: tl.constexpr = {b["J"]}, NP: tl.constexpr = {b["NP"]}, JP: tl.constexpr = {b["JP"]},
        BLOCK_T: tl.constexpr = {BLOCK_T}, BLOCK_K: tl.constexpr = {b["BLOCK_K"]},
        BLOCK_Y: tl.constexpr = {b["BLOCK_Y"]}, NORM_EPS: tl.constexpr = {spec.norm_eps!r},
        HC_EPS: tl.constexpr = {spec.hc_eps!r}, ITERS: tl.constexpr = {spec.iters}{out_eps}):
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    tmask = t < rows
    t64 = t.to(tl.int64)
    j = tl.arange(0, JP)
    jmask = j < J
    kk = tl.arange(0, BLOCK_K)
    k_lo = tl.program_id(1) * k_split

    # this split's partial m = X_flat @ fn^T and sum(x^2)
    acc = tl.zeros((BLOCK_T, JP), tl.float32)
    ss = tl.zeros((BLOCK_T,), tl.float32)
{head}        k = k_lo + k0 + kk  # k_split is a multiple of BLOCK_K
        kmask = k < N * D
        i = k // D  # a block may straddle two streams when D % BLOCK_K != 0
        x = tl.load(x_ptr + t64[:, None] * sx_row + (i * sx_stream + k - i * D)[None, :],
                    mask=tmask[:, None] & kmask[None, :], other=0.0).to(tl.float32)
        w = tl.load(fn_ptr + j[:, None] * s_fn + k[None, :], mask=jmask[:, None] & kmask[None, :],
                    other=0.0)
        ss += tl.sum(x * x, axis=1)
{dot}
{tail}    acc = tl.where(j[None, :] == J, ss[:, None], acc)
    tl.store(part_ptr + (tl.program_id(1) * rows_pad + t64)[:, None] * JP + j[None, :], acc,
             mask=tmask[:, None])

    # every thread's partials are written before the ticket; the last ticket finishes the block
    tl.debug_barrier()
    ticket = tl.atomic_add(count_ptr + tl.program_id(0), 1, sem="acq_rel")
    if ticket == splits - 1:
        tl.debug_barrier()
        tl.store(count_ptr + tl.program_id(0), 0)
{finish}'''


def splits(spec: HCPreSpec, rows: int) -> int:
    """K splits of the projection kernel: enough programs for ~4 per multiprocessor."""
    k_blocks = triton.cdiv(spec.n * spec.d, _blocks(spec)["BLOCK_K"])
    return max(1, min(k_blocks, MAX_SPLITS, triton.cdiv(4 * SMS, triton.cdiv(rows, BLOCK_T))))


def scratch(spec: HCPreSpec, max_rows: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 partials, int32 zeroed ticket counters) for any launch of up to max_rows rows; the
    kernel leaves the counters zeroed, so one pair serves every site in turn."""
    jp = _blocks(spec)["JP"]
    part = max(splits(spec, r) * triton.cdiv(r, BLOCK_T) * BLOCK_T
               for r in range(1, max_rows + 1, BLOCK_T)) * jp
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
    assert part.numel() >= nsplit * rows_pad * b["JP"] and count.numel() >= row_blocks, \
        "hc_pre scratch too small"
    k_split = triton.cdiv(triton.cdiv(spec.n * spec.d, nsplit), b["BLOCK_K"]) * b["BLOCK_K"]
    kernel[(row_blocks, nsplit)](
        x, fn, base, scale, y, post, comb, part, count, rows, rows_pad, nsplit, k_split,
        x.stride(0), x.stride(1), fn.stride(0), y.stride(0), post.stride(0), comb.stride(0),
        comb.stride(1), num_warps=4)
