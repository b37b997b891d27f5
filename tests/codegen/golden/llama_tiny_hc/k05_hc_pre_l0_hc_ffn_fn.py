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


@triton.jit(do_not_specialize=["rows", "rows_pad", "splits", "k_split"])
def k05_hc_pre_l0_hc_ffn_fn(x_ptr, fn_ptr, base_ptr, scale_ptr, y_ptr, post_ptr, comb_ptr, part_ptr, count_ptr,
        rows, rows_pad, splits, k_split, sx_row, sx_stream, s_fn, sy_row, spost_row, scomb_row,
        scomb_i, N: tl.constexpr = 4, D: tl.constexpr = 64,
        J: tl.constexpr = 24, NP: tl.constexpr = 4, JP: tl.constexpr = 32,
        BLOCK_T: tl.constexpr = 16, BLOCK_K: tl.constexpr = 64,
        BLOCK_Y: tl.constexpr = 64, NORM_EPS: tl.constexpr = 1e-05,
        HC_EPS: tl.constexpr = 1e-06, ITERS: tl.constexpr = 20,
        OUT_EPS: tl.constexpr = 1e-05):
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
    for k0 in range(0, k_split, BLOCK_K):
        k = k_lo + k0 + kk  # k_split is a multiple of BLOCK_K
        kmask = k < N * D
        i = k // D  # a block may straddle two streams when D % BLOCK_K != 0
        x = tl.load(x_ptr + t64[:, None] * sx_row + (i * sx_stream + k - i * D)[None, :],
                    mask=tmask[:, None] & kmask[None, :], other=0.0).to(tl.float32)
        w = tl.load(fn_ptr + j[:, None] * s_fn + k[None, :], mask=jmask[:, None] & kmask[None, :],
                    other=0.0)
        ss += tl.sum(x * x, axis=1)
        wt = tl.trans(w)
        if fn_ptr.dtype.element_ty == tl.bfloat16:
            x_hi = x.to(tl.bfloat16)
            acc = tl.dot(x_hi, wt, acc)
            acc = tl.dot((x - x_hi.to(tl.float32)).to(tl.bfloat16), wt, acc)
        else:
            acc = tl.dot(x, wt.to(tl.float32), acc, input_precision="tf32x3")
    acc = tl.where(j[None, :] == J, ss[:, None], acc)
    tl.store(part_ptr + (tl.program_id(1) * rows_pad + t64)[:, None] * JP + j[None, :], acc,
             mask=tmask[:, None])

    # every thread's partials are written before the ticket; the last ticket finishes the block
    tl.debug_barrier()
    ticket = tl.atomic_add(count_ptr + tl.program_id(0), 1, sem="acq_rel")
    if ticket == splits - 1:
        tl.debug_barrier()
        tl.store(count_ptr + tl.program_id(0), 0)
        acc = tl.zeros((BLOCK_T, JP), tl.float32)
        for s in range(0, splits, 1):
            acc += tl.load(part_ptr + (s * rows_pad + t64)[:, None] * JP + j[None, :],
                           mask=tmask[:, None], other=0.0, cache_modifier=".cg")
        ss = tl.sum(tl.where(j[None, :] == J, acc, 0.0), axis=1)
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
        for r in range(0, n_live, 1):
            pre_r = tl.sum(tl.where(rr[:, None] == r, pre, 0.0), axis=0)  # [NP]
            row = (tl.program_id(0) * BLOCK_T + r).to(tl.int64)
            x_row = x_ptr + row * sx_row + ii[:, None] * sx_stream
            sq = tl.zeros((BLOCK_Y,), tl.float32)
            for d0 in range(0, D, BLOCK_Y):
                d = d0 + dd
                x = tl.load(x_row + d[None, :], mask=smask & (d < D)[None, :], other=0.0)
                y = tl.sum(pre_r[:, None] * x.to(tl.float32), axis=0)
                sq += y * y
            inv = tl.rsqrt(tl.sum(sq, axis=0) / D + OUT_EPS)
            for d0 in range(0, D, BLOCK_Y):
                d = d0 + dd
                x = tl.load(x_row + d[None, :], mask=smask & (d < D)[None, :], other=0.0)
                y = tl.sum(pre_r[:, None] * x.to(tl.float32), axis=0) * inv
                tl.store(y_ptr + row * sy_row + d, y.to(y_ptr.dtype.element_ty), mask=d < D)
