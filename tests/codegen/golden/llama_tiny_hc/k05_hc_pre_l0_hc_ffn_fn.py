# k05_hc_pre_l0_hc_ffn_fn: hc_pre
# fuses: %12 hc_pre, %13 rmsnorm
# node: %12, %12.1, %12.2 = hc_pre(%11, @layers.0.hc_ffn_fn, @layers.0.hc_ffn_base, @layers.0.hc_ffn_scale) {n=4, norm_eps=1e-05, hc_eps=1e-06, iters=20, out_eps=1e-05, out_dtype='bf16'} : bf16[T, 64], f32[T, 4], f32[T, 4, 4]  # fused: %12 hc_pre, %13 rmsnorm
# %11 -> arena+65536 col 0 [4, 64]
# @layers.0.hc_ffn_fn -> weights
# @layers.0.hc_ffn_base -> weights
# @layers.0.hc_ffn_scale -> weights
# %12 -> arena+0 col 0 [64]
# %12.1 -> arena+151552 col 0 [4]
# %12.2 -> arena+147456 col 0 [4, 4]
import triton
import triton.language as tl


@triton.jit
def _partials(x_ptr, fn_ptr, part_ptr, rows, rows_pad, kb_split, sx_row, sx_stream, s_fn,
              D: tl.constexpr, N: tl.constexpr, J: tl.constexpr, JP: tl.constexpr,
              BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr):
    """This program's K blocks of m = X_flat @ fn^T for its BLOCK_T rows, to the scratch. A
    block lies in one stream, so its columns are contiguous (vector loads) at a scalar offset."""
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    tmask = t < rows
    t64 = t.to(tl.int64)
    j = tl.arange(0, JP)
    kk = tl.arange(0, BLOCK_K)
    KB: tl.constexpr = (D + BLOCK_K - 1) // BLOCK_K  # blocks per stream
    b_lo = tl.program_id(1) * kb_split
    b_hi = tl.minimum(b_lo + kb_split, N * KB)
    acc = tl.zeros((BLOCK_T, JP), tl.float32)  # fn rows >= J are 0
    for b in range(b_lo, b_hi, 1):
        i = b // KB
        c = (b - i * KB) * BLOCK_K + kk
        cmask = c < D
        x = tl.load(x_ptr + t64[:, None] * sx_row + i * sx_stream + c[None, :],
                    mask=tmask[:, None] & cmask[None, :], other=0.0).to(tl.float32)
        w = tl.load(fn_ptr + j[:, None] * s_fn + i * D + c[None, :],
                    mask=(j < J)[:, None] & cmask[None, :], other=0.0)
        wt = tl.trans(w)
        if fn_ptr.dtype.element_ty == tl.bfloat16:
            x_hi = x.to(tl.bfloat16)
            acc = tl.dot(x_hi, wt, acc)
            acc = tl.dot((x - x_hi.to(tl.float32)).to(tl.bfloat16), wt, acc)
        else:
            acc = tl.dot(x, wt.to(tl.float32), acc, input_precision="tf32x3")
    part = part_ptr + (tl.program_id(1) * rows_pad + t64)[:, None] * JP
    tl.store(part + j[None, :], acc, mask=tmask[:, None])


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

    col = 2 * N + ii[:, None] * N + ii[None, :]  # [NP, NP] column of comb logit (a, b)
    valid = (ii[:, None] < N) & (ii[None, :] < N)
    hit = (j[None, None, :] == col[:, :, None]) & valid[:, :, None]
    logits = tl.sum(tl.where(hit, z[None, None, :], 0.0), axis=2)

    # Sinkhorn; a finite fill keeps padded rows NaN-free (zeroed after the softmax)
    logits = tl.where(valid, logits, -1e30)
    e = tl.exp(logits - tl.max(logits, axis=1)[:, None])
    c = tl.where(valid, e / tl.sum(e, axis=1)[:, None] + HC_EPS, 0.0)
    c = c / (tl.sum(c, axis=0)[None, :] + HC_EPS)
    for _ in range(ITERS - 1):
        c = c / (tl.sum(c, axis=1)[:, None] + HC_EPS)
        c = c / (tl.sum(c, axis=0)[None, :] + HC_EPS)
    tl.store(comb_ptr + row * scomb_row + ii[:, None] * scomb_i + ii[None, :], c,
             mask=valid)


