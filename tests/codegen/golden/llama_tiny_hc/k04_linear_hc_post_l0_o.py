# k04_linear_hc_post_l0_o: matmul
# fuses: %10 linear, %11 hc_post
# node: %11 = linear_hc_post(%9, @layers.0.self_attn.o_proj.weight, %1, %2.1, %2.2) {eps=None, group=0} : f32[T, 4, 64]  # fused: %10 linear, %11 hc_post
# %9 -> arena+131072 col 0 [64]
# @layers.0.self_attn.o_proj.weight -> weights
# %1 -> arena+0 col 0 [4, 64]
# %2.1 -> arena+143360 col 0 [4]
# %2.2 -> arena+139264 col 0 [4, 4]
# %11 -> arena+65536 col 0 [4, 64]
import triton
import triton.language as tl


@triton.jit
def _halves(t, BM: tl.constexpr, W: tl.constexpr):
    return tl.split(tl.permute(tl.reshape(t, [BM, 2, W]), (0, 2, 1)))


@triton.jit
def _hc_post_cols(acc, cn, m_ok, n_out, s_rows, o_rows, p_rows, c_rows, sst_h, so_h,
                  sc_i):
    ok = m_ok[:, None] & (cn < n_out)[None, :]
    x0 = tl.load(s_rows + 0 * sst_h + cn[None, :], mask=ok, other=0.0)
    x1 = tl.load(s_rows + 1 * sst_h + cn[None, :], mask=ok, other=0.0)
    x2 = tl.load(s_rows + 2 * sst_h + cn[None, :], mask=ok, other=0.0)
    x3 = tl.load(s_rows + 3 * sst_h + cn[None, :], mask=ok, other=0.0)
    o = tl.load(p_rows + 0, mask=m_ok, other=0.0)[:, None] * acc
    o += tl.load(c_rows + 0 * sc_i + 0, mask=m_ok, other=0.0)[:, None] * x0
    o += tl.load(c_rows + 1 * sc_i + 0, mask=m_ok, other=0.0)[:, None] * x1
    o += tl.load(c_rows + 2 * sc_i + 0, mask=m_ok, other=0.0)[:, None] * x2
    o += tl.load(c_rows + 3 * sc_i + 0, mask=m_ok, other=0.0)[:, None] * x3
    tl.store(o_rows + 0 * so_h + cn[None, :], o, mask=ok)
    o = tl.load(p_rows + 1, mask=m_ok, other=0.0)[:, None] * acc
    o += tl.load(c_rows + 0 * sc_i + 1, mask=m_ok, other=0.0)[:, None] * x0
    o += tl.load(c_rows + 1 * sc_i + 1, mask=m_ok, other=0.0)[:, None] * x1
    o += tl.load(c_rows + 2 * sc_i + 1, mask=m_ok, other=0.0)[:, None] * x2
    o += tl.load(c_rows + 3 * sc_i + 1, mask=m_ok, other=0.0)[:, None] * x3
    tl.store(o_rows + 1 * so_h + cn[None, :], o, mask=ok)
    o = tl.load(p_rows + 2, mask=m_ok, other=0.0)[:, None] * acc
    o += tl.load(c_rows + 0 * sc_i + 2, mask=m_ok, other=0.0)[:, None] * x0
    o += tl.load(c_rows + 1 * sc_i + 2, mask=m_ok, other=0.0)[:, None] * x1
    o += tl.load(c_rows + 2 * sc_i + 2, mask=m_ok, other=0.0)[:, None] * x2
    o += tl.load(c_rows + 3 * sc_i + 2, mask=m_ok, other=0.0)[:, None] * x3
    tl.store(o_rows + 2 * so_h + cn[None, :], o, mask=ok)
    o = tl.load(p_rows + 3, mask=m_ok, other=0.0)[:, None] * acc
    o += tl.load(c_rows + 0 * sc_i + 3, mask=m_ok, other=0.0)[:, None] * x0
    o += tl.load(c_rows + 1 * sc_i + 3, mask=m_ok, other=0.0)[:, None] * x1
    o += tl.load(c_rows + 2 * sc_i + 3, mask=m_ok, other=0.0)[:, None] * x2
    o += tl.load(c_rows + 3 * sc_i + 3, mask=m_ok, other=0.0)[:, None] * x3
    tl.store(o_rows + 3 * so_h + cn[None, :], o, mask=ok)


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


