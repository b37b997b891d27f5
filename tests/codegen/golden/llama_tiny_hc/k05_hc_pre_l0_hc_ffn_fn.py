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


@triton.jit(do_not_specialize=["rows", "rows_pad", "splits", "kb_split"])
def k05_hc_pre_l0_hc_ffn_fn_proj(x_ptr, fn_ptr, base_ptr, scale_ptr, y_ptr, post_ptr, comb_ptr,
        part_ptr, rows, rows_pad, splits, kb_split, sx_row, sx_stream, s_fn, sy_row, spost_row,
        scomb_row, scomb_i, N: tl.constexpr = 4, D: tl.constexpr = 64, J: tl.constexpr = 24,
        NP: tl.constexpr = 4, JP: tl.constexpr = 32, GP: tl.constexpr = 16, JQ: tl.constexpr = 48,
        BLOCK_T: tl.constexpr = 16, BLOCK_K: tl.constexpr = 64, BLOCK_Y: tl.constexpr = 64,
        SB: tl.constexpr = 64, NORM_EPS: tl.constexpr = 1e-05, HC_EPS: tl.constexpr = 1e-06,
        ITERS: tl.constexpr = 20):
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
    p0_0 = tl.zeros((BLOCK_T, BLOCK_K), tl.float32)
    p0_1 = tl.zeros((BLOCK_T, BLOCK_K), tl.float32)
    p1_1 = tl.zeros((BLOCK_T, BLOCK_K), tl.float32)
    p0_2 = tl.zeros((BLOCK_T, BLOCK_K), tl.float32)
    p1_2 = tl.zeros((BLOCK_T, BLOCK_K), tl.float32)
    p2_2 = tl.zeros((BLOCK_T, BLOCK_K), tl.float32)
    p0_3 = tl.zeros((BLOCK_T, BLOCK_K), tl.float32)
    p1_3 = tl.zeros((BLOCK_T, BLOCK_K), tl.float32)
    p2_3 = tl.zeros((BLOCK_T, BLOCK_K), tl.float32)
    p3_3 = tl.zeros((BLOCK_T, BLOCK_K), tl.float32)
    for b in range(b_lo, b_hi, 1):
        c = b * BLOCK_K + cc
        xmask = tmask[:, None] & (c < D)[None, :]
        wmask = (j < J)[:, None] & (c < D)[None, :]
        x0 = tl.load(x_row + 0 * sx_stream + c[None, :], mask=xmask, other=0.0).to(tl.float32)
        w = tl.load(fn_ptr + j[:, None] * s_fn + 0 * D + c[None, :], mask=wmask, other=0.0)
        wt = tl.trans(w)
        if fn_ptr.dtype.element_ty == tl.bfloat16:
            hi = x0.to(tl.bfloat16)
            acc = tl.dot(hi, wt, acc)
            acc = tl.dot((x0 - hi.to(tl.float32)).to(tl.bfloat16), wt, acc)
        else:
            acc = tl.dot(x0, wt.to(tl.float32), acc, input_precision="tf32x3")
        p0_0 += x0 * x0
        x1 = tl.load(x_row + 1 * sx_stream + c[None, :], mask=xmask, other=0.0).to(tl.float32)
        w = tl.load(fn_ptr + j[:, None] * s_fn + 1 * D + c[None, :], mask=wmask, other=0.0)
        wt = tl.trans(w)
        if fn_ptr.dtype.element_ty == tl.bfloat16:
            hi = x1.to(tl.bfloat16)
            acc = tl.dot(hi, wt, acc)
            acc = tl.dot((x1 - hi.to(tl.float32)).to(tl.bfloat16), wt, acc)
        else:
            acc = tl.dot(x1, wt.to(tl.float32), acc, input_precision="tf32x3")
        p0_1 += x0 * x1
        p1_1 += x1 * x1
        x2 = tl.load(x_row + 2 * sx_stream + c[None, :], mask=xmask, other=0.0).to(tl.float32)
        w = tl.load(fn_ptr + j[:, None] * s_fn + 2 * D + c[None, :], mask=wmask, other=0.0)
        wt = tl.trans(w)
        if fn_ptr.dtype.element_ty == tl.bfloat16:
            hi = x2.to(tl.bfloat16)
            acc = tl.dot(hi, wt, acc)
            acc = tl.dot((x2 - hi.to(tl.float32)).to(tl.bfloat16), wt, acc)
        else:
            acc = tl.dot(x2, wt.to(tl.float32), acc, input_precision="tf32x3")
        p0_2 += x0 * x2
        p1_2 += x1 * x2
        p2_2 += x2 * x2
        x3 = tl.load(x_row + 3 * sx_stream + c[None, :], mask=xmask, other=0.0).to(tl.float32)
        w = tl.load(fn_ptr + j[:, None] * s_fn + 3 * D + c[None, :], mask=wmask, other=0.0)
        wt = tl.trans(w)
        if fn_ptr.dtype.element_ty == tl.bfloat16:
            hi = x3.to(tl.bfloat16)
            acc = tl.dot(hi, wt, acc)
            acc = tl.dot((x3 - hi.to(tl.float32)).to(tl.bfloat16), wt, acc)
        else:
            acc = tl.dot(x3, wt.to(tl.float32), acc, input_precision="tf32x3")
        p0_3 += x0 * x3
        p1_3 += x1 * x3
        p2_3 += x2 * x3
        p3_3 += x3 * x3
    gram = tl.zeros((BLOCK_T, GP), tl.float32)
    gram += tl.where(g[None, :] == 0, tl.sum(p0_0, axis=1)[:, None], 0.0)
    gram += tl.where(g[None, :] == 1, tl.sum(p0_1, axis=1)[:, None], 0.0)
    gram += tl.where(g[None, :] == 5, tl.sum(p1_1, axis=1)[:, None], 0.0)
    gram += tl.where(g[None, :] == 2, tl.sum(p0_2, axis=1)[:, None], 0.0)
    gram += tl.where(g[None, :] == 6, tl.sum(p1_2, axis=1)[:, None], 0.0)
    gram += tl.where(g[None, :] == 10, tl.sum(p2_2, axis=1)[:, None], 0.0)
    gram += tl.where(g[None, :] == 3, tl.sum(p0_3, axis=1)[:, None], 0.0)
    gram += tl.where(g[None, :] == 7, tl.sum(p1_3, axis=1)[:, None], 0.0)
    gram += tl.where(g[None, :] == 11, tl.sum(p2_3, axis=1)[:, None], 0.0)
    gram += tl.where(g[None, :] == 15, tl.sum(p3_3, axis=1)[:, None], 0.0)
    srow = (tl.program_id(1) * rows_pad + t).to(tl.int64)
    part = part_ptr + srow[:, None] * JQ
    tl.store(part + j[None, :], acc, mask=tmask[:, None])
    tl.store(part + JP + g[None, :], gram, mask=tmask[:, None])


