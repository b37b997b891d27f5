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
                            4, 64, 24, 4, 32, 64, 64, 1e-05, 1e-06, 20, 1e-05)
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
