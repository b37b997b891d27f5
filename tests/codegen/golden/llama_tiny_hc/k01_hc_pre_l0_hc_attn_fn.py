# k01_hc_pre_l0_hc_attn_fn: hc_pre
# fuses: %2 hc_pre, %3 rmsnorm
# node: %2, %2.1, %2.2 = hc_pre(%1, @layers.0.hc_attn_fn, @layers.0.hc_attn_base, @layers.0.hc_attn_scale) {n=4, norm_eps=1e-05, hc_eps=1e-06, iters=20, out_eps=1e-05, out_dtype='bf16'} : bf16[T, 64], f32[T, 4], f32[T, 4, 4]  # fused: %2 hc_pre, %3 rmsnorm
# %1 -> arena+0 col 0 [4, 64]
# @layers.0.hc_attn_fn -> weights
# @layers.0.hc_attn_base -> weights
# @layers.0.hc_attn_scale -> weights
# %2 -> arena+81920 col 0 [64]
# %2.1 -> arena+143360 col 0 [4]
# %2.2 -> arena+139264 col 0 [4, 4]
import triton
import triton.language as tl


@triton.jit
def _partials(x_ptr, fn_ptr, part_ptr, rows, rows_pad, kb_split, sx_row, sx_stream, s_fn,
              D: tl.constexpr, N: tl.constexpr, J: tl.constexpr, JP: tl.constexpr,
              BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr, SS: tl.constexpr = False):
    """This program's K blocks of m = X_flat @ fn^T for its BLOCK_T rows, to the scratch (SS:
    with their sum(x^2) in column J). A block lies in one stream, so its columns are contiguous
    (vector loads) at a scalar offset."""
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    tmask = t < rows
    t64 = t.to(tl.int64)
    j = tl.arange(0, JP)
    kk = tl.arange(0, BLOCK_K)
    KB: tl.constexpr = (D + BLOCK_K - 1) // BLOCK_K  # blocks per stream
    b_lo = tl.program_id(1) * kb_split
    b_hi = tl.minimum(b_lo + kb_split, N * KB)
    acc = tl.zeros((BLOCK_T, JP), tl.float32)  # fn rows >= J are 0
    sq = tl.zeros((BLOCK_T, BLOCK_K), tl.float32)
    for b in range(b_lo, b_hi, 1):
        i = b // KB
        c = (b - i * KB) * BLOCK_K + kk
        cmask = c < D
        x = tl.load(x_ptr + t64[:, None] * sx_row + i * sx_stream + c[None, :],
                    mask=tmask[:, None] & cmask[None, :], other=0.0).to(tl.float32)
        w = tl.load(fn_ptr + j[:, None] * s_fn + i * D + c[None, :],
                    mask=(j < J)[:, None] & cmask[None, :], other=0.0)
        if SS:
            sq += x * x
        wt = tl.trans(w)
        if fn_ptr.dtype.element_ty == tl.bfloat16:
            x_hi = x.to(tl.bfloat16)
            acc = tl.dot(x_hi, wt, acc)
            acc = tl.dot((x - x_hi.to(tl.float32)).to(tl.bfloat16), wt, acc)
        else:
            acc = tl.dot(x, wt.to(tl.float32), acc, input_precision="tf32x3")
    at = part_ptr + (tl.program_id(1) * rows_pad + t64) * JP
    if SS:  # column J (0 in acc: fn rows >= J are 0) stored apart, in x's own layout
        tl.store(at[:, None] + j[None, :], acc, mask=tmask[:, None] & (j != J)[None, :])
        tl.store(at + J, tl.sum(sq, axis=1), mask=tmask)
    else:
        tl.store(at[:, None] + j[None, :], acc, mask=tmask[:, None])


