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


@triton.jit(do_not_specialize=["rows", "rows_pad", "splits", "d_split"])
def k05_hc_pre_l0_hc_ffn_fn(x_ptr, fn_ptr, base_ptr, scale_ptr, y_ptr, post_ptr, comb_ptr, part_ptr, count_ptr,
        rows, rows_pad, splits, d_split, sx_row, sx_stream, s_fn, sy_row, spost_row, scomb_row,
        scomb_i, N: tl.constexpr = 4, D: tl.constexpr = 64,
        J: tl.constexpr = 24, NP: tl.constexpr = 4, JP: tl.constexpr = 32,
        JQ: tl.constexpr = 48, BLOCK_T: tl.constexpr = 16,
        BLOCK_K: tl.constexpr = 32, BLOCK_D: tl.constexpr = 64,
        BLOCK_Y: tl.constexpr = 64, FEW_ROWS: tl.constexpr = 4,
        NORM_EPS: tl.constexpr = 1e-05, HC_EPS: tl.constexpr = 1e-06,
        ITERS: tl.constexpr = 20,
        OUT_EPS: tl.constexpr = 1e-05):
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

    acc = tl.zeros((BLOCK_T, JP), tl.float32)
    gram = tl.zeros((BLOCK_T * NP, BLOCK_T * NP), tl.float32)
    for d0 in range(0, d_split, BLOCK_K):
        d = d_lo + d0 + kk  # d_split is a multiple of BLOCK_K
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
        wt = tl.trans(w2)
        if fn_ptr.dtype.element_ty == tl.bfloat16:
            x_hi = x2.to(tl.bfloat16)
            acc = tl.dot(x_hi, wt, acc)
            acc = tl.dot((x2 - x_hi.to(tl.float32)).to(tl.bfloat16), wt, acc)
        else:
            acc = tl.dot(x2, wt.to(tl.float32), acc, input_precision="tf32x3")
        gram = tl.dot(xf, tl.trans(xf), gram, input_precision="tf32x3")
    # the Gram matrix of row t is the (t, t) diagonal block of the stacked rows' products
    g4 = tl.reshape(gram, (BLOCK_T, NP, BLOCK_T, NP))
    eye = rr[:, None] == rr[None, :]
    g = tl.sum(tl.where(eye[:, None, :, None], g4, 0.0), axis=2)  # [BLOCK_T, NP, NP]
    prow = part_ptr + (tl.program_id(1) * rows_pad + t64) * JQ
    tl.store(prow[:, None] + j[None, :], acc, mask=tmask[:, None])
    tl.store(prow[:, None, None] + JP + ii[None, :, None] * NP + ii[None, None, :], g,
             mask=tmask[:, None, None])

    # every thread's partials are written before the ticket; the last ticket finishes the block
    tl.debug_barrier()
    ticket = tl.atomic_add(count_ptr + tl.program_id(0), 1, sem="acq_rel")
    if ticket == splits - 1:
        tl.debug_barrier()
        tl.store(count_ptr + tl.program_id(0), 0)
        acc = tl.zeros((BLOCK_T, JP), tl.float32)
        g = tl.zeros((BLOCK_T, NP, NP), tl.float32)
        for s in range(0, splits, 1):
            prow = part_ptr + (s * rows_pad + t64) * JQ
            acc += tl.load(prow[:, None] + j[None, :], mask=tmask[:, None], other=0.0,
                           cache_modifier=".cg")
            g += tl.load(prow[:, None, None] + JP + ii[None, :, None] * NP + ii[None, None, :],
                         mask=tmask[:, None, None], other=0.0, cache_modifier=".cg")
        diag = ii[:, None] == ii[None, :]
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
        ysq = tl.sum(tl.sum(pre[:, :, None] * pre[:, None, :] * g, axis=2), axis=1)
        inv = tl.rsqrt(ysq / D + OUT_EPS)
        n_live = tl.minimum(rows - tl.program_id(0) * BLOCK_T, BLOCK_T)
        if n_live <= FEW_ROWS:  # decode: the live rows one at a time, wide steps
            dy = tl.arange(0, BLOCK_Y)
            for r in range(0, n_live, 1):
                one = rr == r
                pre_r = tl.sum(tl.where(one[:, None], pre, 0.0), axis=0) \
                    * tl.sum(tl.where(one, inv, 0.0), axis=0)  # [NP]
                row = (tl.program_id(0) * BLOCK_T + r).to(tl.int64)
                x_row = x_ptr + row * sx_row + ii[:, None] * sx_stream
                for d0 in range(0, D, BLOCK_Y):
                    d = d0 + dy
                    x = tl.load(x_row + d[None, :], mask=smask[:, None] & (d < D)[None, :],
                                other=0.0)
                    y = tl.sum(pre_r[:, None] * x.to(tl.float32), axis=0)
                    tl.store(y_ptr + row * sy_row + d, y.to(y_ptr.dtype.element_ty), mask=d < D)
        else:  # the whole block in [BLOCK_T, NP, BLOCK_D] tiles
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