@triton.jit(do_not_specialize=["rows", "rows_pad", "splits", "kb_split"])
def k05_hc_pre_l0_hc_ffn_fn(x_ptr, fn_ptr, base_ptr, scale_ptr, y_ptr, post_ptr, comb_ptr, part_ptr,
        rows, rows_pad, splits, kb_split, sx_row, sx_stream, s_fn, sy_row, spost_row, scomb_row,
        scomb_i, count_ptr, N: tl.constexpr = 4, D: tl.constexpr = 64, J: tl.constexpr = 24,
        NP: tl.constexpr = 4, JP: tl.constexpr = 32, BLOCK_T: tl.constexpr = 16,
        BLOCK_P: tl.constexpr = 64, BLOCK_K: tl.constexpr = 64, BLOCK_Y: tl.constexpr = 64,
        SB: tl.constexpr = 64, RB: tl.constexpr = 16, SG: tl.constexpr = 16,
        NORM_EPS: tl.constexpr = 1e-05, HC_EPS: tl.constexpr = 1e-06, ITERS: tl.constexpr = 20,
        OUT_EPS: tl.constexpr = 1e-05):
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
def k05_hc_pre_l0_hc_ffn_fn_proj(x_ptr, fn_ptr, base_ptr, scale_ptr, y_ptr, post_ptr, comb_ptr,
        part_ptr, rows, rows_pad, splits, kb_split, sx_row, sx_stream, s_fn, sy_row, spost_row,
        scomb_row, scomb_i, N: tl.constexpr = 4, D: tl.constexpr = 64, J: tl.constexpr = 24,
        NP: tl.constexpr = 4, JP: tl.constexpr = 32, BLOCK_T: tl.constexpr = 16,
        BLOCK_P: tl.constexpr = 64, BLOCK_K: tl.constexpr = 64, BLOCK_Y: tl.constexpr = 64,
        SB: tl.constexpr = 64, RB: tl.constexpr = 16, SG: tl.constexpr = 16,
        NORM_EPS: tl.constexpr = 1e-05, HC_EPS: tl.constexpr = 1e-06, ITERS: tl.constexpr = 20,
        OUT_EPS: tl.constexpr = 1e-05):
    tl.extra.cuda.gdc_wait()  # the previous grid's writes are visible
    _partials(x_ptr, fn_ptr, part_ptr, rows, rows_pad, kb_split, sx_row, sx_stream, s_fn, D, N, J,
              JP, BLOCK_P, BLOCK_K)


@triton.jit(do_not_specialize=["rows", "rows_pad", "splits", "kb_split"])
def k05_hc_pre_l0_hc_ffn_fn_finish(x_ptr, fn_ptr, base_ptr, scale_ptr, y_ptr, post_ptr, comb_ptr,
        part_ptr, rows, rows_pad, splits, kb_split, sx_row, sx_stream, s_fn, sy_row, spost_row,
        scomb_row, scomb_i, N: tl.constexpr = 4, D: tl.constexpr = 64, J: tl.constexpr = 24,
        NP: tl.constexpr = 4, JP: tl.constexpr = 32, BLOCK_T: tl.constexpr = 16,
        BLOCK_P: tl.constexpr = 64, BLOCK_K: tl.constexpr = 64, BLOCK_Y: tl.constexpr = 64,
        SB: tl.constexpr = 64, RB: tl.constexpr = 16, SG: tl.constexpr = 16,
        NORM_EPS: tl.constexpr = 1e-05, HC_EPS: tl.constexpr = 1e-06, ITERS: tl.constexpr = 20,
        OUT_EPS: tl.constexpr = 1e-05):
    tl.extra.cuda.gdc_wait()  # the previous grid's writes are visible
    _finish_row(tl.program_id(0), x_ptr, base_ptr, scale_ptr, y_ptr, post_ptr, comb_ptr, part_ptr,
                rows_pad, splits, sx_row, sx_stream, sy_row, spost_row, scomb_row, scomb_i, N, D, J,
                NP, JP, SB, BLOCK_Y, NORM_EPS, HC_EPS, ITERS, OUT_EPS)