@triton.jit
def _finish_row(row, x_ptr, base_ptr, scale_ptr, y_ptr, post_ptr, comb_ptr, part_ptr, rows_pad,
                splits, sx_row, sx_stream, sy_row, spost_row, scomb_row, scomb_i,
                N: tl.constexpr, D: tl.constexpr, J: tl.constexpr, NP: tl.constexpr,
                JP: tl.constexpr, SB: tl.constexpr, BLOCK_Y: tl.constexpr,
                NORM_EPS: tl.constexpr, HC_EPS: tl.constexpr, ITERS: tl.constexpr,
                OUT_EPS: tl.constexpr):
    """One row: partials -> gates -> Sinkhorn -> post, comb, y."""
    row = row.to(tl.int64)
    j = tl.arange(0, JP)
    ii = tl.arange(0, NP)
    dd = tl.arange(0, BLOCK_Y)
    smask = (ii < N)[:, None]  # padded streams read zeros
    x_row = x_ptr + row * sx_row + ii[:, None] * sx_stream
    m = tl.zeros((JP,), tl.float32)
    sb = tl.arange(0, SB)
    for s0 in range(0, splits, SB):
        s = s0 + sb
        m += tl.sum(tl.load(part_ptr + (s[:, None] * rows_pad + row) * JP + j[None, :],
                            mask=(s < splits)[:, None], other=0.0, cache_modifier=".cg"), axis=0)
    d = dd
    x = tl.load(x_row + d[None, :], mask=smask & (d < D)[None, :], other=0.0)
    sq = tl.zeros((BLOCK_Y,), tl.float32)
    sq += tl.sum(x * x, axis=0)
    ss = tl.sum(sq, axis=0)
    # rms(x) @ fn^T == rsqrt(mean(x^2) + eps) * (x @ fn^T)
    sc = tl.where(j < N, tl.load(scale_ptr), tl.where(j < 2 * N, tl.load(scale_ptr + 1),
                                                       tl.load(scale_ptr + 2)))
    z = m * tl.rsqrt(ss / (N * D) + NORM_EPS) * sc + tl.load(base_ptr + j, mask=j < J, other=0.0)
    sig = tl.sigmoid(z)
    tl.store(post_ptr + row * spost_row + (j - N), 2.0 * sig, mask=(j >= N) & (j < 2 * N))

    # register tensors cannot be sliced: pick columns out with one-hot masked sums
    pre = tl.sum(tl.where(j[None, :] == ii[:, None], sig[None, :], 0.0), axis=1) + HC_EPS
    sq = tl.zeros((BLOCK_Y,), tl.float32)
    y = tl.sum(pre[:, None] * x, axis=0)
    sq += y * y
    inv = tl.rsqrt(tl.sum(sq, axis=0) / D + OUT_EPS)
    y = y * inv
    tl.store(y_ptr + row * sy_row + d, y.to(y_ptr.dtype.element_ty), mask=d < D)

    # the comb logits parked in the row's comb and read back as scalars: Sinkhorn cell by cell,
    # no cross-thread reductions (as [NP, NP] tiles, two a half-step)
    cz = comb_ptr + row * scomb_row
    ab = j - 2 * N
    tl.store(cz + (ab // N) * scomb_i + ab % N, z, mask=(j >= 2 * N) & (j < J))
    tl.debug_barrier()  # every thread's logits are stored before any is read
    l00 = tl.load(cz + 0 * scomb_i + 0)
    l01 = tl.load(cz + 0 * scomb_i + 1)
    l02 = tl.load(cz + 0 * scomb_i + 2)
    l03 = tl.load(cz + 0 * scomb_i + 3)
    l10 = tl.load(cz + 1 * scomb_i + 0)
    l11 = tl.load(cz + 1 * scomb_i + 1)
    l12 = tl.load(cz + 1 * scomb_i + 2)
    l13 = tl.load(cz + 1 * scomb_i + 3)
    l20 = tl.load(cz + 2 * scomb_i + 0)
    l21 = tl.load(cz + 2 * scomb_i + 1)
    l22 = tl.load(cz + 2 * scomb_i + 2)
    l23 = tl.load(cz + 2 * scomb_i + 3)
    l30 = tl.load(cz + 3 * scomb_i + 0)
    l31 = tl.load(cz + 3 * scomb_i + 1)
    l32 = tl.load(cz + 3 * scomb_i + 2)
    l33 = tl.load(cz + 3 * scomb_i + 3)
    mx = tl.maximum(tl.maximum(l00, l01), tl.maximum(l02, l03))
    e00 = tl.exp(l00 - mx)
    e01 = tl.exp(l01 - mx)
    e02 = tl.exp(l02 - mx)
    e03 = tl.exp(l03 - mx)
    sk = 1.0 / (e00 + e01 + e02 + e03)
    c00 = e00 * sk + HC_EPS
    c01 = e01 * sk + HC_EPS
    c02 = e02 * sk + HC_EPS
    c03 = e03 * sk + HC_EPS
    mx = tl.maximum(tl.maximum(l10, l11), tl.maximum(l12, l13))
    e10 = tl.exp(l10 - mx)
    e11 = tl.exp(l11 - mx)
    e12 = tl.exp(l12 - mx)
    e13 = tl.exp(l13 - mx)
    sk = 1.0 / (e10 + e11 + e12 + e13)
    c10 = e10 * sk + HC_EPS
    c11 = e11 * sk + HC_EPS
    c12 = e12 * sk + HC_EPS
    c13 = e13 * sk + HC_EPS
    mx = tl.maximum(tl.maximum(l20, l21), tl.maximum(l22, l23))
    e20 = tl.exp(l20 - mx)
    e21 = tl.exp(l21 - mx)
    e22 = tl.exp(l22 - mx)
    e23 = tl.exp(l23 - mx)
    sk = 1.0 / (e20 + e21 + e22 + e23)
    c20 = e20 * sk + HC_EPS
    c21 = e21 * sk + HC_EPS
    c22 = e22 * sk + HC_EPS
    c23 = e23 * sk + HC_EPS
    mx = tl.maximum(tl.maximum(l30, l31), tl.maximum(l32, l33))
    e30 = tl.exp(l30 - mx)
    e31 = tl.exp(l31 - mx)
    e32 = tl.exp(l32 - mx)
    e33 = tl.exp(l33 - mx)
    sk = 1.0 / (e30 + e31 + e32 + e33)
    c30 = e30 * sk + HC_EPS
    c31 = e31 * sk + HC_EPS
    c32 = e32 * sk + HC_EPS
    c33 = e33 * sk + HC_EPS
    sk = 1.0 / (c00 + c10 + c20 + c30 + HC_EPS)
    c00 = c00 * sk
    c10 = c10 * sk
    c20 = c20 * sk
    c30 = c30 * sk
    sk = 1.0 / (c01 + c11 + c21 + c31 + HC_EPS)
    c01 = c01 * sk
    c11 = c11 * sk
    c21 = c21 * sk
    c31 = c31 * sk
    sk = 1.0 / (c02 + c12 + c22 + c32 + HC_EPS)
    c02 = c02 * sk
    c12 = c12 * sk
    c22 = c22 * sk
    c32 = c32 * sk
    sk = 1.0 / (c03 + c13 + c23 + c33 + HC_EPS)
    c03 = c03 * sk
    c13 = c13 * sk
    c23 = c23 * sk
    c33 = c33 * sk
    for _ in range(ITERS - 1):
        sk = 1.0 / (c00 + c01 + c02 + c03 + HC_EPS)
        c00 = c00 * sk
        c01 = c01 * sk
        c02 = c02 * sk
        c03 = c03 * sk
        sk = 1.0 / (c10 + c11 + c12 + c13 + HC_EPS)
        c10 = c10 * sk
        c11 = c11 * sk
        c12 = c12 * sk
        c13 = c13 * sk
        sk = 1.0 / (c20 + c21 + c22 + c23 + HC_EPS)
        c20 = c20 * sk
        c21 = c21 * sk
        c22 = c22 * sk
        c23 = c23 * sk
        sk = 1.0 / (c30 + c31 + c32 + c33 + HC_EPS)
        c30 = c30 * sk
        c31 = c31 * sk
        c32 = c32 * sk
        c33 = c33 * sk
        sk = 1.0 / (c00 + c10 + c20 + c30 + HC_EPS)
        c00 = c00 * sk
        c10 = c10 * sk
        c20 = c20 * sk
        c30 = c30 * sk
        sk = 1.0 / (c01 + c11 + c21 + c31 + HC_EPS)
        c01 = c01 * sk
        c11 = c11 * sk
        c21 = c21 * sk
        c31 = c31 * sk
        sk = 1.0 / (c02 + c12 + c22 + c32 + HC_EPS)
        c02 = c02 * sk
        c12 = c12 * sk
        c22 = c22 * sk
        c32 = c32 * sk
        sk = 1.0 / (c03 + c13 + c23 + c33 + HC_EPS)
        c03 = c03 * sk
        c13 = c13 * sk
        c23 = c23 * sk
        c33 = c33 * sk
    tl.store(cz + 0 * scomb_i + 0, c00)
    tl.store(cz + 0 * scomb_i + 1, c01)
    tl.store(cz + 0 * scomb_i + 2, c02)
    tl.store(cz + 0 * scomb_i + 3, c03)
    tl.store(cz + 1 * scomb_i + 0, c10)
    tl.store(cz + 1 * scomb_i + 1, c11)
    tl.store(cz + 1 * scomb_i + 2, c12)
    tl.store(cz + 1 * scomb_i + 3, c13)
    tl.store(cz + 2 * scomb_i + 0, c20)
    tl.store(cz + 2 * scomb_i + 1, c21)
    tl.store(cz + 2 * scomb_i + 2, c22)
    tl.store(cz + 2 * scomb_i + 3, c23)
    tl.store(cz + 3 * scomb_i + 0, c30)
    tl.store(cz + 3 * scomb_i + 1, c31)
    tl.store(cz + 3 * scomb_i + 2, c32)
    tl.store(cz + 3 * scomb_i + 3, c33)



@triton.jit(do_not_specialize=["rows", "rows_pad", "splits", "kb_split"])
def k01_hc_pre_l0_hc_attn_fn(x_ptr, fn_ptr, base_ptr, scale_ptr, y_ptr, post_ptr, comb_ptr,
        part_ptr, rows, rows_pad, splits, kb_split, sx_row, sx_stream, s_fn, sy_row, spost_row,
        scomb_row, scomb_i, count_ptr, N: tl.constexpr = 4, D: tl.constexpr = 64,
        J: tl.constexpr = 24, NP: tl.constexpr = 4, JP: tl.constexpr = 32,
        BLOCK_T: tl.constexpr = 16, BLOCK_P: tl.constexpr = 64, BLOCK_K: tl.constexpr = 64,
        BLOCK_Y: tl.constexpr = 64, BLOCK_F: tl.constexpr = 64, SB: tl.constexpr = 128,
        RB: tl.constexpr = 16, SG: tl.constexpr = 16, NORM_EPS: tl.constexpr = 1e-05,
        HC_EPS: tl.constexpr = 1e-06, ITERS: tl.constexpr = 20, OUT_EPS: tl.constexpr = 1e-05):
    tl.extra.cuda.gdc_wait()  # the previous grid's writes are visible
    _partials(x_ptr, fn_ptr, part_ptr, rows, rows_pad, kb_split, sx_row, sx_stream, s_fn, D, N, J,
              JP, BLOCK_T, BLOCK_K)
    # every thread's partials are written before the ticket; the last ticket finishes the block
    tl.debug_barrier()
    ticket = tl.atomic_add(count_ptr + tl.program_id(0), 1, sem="acq_rel")
    if ticket == splits - 1:
        tl.debug_barrier()
        tl.store(count_ptr + tl.program_id(0), 0)
        n_live = tl.minimum(rows - tl.program_id(0) * BLOCK_T, BLOCK_T)
        for r in range(0, n_live, 1):
            _finish_row(tl.program_id(0) * BLOCK_T + r, x_ptr, base_ptr, scale_ptr, y_ptr, post_ptr,
                        comb_ptr, part_ptr, rows_pad, splits, sx_row, sx_stream, sy_row, spost_row,
                        scomb_row, scomb_i, N, D, J, NP, JP, SB, BLOCK_Y, NORM_EPS, HC_EPS, ITERS,
                        OUT_EPS)


@triton.jit(do_not_specialize=["rows", "rows_pad", "splits", "kb_split"])
def k01_hc_pre_l0_hc_attn_fn_proj(x_ptr, fn_ptr, base_ptr, scale_ptr, y_ptr, post_ptr, comb_ptr,
        part_ptr, rows, rows_pad, splits, kb_split, sx_row, sx_stream, s_fn, sy_row, spost_row,
        scomb_row, scomb_i, N: tl.constexpr = 4, D: tl.constexpr = 64, J: tl.constexpr = 24,
        NP: tl.constexpr = 4, JP: tl.constexpr = 32, BLOCK_T: tl.constexpr = 16,
        BLOCK_P: tl.constexpr = 64, BLOCK_K: tl.constexpr = 64, BLOCK_Y: tl.constexpr = 64,
        BLOCK_F: tl.constexpr = 64, SB: tl.constexpr = 128, RB: tl.constexpr = 16,
        SG: tl.constexpr = 16, NORM_EPS: tl.constexpr = 1e-05, HC_EPS: tl.constexpr = 1e-06,
        ITERS: tl.constexpr = 20, OUT_EPS: tl.constexpr = 1e-05, SS: tl.constexpr = False):
    tl.extra.cuda.gdc_wait()  # the previous grid's writes are visible
    _partials(x_ptr, fn_ptr, part_ptr, rows, rows_pad, kb_split, sx_row, sx_stream, s_fn, D, N, J,
              JP, BLOCK_P, BLOCK_K, SS)


@triton.jit(do_not_specialize=["rows", "rows_pad", "splits", "kb_split"])
def k01_hc_pre_l0_hc_attn_fn_finish(x_ptr, fn_ptr, base_ptr, scale_ptr, y_ptr, post_ptr, comb_ptr,
        part_ptr, rows, rows_pad, splits, kb_split, sx_row, sx_stream, s_fn, sy_row, spost_row,
        scomb_row, scomb_i, N: tl.constexpr = 4, D: tl.constexpr = 64, J: tl.constexpr = 24,
        NP: tl.constexpr = 4, JP: tl.constexpr = 32, BLOCK_T: tl.constexpr = 16,
        BLOCK_P: tl.constexpr = 64, BLOCK_K: tl.constexpr = 64, BLOCK_Y: tl.constexpr = 64,
        BLOCK_F: tl.constexpr = 64, SB: tl.constexpr = 128, RB: tl.constexpr = 16,
        SG: tl.constexpr = 16, NORM_EPS: tl.constexpr = 1e-05, HC_EPS: tl.constexpr = 1e-06,
        ITERS: tl.constexpr = 20, OUT_EPS: tl.constexpr = 1e-05, FEW: tl.constexpr = False):
    tl.extra.cuda.gdc_wait()  # the previous grid's writes are visible
    if FEW:
        row = tl.program_id(0).to(tl.int64)
        j = tl.arange(0, JP)
        ii = tl.arange(0, NP)
        dd = tl.arange(0, 64)
        x_row = x_ptr + row * sx_row
        m = tl.zeros((JP,), tl.float32)
        sb = tl.arange(0, SB)
        for s0 in range(0, splits, SB):
            s = s0 + sb
            m += tl.sum(tl.load(part_ptr + (s[:, None] * rows_pad + row) * JP + j[None, :],
                                mask=(s < splits)[:, None], other=0.0, cache_modifier=".cg"), axis=0)
        ss = tl.sum(tl.where(j == J, m, 0.0), axis=0)
        # rms(x) @ fn^T == rsqrt(mean(x^2) + eps) * (x @ fn^T)
        sc = tl.where(j < N, tl.load(scale_ptr), tl.where(j < 2 * N, tl.load(scale_ptr + 1),
                                                           tl.load(scale_ptr + 2)))
        z = m * tl.rsqrt(ss / (N * D) + NORM_EPS) * sc + tl.load(base_ptr + j, mask=j < J, other=0.0)
        sig = tl.sigmoid(z)
        tl.store(post_ptr + row * spost_row + (j - N), 2.0 * sig, mask=(j >= N) & (j < 2 * N))
        pre = tl.sum(tl.where(j[None, :] == ii[:, None], sig[None, :], 0.0), axis=1) + HC_EPS
        p0 = tl.sum(tl.where(ii == 0, pre, 0.0), axis=0)
        p1 = tl.sum(tl.where(ii == 1, pre, 0.0), axis=0)
        p2 = tl.sum(tl.where(ii == 2, pre, 0.0), axis=0)
        p3 = tl.sum(tl.where(ii == 3, pre, 0.0), axis=0)
        d = dd
        y = tl.zeros((64,), tl.float32)
        y += p0 * tl.load(x_row + 0 * sx_stream + d, mask=d < D, other=0.0)
        y += p1 * tl.load(x_row + 1 * sx_stream + d, mask=d < D, other=0.0)
        y += p2 * tl.load(x_row + 2 * sx_stream + d, mask=d < D, other=0.0)
        y += p3 * tl.load(x_row + 3 * sx_stream + d, mask=d < D, other=0.0)
        sq = y * y
        inv = tl.rsqrt(tl.sum(sq, axis=0) / D + OUT_EPS)
        y = y * inv
        tl.store(y_ptr + row * sy_row + d, y.to(y_ptr.dtype.element_ty), mask=d < D)
        # the comb logits parked in the row's comb and read back as scalars: Sinkhorn cell by cell,
        # no cross-thread reductions (as [NP, NP] tiles, two a half-step)
        cz = comb_ptr + row * scomb_row
        ab = j - 2 * N
        tl.store(cz + (ab // N) * scomb_i + ab % N, z, mask=(j >= 2 * N) & (j < J))
        tl.debug_barrier()  # every thread's logits are stored before any is read
        l00 = tl.load(cz + 0 * scomb_i + 0)
        l01 = tl.load(cz + 0 * scomb_i + 1)
        l02 = tl.load(cz + 0 * scomb_i + 2)
        l03 = tl.load(cz + 0 * scomb_i + 3)
        l10 = tl.load(cz + 1 * scomb_i + 0)
        l11 = tl.load(cz + 1 * scomb_i + 1)
        l12 = tl.load(cz + 1 * scomb_i + 2)
        l13 = tl.load(cz + 1 * scomb_i + 3)
        l20 = tl.load(cz + 2 * scomb_i + 0)
        l21 = tl.load(cz + 2 * scomb_i + 1)
        l22 = tl.load(cz + 2 * scomb_i + 2)
        l23 = tl.load(cz + 2 * scomb_i + 3)
        l30 = tl.load(cz + 3 * scomb_i + 0)
        l31 = tl.load(cz + 3 * scomb_i + 1)
        l32 = tl.load(cz + 3 * scomb_i + 2)
        l33 = tl.load(cz + 3 * scomb_i + 3)
        mx = tl.maximum(tl.maximum(l00, l01), tl.maximum(l02, l03))
        e00 = tl.exp(l00 - mx)
        e01 = tl.exp(l01 - mx)
        e02 = tl.exp(l02 - mx)
        e03 = tl.exp(l03 - mx)
        sk = 1.0 / (e00 + e01 + e02 + e03)
        c00 = e00 * sk + HC_EPS
        c01 = e01 * sk + HC_EPS
        c02 = e02 * sk + HC_EPS
        c03 = e03 * sk + HC_EPS
        mx = tl.maximum(tl.maximum(l10, l11), tl.maximum(l12, l13))
        e10 = tl.exp(l10 - mx)
        e11 = tl.exp(l11 - mx)
        e12 = tl.exp(l12 - mx)
        e13 = tl.exp(l13 - mx)
        sk = 1.0 / (e10 + e11 + e12 + e13)
        c10 = e10 * sk + HC_EPS
        c11 = e11 * sk + HC_EPS
        c12 = e12 * sk + HC_EPS
        c13 = e13 * sk + HC_EPS
        mx = tl.maximum(tl.maximum(l20, l21), tl.maximum(l22, l23))
        e20 = tl.exp(l20 - mx)
        e21 = tl.exp(l21 - mx)
        e22 = tl.exp(l22 - mx)
        e23 = tl.exp(l23 - mx)
        sk = 1.0 / (e20 + e21 + e22 + e23)
        c20 = e20 * sk + HC_EPS
        c21 = e21 * sk + HC_EPS
        c22 = e22 * sk + HC_EPS
        c23 = e23 * sk + HC_EPS
        mx = tl.maximum(tl.maximum(l30, l31), tl.maximum(l32, l33))
        e30 = tl.exp(l30 - mx)
        e31 = tl.exp(l31 - mx)
        e32 = tl.exp(l32 - mx)
        e33 = tl.exp(l33 - mx)
        sk = 1.0 / (e30 + e31 + e32 + e33)
        c30 = e30 * sk + HC_EPS
        c31 = e31 * sk + HC_EPS
        c32 = e32 * sk + HC_EPS
        c33 = e33 * sk + HC_EPS
        sk = 1.0 / (c00 + c10 + c20 + c30 + HC_EPS)
        c00 = c00 * sk
        c10 = c10 * sk
        c20 = c20 * sk
        c30 = c30 * sk
        sk = 1.0 / (c01 + c11 + c21 + c31 + HC_EPS)
        c01 = c01 * sk
        c11 = c11 * sk
        c21 = c21 * sk
        c31 = c31 * sk
        sk = 1.0 / (c02 + c12 + c22 + c32 + HC_EPS)
        c02 = c02 * sk
        c12 = c12 * sk
        c22 = c22 * sk
        c32 = c32 * sk
        sk = 1.0 / (c03 + c13 + c23 + c33 + HC_EPS)
        c03 = c03 * sk
        c13 = c13 * sk
        c23 = c23 * sk
        c33 = c33 * sk
        for _ in range(ITERS - 1):
            sk = 1.0 / (c00 + c01 + c02 + c03 + HC_EPS)
            c00 = c00 * sk
            c01 = c01 * sk
            c02 = c02 * sk
            c03 = c03 * sk
            sk = 1.0 / (c10 + c11 + c12 + c13 + HC_EPS)
            c10 = c10 * sk
            c11 = c11 * sk
            c12 = c12 * sk
            c13 = c13 * sk
            sk = 1.0 / (c20 + c21 + c22 + c23 + HC_EPS)
            c20 = c20 * sk
            c21 = c21 * sk
            c22 = c22 * sk
            c23 = c23 * sk
            sk = 1.0 / (c30 + c31 + c32 + c33 + HC_EPS)
            c30 = c30 * sk
            c31 = c31 * sk
            c32 = c32 * sk
            c33 = c33 * sk
            sk = 1.0 / (c00 + c10 + c20 + c30 + HC_EPS)
            c00 = c00 * sk
            c10 = c10 * sk
            c20 = c20 * sk
            c30 = c30 * sk
            sk = 1.0 / (c01 + c11 + c21 + c31 + HC_EPS)
            c01 = c01 * sk
            c11 = c11 * sk
            c21 = c21 * sk
            c31 = c31 * sk
            sk = 1.0 / (c02 + c12 + c22 + c32 + HC_EPS)
            c02 = c02 * sk
            c12 = c12 * sk
            c22 = c22 * sk
            c32 = c32 * sk
            sk = 1.0 / (c03 + c13 + c23 + c33 + HC_EPS)
            c03 = c03 * sk
            c13 = c13 * sk
            c23 = c23 * sk
            c33 = c33 * sk
        tl.store(cz + 0 * scomb_i + 0, c00)
        tl.store(cz + 0 * scomb_i + 1, c01)
        tl.store(cz + 0 * scomb_i + 2, c02)
        tl.store(cz + 0 * scomb_i + 3, c03)
        tl.store(cz + 1 * scomb_i + 0, c10)
        tl.store(cz + 1 * scomb_i + 1, c11)
        tl.store(cz + 1 * scomb_i + 2, c12)
        tl.store(cz + 1 * scomb_i + 3, c13)
        tl.store(cz + 2 * scomb_i + 0, c20)
        tl.store(cz + 2 * scomb_i + 1, c21)
        tl.store(cz + 2 * scomb_i + 2, c22)
        tl.store(cz + 2 * scomb_i + 3, c23)
        tl.store(cz + 3 * scomb_i + 0, c30)
        tl.store(cz + 3 * scomb_i + 1, c31)
        tl.store(cz + 3 * scomb_i + 2, c32)
        tl.store(cz + 3 * scomb_i + 3, c33)
    else:
        _finish_row(tl.program_id(0), x_ptr, base_ptr, scale_ptr, y_ptr, post_ptr, comb_ptr,
                    part_ptr, rows_pad, splits, sx_row, sx_stream, sy_row, spost_row, scomb_row,
                    scomb_i, N, D, J, NP, JP, SB, BLOCK_F, NORM_EPS, HC_EPS, ITERS, OUT_EPS)


@triton.jit(do_not_specialize=["rows", "rows_pad", "splits", "kb_split"])
def k01_hc_pre_l0_hc_attn_fn_gates(x_ptr, fn_ptr, base_ptr, scale_ptr, y_ptr, post_ptr, comb_ptr,
        part_ptr, rows, rows_pad, splits, kb_split, sx_row, sx_stream, s_fn, sy_row, spost_row,
        scomb_row, scomb_i, N: tl.constexpr = 4, D: tl.constexpr = 64, J: tl.constexpr = 24,
        NP: tl.constexpr = 4, JP: tl.constexpr = 32, BLOCK_T: tl.constexpr = 16,
        BLOCK_P: tl.constexpr = 64, BLOCK_K: tl.constexpr = 64, BLOCK_Y: tl.constexpr = 64,
        BLOCK_F: tl.constexpr = 64, SB: tl.constexpr = 128, RB: tl.constexpr = 16,
        SG: tl.constexpr = 16, NORM_EPS: tl.constexpr = 1e-05, HC_EPS: tl.constexpr = 1e-06,
        ITERS: tl.constexpr = 20, OUT_EPS: tl.constexpr = 1e-05):
    tl.extra.cuda.gdc_wait()  # the previous grid's writes are visible
    t0 = tl.program_id(0) * RB
    flat = tl.arange(0, RB * JP)
    fmask = flat < (rows - t0) * JP
    sg = tl.arange(0, SG)
    acc = tl.zeros((SG, RB * JP), tl.float32)
    for s0 in range(0, splits, SG):
        s = s0 + sg
        acc += tl.load(part_ptr + (s[:, None] * rows_pad + t0) * JP + flat[None, :],
                       mask=(s < splits)[:, None] & fmask[None, :], other=0.0, cache_modifier=".cg")
    tl.store(part_ptr + (splits * rows_pad + t0) * JP + flat, tl.sum(acc, axis=0), mask=fmask)
    tl.debug_barrier()  # the sums are read back by other threads of this program
    t = t0 + tl.arange(0, RB)
    tmask = t < rows
    t64 = t.to(tl.int64)
    ii = tl.arange(0, NP)
    live = tmask[:, None] & (ii < N)[None, :]
    at = part_ptr + (splits * rows_pad + t64) * JP
    m_post = tl.load(at[:, None] + N + ii[None, :], mask=live, other=0.0)
    ss = tl.load(part_ptr + ((splits + 1) * rows_pad + t64) * JP + J, mask=tmask, other=0.0)
    # rms(x) @ fn^T == rsqrt(mean(x^2) + eps) * (x @ fn^T)
    r = tl.rsqrt(ss / (N * D) + NORM_EPS)
    bias = tl.load(base_ptr + N + ii, mask=ii < N, other=0.0)
    post = 2.0 * tl.sigmoid(m_post * r[:, None] * tl.load(scale_ptr + 1) + bias[None, :])
    tl.store(post_ptr + t64[:, None] * spost_row + ii[None, :], post, mask=live)
    rc = r * tl.load(scale_ptr + 2)
    l00 = tl.load(at + 8, mask=tmask, other=0.0) * rc + tl.load(base_ptr + 8)
    l01 = tl.load(at + 9, mask=tmask, other=0.0) * rc + tl.load(base_ptr + 9)
    l02 = tl.load(at + 10, mask=tmask, other=0.0) * rc + tl.load(base_ptr + 10)
    l03 = tl.load(at + 11, mask=tmask, other=0.0) * rc + tl.load(base_ptr + 11)
    l10 = tl.load(at + 12, mask=tmask, other=0.0) * rc + tl.load(base_ptr + 12)
    l11 = tl.load(at + 13, mask=tmask, other=0.0) * rc + tl.load(base_ptr + 13)
    l12 = tl.load(at + 14, mask=tmask, other=0.0) * rc + tl.load(base_ptr + 14)
    l13 = tl.load(at + 15, mask=tmask, other=0.0) * rc + tl.load(base_ptr + 15)
    l20 = tl.load(at + 16, mask=tmask, other=0.0) * rc + tl.load(base_ptr + 16)
    l21 = tl.load(at + 17, mask=tmask, other=0.0) * rc + tl.load(base_ptr + 17)
    l22 = tl.load(at + 18, mask=tmask, other=0.0) * rc + tl.load(base_ptr + 18)
    l23 = tl.load(at + 19, mask=tmask, other=0.0) * rc + tl.load(base_ptr + 19)
    l30 = tl.load(at + 20, mask=tmask, other=0.0) * rc + tl.load(base_ptr + 20)
    l31 = tl.load(at + 21, mask=tmask, other=0.0) * rc + tl.load(base_ptr + 21)
    l32 = tl.load(at + 22, mask=tmask, other=0.0) * rc + tl.load(base_ptr + 22)
    l33 = tl.load(at + 23, mask=tmask, other=0.0) * rc + tl.load(base_ptr + 23)
    mx = tl.maximum(tl.maximum(l00, l01), tl.maximum(l02, l03))
    e00 = tl.exp(l00 - mx)
    e01 = tl.exp(l01 - mx)
    e02 = tl.exp(l02 - mx)
    e03 = tl.exp(l03 - mx)
    sk = 1.0 / (e00 + e01 + e02 + e03)
    c00 = e00 * sk + HC_EPS
    c01 = e01 * sk + HC_EPS
    c02 = e02 * sk + HC_EPS
    c03 = e03 * sk + HC_EPS
    mx = tl.maximum(tl.maximum(l10, l11), tl.maximum(l12, l13))
    e10 = tl.exp(l10 - mx)
    e11 = tl.exp(l11 - mx)
    e12 = tl.exp(l12 - mx)
    e13 = tl.exp(l13 - mx)
    sk = 1.0 / (e10 + e11 + e12 + e13)
    c10 = e10 * sk + HC_EPS
    c11 = e11 * sk + HC_EPS
    c12 = e12 * sk + HC_EPS
    c13 = e13 * sk + HC_EPS
    mx = tl.maximum(tl.maximum(l20, l21), tl.maximum(l22, l23))
    e20 = tl.exp(l20 - mx)
    e21 = tl.exp(l21 - mx)
    e22 = tl.exp(l22 - mx)
    e23 = tl.exp(l23 - mx)
    sk = 1.0 / (e20 + e21 + e22 + e23)
    c20 = e20 * sk + HC_EPS
    c21 = e21 * sk + HC_EPS
    c22 = e22 * sk + HC_EPS
    c23 = e23 * sk + HC_EPS
    mx = tl.maximum(tl.maximum(l30, l31), tl.maximum(l32, l33))
    e30 = tl.exp(l30 - mx)
    e31 = tl.exp(l31 - mx)
    e32 = tl.exp(l32 - mx)
    e33 = tl.exp(l33 - mx)
    sk = 1.0 / (e30 + e31 + e32 + e33)
    c30 = e30 * sk + HC_EPS
    c31 = e31 * sk + HC_EPS
    c32 = e32 * sk + HC_EPS
    c33 = e33 * sk + HC_EPS
    sk = 1.0 / (c00 + c10 + c20 + c30 + HC_EPS)
    c00 = c00 * sk
    c10 = c10 * sk
    c20 = c20 * sk
    c30 = c30 * sk
    sk = 1.0 / (c01 + c11 + c21 + c31 + HC_EPS)
    c01 = c01 * sk
    c11 = c11 * sk
    c21 = c21 * sk
    c31 = c31 * sk
    sk = 1.0 / (c02 + c12 + c22 + c32 + HC_EPS)
    c02 = c02 * sk
    c12 = c12 * sk
    c22 = c22 * sk
    c32 = c32 * sk
    sk = 1.0 / (c03 + c13 + c23 + c33 + HC_EPS)
    c03 = c03 * sk
    c13 = c13 * sk
    c23 = c23 * sk
    c33 = c33 * sk
    for _ in range(ITERS - 1):
        sk = 1.0 / (c00 + c01 + c02 + c03 + HC_EPS)
        c00 = c00 * sk
        c01 = c01 * sk
        c02 = c02 * sk
        c03 = c03 * sk
        sk = 1.0 / (c10 + c11 + c12 + c13 + HC_EPS)
        c10 = c10 * sk
        c11 = c11 * sk
        c12 = c12 * sk
        c13 = c13 * sk
        sk = 1.0 / (c20 + c21 + c22 + c23 + HC_EPS)
        c20 = c20 * sk
        c21 = c21 * sk
        c22 = c22 * sk
        c23 = c23 * sk
        sk = 1.0 / (c30 + c31 + c32 + c33 + HC_EPS)
        c30 = c30 * sk
        c31 = c31 * sk
        c32 = c32 * sk
        c33 = c33 * sk
        sk = 1.0 / (c00 + c10 + c20 + c30 + HC_EPS)
        c00 = c00 * sk
        c10 = c10 * sk
        c20 = c20 * sk
        c30 = c30 * sk
        sk = 1.0 / (c01 + c11 + c21 + c31 + HC_EPS)
        c01 = c01 * sk
        c11 = c11 * sk
        c21 = c21 * sk
        c31 = c31 * sk
        sk = 1.0 / (c02 + c12 + c22 + c32 + HC_EPS)
        c02 = c02 * sk
        c12 = c12 * sk
        c22 = c22 * sk
        c32 = c32 * sk
        sk = 1.0 / (c03 + c13 + c23 + c33 + HC_EPS)
        c03 = c03 * sk
        c13 = c13 * sk
        c23 = c23 * sk
        c33 = c33 * sk
    tl.store(comb_ptr + t64 * scomb_row + 0 * scomb_i + 0, c00, mask=tmask)
    tl.store(comb_ptr + t64 * scomb_row + 0 * scomb_i + 1, c01, mask=tmask)
    tl.store(comb_ptr + t64 * scomb_row + 0 * scomb_i + 2, c02, mask=tmask)
    tl.store(comb_ptr + t64 * scomb_row + 0 * scomb_i + 3, c03, mask=tmask)
    tl.store(comb_ptr + t64 * scomb_row + 1 * scomb_i + 0, c10, mask=tmask)
    tl.store(comb_ptr + t64 * scomb_row + 1 * scomb_i + 1, c11, mask=tmask)
    tl.store(comb_ptr + t64 * scomb_row + 1 * scomb_i + 2, c12, mask=tmask)
    tl.store(comb_ptr + t64 * scomb_row + 1 * scomb_i + 3, c13, mask=tmask)
    tl.store(comb_ptr + t64 * scomb_row + 2 * scomb_i + 0, c20, mask=tmask)
    tl.store(comb_ptr + t64 * scomb_row + 2 * scomb_i + 1, c21, mask=tmask)
    tl.store(comb_ptr + t64 * scomb_row + 2 * scomb_i + 2, c22, mask=tmask)
    tl.store(comb_ptr + t64 * scomb_row + 2 * scomb_i + 3, c23, mask=tmask)
    tl.store(comb_ptr + t64 * scomb_row + 3 * scomb_i + 0, c30, mask=tmask)
    tl.store(comb_ptr + t64 * scomb_row + 3 * scomb_i + 1, c31, mask=tmask)
    tl.store(comb_ptr + t64 * scomb_row + 3 * scomb_i + 2, c32, mask=tmask)
    tl.store(comb_ptr + t64 * scomb_row + 3 * scomb_i + 3, c33, mask=tmask)


@triton.jit(do_not_specialize=["rows", "rows_pad", "splits", "kb_split"])
def k01_hc_pre_l0_hc_attn_fn_apply(x_ptr, fn_ptr, base_ptr, scale_ptr, y_ptr, post_ptr, comb_ptr,
        part_ptr, rows, rows_pad, splits, kb_split, sx_row, sx_stream, s_fn, sy_row, spost_row,
        scomb_row, scomb_i, N: tl.constexpr = 4, D: tl.constexpr = 64, J: tl.constexpr = 24,
        NP: tl.constexpr = 4, JP: tl.constexpr = 32, BLOCK_T: tl.constexpr = 16,
        BLOCK_P: tl.constexpr = 64, BLOCK_K: tl.constexpr = 64, BLOCK_Y: tl.constexpr = 64,
        BLOCK_F: tl.constexpr = 64, SB: tl.constexpr = 128, RB: tl.constexpr = 16,
        SG: tl.constexpr = 16, NORM_EPS: tl.constexpr = 1e-05, HC_EPS: tl.constexpr = 1e-06,
        ITERS: tl.constexpr = 20, OUT_EPS: tl.constexpr = 1e-05):
    tl.extra.cuda.gdc_wait()  # the previous grid's writes are visible
    row = tl.program_id(0).to(tl.int64)
    dd = tl.arange(0, BLOCK_Y)
    x_row = x_ptr + row * sx_row
    d = dd
    x0 = tl.load(x_row + 0 * sx_stream + d, mask=d < D, other=0.0)
    x1 = tl.load(x_row + 1 * sx_stream + d, mask=d < D, other=0.0)
    x2 = tl.load(x_row + 2 * sx_stream + d, mask=d < D, other=0.0)
    x3 = tl.load(x_row + 3 * sx_stream + d, mask=d < D, other=0.0)
    sq = tl.zeros((BLOCK_Y,), tl.float32)
    sq += x0 * x0 + x1 * x1 + x2 * x2 + x3 * x3
    ss = tl.sum(sq, axis=0)
    ii = tl.arange(0, NP)
    sb = tl.arange(0, SB)
    m = tl.zeros((NP,), tl.float32)
    for s0 in range(0, splits, SB):
        s = s0 + sb
        m += tl.sum(tl.load(part_ptr + (s[:, None] * rows_pad + row) * JP + ii[None, :],
                            mask=(s < splits)[:, None] & (ii < N)[None, :], other=0.0,
                            cache_modifier=".cg"), axis=0)
    tl.store(part_ptr + ((splits + 1) * rows_pad + row) * JP + J, ss)
    # rms(x) @ fn^T == rsqrt(mean(x^2) + eps) * (x @ fn^T)
    r = tl.rsqrt(ss / (N * D) + NORM_EPS)
    pre = tl.sigmoid(m * r * tl.load(scale_ptr) + tl.load(base_ptr + ii, mask=ii < N, other=0.0))
    pre += HC_EPS
    p0 = tl.sum(tl.where(ii == 0, pre, 0.0), axis=0)
    p1 = tl.sum(tl.where(ii == 1, pre, 0.0), axis=0)
    p2 = tl.sum(tl.where(ii == 2, pre, 0.0), axis=0)
    p3 = tl.sum(tl.where(ii == 3, pre, 0.0), axis=0)
    sq = tl.zeros((BLOCK_Y,), tl.float32)
    y = p0 * x0 + p1 * x1 + p2 * x2 + p3 * x3
    sq += y * y
    inv = tl.rsqrt(tl.sum(sq, axis=0) / D + OUT_EPS)
    y = y * inv
    tl.store(y_ptr + row * sy_row + d, y.to(y_ptr.dtype.element_ty), mask=d < D)


@triton.jit
def k01_hc_pre_l0_hc_attn_fn_parts(x_ptr, fn_ptr, part_ptr, parts_ptr, sx_stream, s_fn, BLOCK_N: tl.constexpr):
    """Row 0's parts of a formed site: `parts_lines` over BLOCK_N columns a program."""
    tl.extra.cuda.gdc_wait()  # the previous grid's writes are visible
    pid_n = tl.program_id(0)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = rn < 64
    jj = tl.arange(0, 32)
    pj = tl.zeros((32,), tl.float32)
    q = tl.arange(0, 16)
    gv = tl.zeros((16,), tl.float32)
    xs0 = tl.load(x_ptr + 0 * sx_stream + rn, mask=n_ok, other=0.0)
    wf = tl.load(fn_ptr + jj[:, None] * s_fn + 0 + rn[None, :],
                 mask=(jj < 24)[:, None] & n_ok[None, :], other=0.0)
    pj += tl.sum(wf.to(tl.float32) * xs0[None, :], axis=1)
    hi = xs0.to(parts_ptr.dtype.element_ty)
    tl.store(parts_ptr + 0 + rn, hi, mask=n_ok)
    tl.store(parts_ptr + 256 + rn, (xs0 - hi.to(tl.float32)).to(parts_ptr.dtype.element_ty), mask=n_ok)
    xs1 = tl.load(x_ptr + 1 * sx_stream + rn, mask=n_ok, other=0.0)
    wf = tl.load(fn_ptr + jj[:, None] * s_fn + 64 + rn[None, :],
                 mask=(jj < 24)[:, None] & n_ok[None, :], other=0.0)
    pj += tl.sum(wf.to(tl.float32) * xs1[None, :], axis=1)
    hi = xs1.to(parts_ptr.dtype.element_ty)
    tl.store(parts_ptr + 64 + rn, hi, mask=n_ok)
    tl.store(parts_ptr + 320 + rn, (xs1 - hi.to(tl.float32)).to(parts_ptr.dtype.element_ty), mask=n_ok)
    xs2 = tl.load(x_ptr + 2 * sx_stream + rn, mask=n_ok, other=0.0)
    wf = tl.load(fn_ptr + jj[:, None] * s_fn + 128 + rn[None, :],
                 mask=(jj < 24)[:, None] & n_ok[None, :], other=0.0)
    pj += tl.sum(wf.to(tl.float32) * xs2[None, :], axis=1)
    hi = xs2.to(parts_ptr.dtype.element_ty)
    tl.store(parts_ptr + 128 + rn, hi, mask=n_ok)
    tl.store(parts_ptr + 384 + rn, (xs2 - hi.to(tl.float32)).to(parts_ptr.dtype.element_ty), mask=n_ok)
    xs3 = tl.load(x_ptr + 3 * sx_stream + rn, mask=n_ok, other=0.0)
    wf = tl.load(fn_ptr + jj[:, None] * s_fn + 192 + rn[None, :],
                 mask=(jj < 24)[:, None] & n_ok[None, :], other=0.0)
    pj += tl.sum(wf.to(tl.float32) * xs3[None, :], axis=1)
    hi = xs3.to(parts_ptr.dtype.element_ty)
    tl.store(parts_ptr + 192 + rn, hi, mask=n_ok)
    tl.store(parts_ptr + 448 + rn, (xs3 - hi.to(tl.float32)).to(parts_ptr.dtype.element_ty), mask=n_ok)
    gv = tl.where((q == 0) | (q == 0), tl.sum(xs0 * xs0, axis=0), gv)
    gv = tl.where((q == 1) | (q == 4), tl.sum(xs0 * xs1, axis=0), gv)
    gv = tl.where((q == 2) | (q == 8), tl.sum(xs0 * xs2, axis=0), gv)
    gv = tl.where((q == 3) | (q == 12), tl.sum(xs0 * xs3, axis=0), gv)
    gv = tl.where((q == 5) | (q == 5), tl.sum(xs1 * xs1, axis=0), gv)
    gv = tl.where((q == 6) | (q == 9), tl.sum(xs1 * xs2, axis=0), gv)
    gv = tl.where((q == 7) | (q == 13), tl.sum(xs1 * xs3, axis=0), gv)
    gv = tl.where((q == 10) | (q == 10), tl.sum(xs2 * xs2, axis=0), gv)
    gv = tl.where((q == 11) | (q == 14), tl.sum(xs2 * xs3, axis=0), gv)
    gv = tl.where((q == 15) | (q == 15), tl.sum(xs3 * xs3, axis=0), gv)
    pj = tl.where(jj == 24, tl.sum(tl.where((q == 0) | (q == 5) | (q == 10) | (q == 15), gv, 0.0), axis=0), pj)
    tl.store(part_ptr + pid_n * 32 + jj, pj)
    tl.store(part_ptr + 64 + pid_n * 16 + q, gv)