@triton.jit(do_not_specialize=["rows", "rows_pad", "splits", "kb_split"])
def k05_hc_pre_l0_hc_ffn_fn_finish(x_ptr, fn_ptr, base_ptr, scale_ptr, y_ptr, post_ptr, comb_ptr,
        part_ptr, rows, rows_pad, splits, kb_split, sx_row, sx_stream, s_fn, sy_row, spost_row,
        scomb_row, scomb_i, N: tl.constexpr = 4, D: tl.constexpr = 64, J: tl.constexpr = 24,
        NP: tl.constexpr = 4, JP: tl.constexpr = 32, GP: tl.constexpr = 16, JQ: tl.constexpr = 48,
        BLOCK_T: tl.constexpr = 16, BLOCK_K: tl.constexpr = 64, BLOCK_Y: tl.constexpr = 64,
        SB: tl.constexpr = 64, NORM_EPS: tl.constexpr = 1e-05, HC_EPS: tl.constexpr = 1e-06,
        ITERS: tl.constexpr = 20, OUT_EPS: tl.constexpr = 1e-05):
    """Row program_id(0): the gates from its partials, BLOCK_Y columns of y; block 0 also
    post and comb."""
    row = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, JP)
    g = tl.arange(0, GP)
    ii = tl.arange(0, NP)
    sb = tl.arange(0, SB)
    m = tl.zeros((JP,), tl.float32)
    gm = tl.zeros((GP,), tl.float32)
    for s0 in range(0, splits, SB):
        part = part_ptr + ((s0 + sb)[:, None] * rows_pad + row) * JQ
        live = (s0 + sb < splits)[:, None]
        m += tl.sum(tl.load(part + j[None, :], mask=live, other=0.0, cache_modifier=".cg"), 0)
        gm += tl.sum(tl.load(part + JP + g[None, :], mask=live, other=0.0,
                             cache_modifier=".cg"), 0)
    # rms(x) @ fn^T == rsqrt(mean(x^2) + eps) * (x @ fn^T); sum(x^2) = trace(G)
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
    y = tl.sum(pre[:, None] * x, axis=0)
    # sum(y^2) = pre^T G pre, G stored as its upper triangle
    gi, gk = g // N, g % N
    tri = (gi <= gk) & (gi < N)
    pre_i = tl.sum(tl.where(gi[:, None] == ii[None, :], pre[None, :], 0.0), axis=1)
    pre_k = tl.sum(tl.where(gk[:, None] == ii[None, :], pre[None, :], 0.0), axis=1)
    yy = tl.sum(tl.where(tri, tl.where(gi == gk, 1.0, 2.0) * pre_i * pre_k * gm, 0.0), axis=0)
    y = y * tl.rsqrt(tl.maximum(yy, 0.0) / D + OUT_EPS)
    tl.store(y_ptr + row * sy_row + d, y.to(y_ptr.dtype.element_ty), mask=d < D)
    if tl.program_id(1) == 0:
        tl.store(post_ptr + row * spost_row + (j - N), 2.0 * sig, mask=(j >= N) & (j < 2 * N))
        _sinkhorn(z, comb_ptr + row * scomb_row, scomb_i, N, NP, JP, HC_EPS, ITERS)
