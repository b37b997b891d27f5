"""mHC pre-site kernel: exactly `hyperloom.ir.semantics.hc.hc_pre`.

Inputs X fp32 [rows, n, D], fn [(2+n)*n, n*D] (bf16 or fp32), base fp32 [(2+n)*n], scale fp32 [3];
outputs y [rows, D] (fp32), post fp32 [rows, n], comb fp32 [rows, n, n]. One program per block
of BLOCK_T rows: a first pass streams X once, accumulating the sum of squares and the (2+n)*n
projections (a tl.dot against fn); the gates and all Sinkhorn iterations run in registers; a
second pass over X forms y = sum_i pre[i] * X[i]. Grid: (cdiv(rows, BLOCK_T),).
Known limit: with few rows one program streams all of fn and is latency-bound (H200, n=4,
D=4096: ~150 us at 1..64 rows, ~290 us at 4096); decode wants a split-K grid.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from hyperloom.config import CONFIG

BLOCK_T = 16  # rows per program; tl.dot needs M >= 16

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


def _comment(header: str) -> str:
    return "".join(f"# {line}\n" for line in header.splitlines())


def _blocks(spec: HCPreSpec) -> dict[str, int]:
    d2 = triton.next_power_of_2(spec.d)
    j = (2 + spec.n) * spec.n  # projections: n pre, n post, n*n comb logits
    return {
        "J": j,
        "NP": triton.next_power_of_2(spec.n),
        "JP": max(16, triton.next_power_of_2(j)),  # tl.dot needs N >= 16
        "BLOCK_K": max(16, min(128, d2)),
        "BLOCK_D": max(16, min(128, d2)),
    }


def source(name: str, spec: HCPreSpec, header: str = "") -> str:
    b = _blocks(spec)
    dot = _INTERPRET_DOT if CONFIG.interpret else _GPU_DOT
    return f'''{_comment(header)}import triton
import triton.language as tl


@triton.jit
def {name}(x_ptr, fn_ptr, base_ptr, scale_ptr, y_ptr, post_ptr, comb_ptr, rows,
        sx_row, sx_stream, s_fn, sy_row, spost_row, scomb_row, scomb_i,
        N: tl.constexpr = {spec.n}, D: tl.constexpr = {spec.d}, J: tl.constexpr = {b["J"]},
        NP: tl.constexpr = {b["NP"]}, JP: tl.constexpr = {b["JP"]},
        BLOCK_T: tl.constexpr = {BLOCK_T},
        BLOCK_K: tl.constexpr = {b["BLOCK_K"]}, BLOCK_D: tl.constexpr = {b["BLOCK_D"]},
        NORM_EPS: tl.constexpr = {spec.norm_eps!r}, HC_EPS: tl.constexpr = {spec.hc_eps!r},
        ITERS: tl.constexpr = {spec.iters}):
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    tmask = t < rows
    t64 = t.to(tl.int64)
    j = tl.arange(0, JP)
    jmask = j < J
    kk = tl.arange(0, BLOCK_K)

    # pass 1: sum of squares and m = X_flat @ fn^T, X read once, one flat loop over n*D
    acc = tl.zeros((BLOCK_T, JP), tl.float32)
    ss = tl.zeros((BLOCK_T,), tl.float32)
    for k0 in range(0, N * D, BLOCK_K):
        k = k0 + kk
        kmask = k < N * D
        i = k // D  # a block may straddle two streams when D % BLOCK_K != 0
        x = tl.load(x_ptr + t64[:, None] * sx_row + (i * sx_stream + k - i * D)[None, :],
                    mask=tmask[:, None] & kmask[None, :], other=0.0).to(tl.float32)
        w = tl.load(fn_ptr + j[:, None] * s_fn + k[None, :], mask=jmask[:, None] & kmask[None, :],
                    other=0.0)
        ss += tl.sum(x * x, axis=1)
{dot}
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

    # pass 2: y = sum_i pre[i] * X[i]
    dd = tl.arange(0, BLOCK_D)
    for d0 in range(0, D, BLOCK_D):
        d = d0 + dd
        dmask = d < D
        x = tl.load(x_ptr + t64[:, None, None] * sx_row + ii[None, :, None] * sx_stream
                    + d[None, None, :],
                    mask=tmask[:, None, None] & (ii < N)[None, :, None] & dmask[None, None, :],
                    other=0.0).to(tl.float32)
        y = tl.sum(pre[:, :, None] * x, axis=1)
        tl.store(y_ptr + t64[:, None] * sy_row + d[None, :], y.to(y_ptr.dtype.element_ty),
                 mask=tmask[:, None] & dmask[None, :])
'''


def launch(kernel, spec: HCPreSpec, *, x: torch.Tensor, fn: torch.Tensor, base: torch.Tensor,
           scale: torch.Tensor, y: torch.Tensor, post: torch.Tensor, comb: torch.Tensor,
           rows: int) -> None:
    if rows == 0:
        return
    for t in (x, fn, y, post, comb):
        assert t.stride(-1) == 1, "last dims must be contiguous"
    assert base.is_contiguous() and scale.is_contiguous()
    kernel[(triton.cdiv(rows, BLOCK_T),)](
        x, fn, base, scale, y, post, comb, rows, x.stride(0), x.stride(1), fn.stride(0),
        y.stride(0), post.stride(0), comb.stride(0), comb.stride(1), num_warps=4)