@triton.jit(do_not_specialize=["rows"])
def k04_linear_hc_post_l0_o(
    x_ptr, w_ptr, out_ptr, stream_ptr, post_ptr, comb_ptr, rows, sx_t, so_t, so_h, sst_t, sst_h,
    sp_t, sc_t, sc_i, fn_ptr, base_ptr, scale_ptr, y_ptr, spost_ptr, scomb_ptr, part_ptr, count_ptr,
    s_fn, s_y, s_post, s_comb, s_comb_i, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, GEMV: tl.constexpr, SITE: tl.constexpr):
    pid = tl.program_id(0)
    num_m = tl.cdiv(rows, BLOCK_M)
    num_n = tl.cdiv(64, BLOCK_N)
    group = GROUP_M * num_n
    first_m = (pid // group) * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < rows
    n_ok = rn < 64
    rm64 = rm.to(tl.int64)  # row offsets of big activations overflow int32
    x_rows = x_ptr + rm64[:, None] * sx_t
    w_cols = w_ptr + rn.to(tl.int64)[None, :] * 64
    tl.extra.cuda.gdc_wait()  # the previous grid's writes are visible
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, 64, BLOCK_K):
        kk = k0 + rk
        k_ok = kk < 64
        x_ok = m_ok[:, None] & k_ok[None, :]
        b0 = tl.load(w_cols + kk[:, None], mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        a = tl.load(x_rows + kk[None, :], mask=x_ok, other=0.0)
        acc = tl.dot(a.to(b0.dtype), b0, acc)
    o_ok = m_ok[:, None] & n_ok[None, :]
    o_rows = out_ptr + rm64[:, None] * so_t
    s_rows = stream_ptr + rm64[:, None] * sst_t
    p_rows = post_ptr + rm64 * sp_t
    c_rows = comb_ptr + rm64 * sc_t
    if GEMV:
        _hc_post_cols(acc, rn, m_ok, 64, s_rows, o_rows, p_rows, c_rows, sst_h, so_h, sc_i)
        if SITE:
            tl.debug_barrier()  # this program's new stream columns are stored
            jj = tl.arange(0, 32)
            pj = tl.zeros((32,), tl.float32)
            for i in tl.static_range(4):
                xs = tl.load(out_ptr + i * so_h + rn, mask=n_ok, other=0.0)
                wf = tl.load(fn_ptr + jj[:, None] * s_fn + i * 64 + rn[None, :],
                             mask=(jj < 24)[:, None] & n_ok[None, :], other=0.0)
                pj += tl.sum(wf.to(tl.float32) * xs[None, :], axis=1)
            tl.store(part_ptr + pid_n * 32 + jj, pj)
            tl.debug_barrier()  # every thread's partials are stored before the ticket
            ticket = tl.atomic_add(count_ptr, 1, sem="acq_rel")
            if ticket == num_n - 1:
                tl.debug_barrier()
                tl.store(count_ptr, 0)
                _finish_row(pid_m, out_ptr, base_ptr, scale_ptr, y_ptr, spost_ptr, scomb_ptr, part_ptr, 1,
                            num_n, so_t, so_h, s_y, s_post, s_comb, s_comb_i,
                            4, 64, 24, 4, 32, 128, 64, 1e-05, 1e-06, 20, 1e-05)
    else:
        acc0, acc1 = _halves(acc, BLOCK_M, BLOCK_N // 2)
        acc00, acc01 = _halves(acc0, BLOCK_M, BLOCK_N // 4)
        acc10, acc11 = _halves(acc1, BLOCK_M, BLOCK_N // 4)
        acc000, acc001 = _halves(acc00, BLOCK_M, BLOCK_N // 8)
        acc010, acc011 = _halves(acc01, BLOCK_M, BLOCK_N // 8)
        acc100, acc101 = _halves(acc10, BLOCK_M, BLOCK_N // 8)
        acc110, acc111 = _halves(acc11, BLOCK_M, BLOCK_N // 8)
        cn = pid_n * BLOCK_N + 0 * (BLOCK_N // 8) + tl.arange(0, BLOCK_N // 8)
        _hc_post_cols(acc000, cn, m_ok, 64, s_rows, o_rows, p_rows, c_rows, sst_h, so_h, sc_i)
        cn = pid_n * BLOCK_N + 1 * (BLOCK_N // 8) + tl.arange(0, BLOCK_N // 8)
        _hc_post_cols(acc001, cn, m_ok, 64, s_rows, o_rows, p_rows, c_rows, sst_h, so_h, sc_i)
        cn = pid_n * BLOCK_N + 2 * (BLOCK_N // 8) + tl.arange(0, BLOCK_N // 8)
        _hc_post_cols(acc010, cn, m_ok, 64, s_rows, o_rows, p_rows, c_rows, sst_h, so_h, sc_i)
        cn = pid_n * BLOCK_N + 3 * (BLOCK_N // 8) + tl.arange(0, BLOCK_N // 8)
        _hc_post_cols(acc011, cn, m_ok, 64, s_rows, o_rows, p_rows, c_rows, sst_h, so_h, sc_i)
        cn = pid_n * BLOCK_N + 4 * (BLOCK_N // 8) + tl.arange(0, BLOCK_N // 8)
        _hc_post_cols(acc100, cn, m_ok, 64, s_rows, o_rows, p_rows, c_rows, sst_h, so_h, sc_i)
        cn = pid_n * BLOCK_N + 5 * (BLOCK_N // 8) + tl.arange(0, BLOCK_N // 8)
        _hc_post_cols(acc101, cn, m_ok, 64, s_rows, o_rows, p_rows, c_rows, sst_h, so_h, sc_i)
        cn = pid_n * BLOCK_N + 6 * (BLOCK_N // 8) + tl.arange(0, BLOCK_N // 8)
        _hc_post_cols(acc110, cn, m_ok, 64, s_rows, o_rows, p_rows, c_rows, sst_h, so_h, sc_i)
        cn = pid_n * BLOCK_N + 7 * (BLOCK_N // 8) + tl.arange(0, BLOCK_N // 8)
        _hc_post_cols(acc111, cn, m_ok, 64, s_rows, o_rows, p_rows, c_rows, sst_h, so_h, sc_i)


@triton.jit(do_not_specialize=["rows"])
def k04_linear_hc_post_l0_o_y(
    x_ptr, w_ptr, out_ptr, rows, sx_t, so_t, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, GEMV: tl.constexpr):
    pid = tl.program_id(0)
    num_m = tl.cdiv(rows, BLOCK_M)
    num_n = tl.cdiv(64, BLOCK_N)
    group = GROUP_M * num_n
    first_m = (pid // group) * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < rows
    n_ok = rn < 64
    rm64 = rm.to(tl.int64)  # row offsets of big activations overflow int32
    x_rows = x_ptr + rm64[:, None] * sx_t
    w_cols = w_ptr + rn.to(tl.int64)[None, :] * 64
    tl.extra.cuda.gdc_wait()  # the previous grid's writes are visible
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, 64, BLOCK_K):
        kk = k0 + rk
        k_ok = kk < 64
        x_ok = m_ok[:, None] & k_ok[None, :]
        b0 = tl.load(w_cols + kk[:, None], mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        a = tl.load(x_rows + kk[None, :], mask=x_ok, other=0.0)
        acc = tl.dot(a.to(b0.dtype), b0, acc)
    o_ok = m_ok[:, None] & n_ok[None, :]
    o_rows = out_ptr + rm64[:, None] * so_t
    tl.store(o_rows + rn[None, :], acc.to(out_ptr.dtype.element_ty), mask=o_ok)


@triton.jit
def k04_linear_hc_post_l0_o_post(f_ptr, x_ptr, post_ptr, comb_ptr, o_ptr, sf, sx_row, sx_i, spost, scomb_row,
        scomb_i, so_row, so_i, N: tl.constexpr = 4,
        NP: tl.constexpr = 4, D: tl.constexpr = 64,
        BLOCK_D: tl.constexpr = 64):
    tl.extra.cuda.gdc_wait()  # the previous grid's writes are visible
    r = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    cm = c < D
    jj = tl.arange(0, NP)
    jm = jj < N
    f = tl.load(f_ptr + r * sf + c, mask=cm, other=0.0).to(tl.float32)
    post = tl.load(post_ptr + r * spost + jj, mask=jm, other=0.0)
    out = post[:, None] * f[None, :]  # [NP, BLOCK_D]
    for i in tl.static_range(N):
        x = tl.load(x_ptr + r * sx_row + i * sx_i + c, mask=cm, other=0.0)
        mix = tl.load(comb_ptr + r * scomb_row + i * scomb_i + jj, mask=jm, other=0.0)
        out += mix[:, None] * x[None, :]
    tl.store(o_ptr + r * so_row + jj[:, None] * so_i + c[None, :], out,
             mask=jm[:, None] & cm[None, :])