@triton.jit(do_not_specialize=["rows", "rows_pad", "splits", "kb_split"])
def k05_hc_pre_l0_hc_ffn_fn_gates(x_ptr, fn_ptr, base_ptr, scale_ptr, y_ptr, post_ptr, comb_ptr,
        part_ptr, rows, rows_pad, splits, kb_split, sx_row, sx_stream, s_fn, sy_row, spost_row,
        scomb_row, scomb_i, N: tl.constexpr = 4, D: tl.constexpr = 64, J: tl.constexpr = 24,
        NP: tl.constexpr = 4, JP: tl.constexpr = 32, BLOCK_T: tl.constexpr = 16,
        BLOCK_P: tl.constexpr = 64, BLOCK_K: tl.constexpr = 64, BLOCK_Y: tl.constexpr = 64,
        SB: tl.constexpr = 64, RB: tl.constexpr = 16, SG: tl.constexpr = 16,
        NORM_EPS: tl.constexpr = 1e-05, HC_EPS: tl.constexpr = 1e-06, ITERS: tl.constexpr = 20,
        OUT_EPS: tl.constexpr = 1e-05):
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
    valid = (ii[:, None] < N) & (ii[None, :] < N)
    cell = ii[:, None] * N + ii[None, :]
    at = part_ptr + (splits * rows_pad + t64) * JP
    m_post = tl.load(at[:, None] + N + ii[None, :], mask=live, other=0.0)
    m_comb = tl.load(at[:, None, None] + 2 * N + cell[None, :, :],
                     mask=tmask[:, None, None] & valid[None, :, :], other=0.0)
    ss = tl.load(part_ptr + ((splits + 1) * rows_pad + t64) * JP + J, mask=tmask, other=0.0)
    # rms(x) @ fn^T == rsqrt(mean(x^2) + eps) * (x @ fn^T)
    r = tl.rsqrt(ss / (N * D) + NORM_EPS)
    bias = tl.load(base_ptr + N + ii, mask=ii < N, other=0.0)
    post = 2.0 * tl.sigmoid(m_post * r[:, None] * tl.load(scale_ptr + 1) + bias[None, :])
    tl.store(post_ptr + t64[:, None] * spost_row + ii[None, :], post, mask=live)
    bias = tl.load(base_ptr + 2 * N + cell, mask=valid, other=0.0)
    logits = m_comb * r[:, None, None] * tl.load(scale_ptr + 2) + bias[None, :, :]
    # Sinkhorn; a finite fill keeps padded rows NaN-free (zeroed after the softmax)
    logits = tl.where(valid, logits, -1e30)
    e = tl.exp(logits - tl.max(logits, axis=2)[:, :, None])
    c = tl.where(valid, e / tl.sum(e, axis=2)[:, :, None] + HC_EPS, 0.0)
    c = c / (tl.sum(c, axis=1)[:, None, :] + HC_EPS)
    for _ in range(ITERS - 1):
        c = c / (tl.sum(c, axis=2)[:, :, None] + HC_EPS)
        c = c / (tl.sum(c, axis=1)[:, None, :] + HC_EPS)
    tl.store(comb_ptr + t64[:, None, None] * scomb_row + ii[None, :, None] * scomb_i
             + ii[None, None, :], c, mask=tmask[:, None, None] & valid[None, :, :])


@triton.jit(do_not_specialize=["rows", "rows_pad", "splits", "kb_split"])
def k05_hc_pre_l0_hc_ffn_fn_apply(x_ptr, fn_ptr, base_ptr, scale_ptr, y_ptr, post_ptr, comb_ptr,
        part_ptr, rows, rows_pad, splits, kb_split, sx_row, sx_stream, s_fn, sy_row, spost_row,
        scomb_row, scomb_i, N: tl.constexpr = 4, D: tl.constexpr = 64, J: tl.constexpr = 24,
        NP: tl.constexpr = 4, JP: tl.constexpr = 32, BLOCK_T: tl.constexpr = 16,
        BLOCK_P: tl.constexpr = 64, BLOCK_K: tl.constexpr = 64, BLOCK_Y: tl.constexpr = 64,
        SB: tl.constexpr = 64, RB: tl.constexpr = 16, SG: tl.constexpr = 16,
        NORM_EPS: tl.constexpr = 1e-05, HC_EPS: tl.constexpr = 1e-06, ITERS: tl.constexpr = 20,
        OUT_EPS: tl.constexpr = 1e-05):
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
