# k07_linear_hc_post_l0_down: matmul
# fuses: %17 linear, %18 hc_post
# node: %18 = linear_hc_post(%16, @layers.0.mlp.down_proj.weight, %11, %12.1, %12.2) {eps=None, group=0} : f32[T, 4, 64]  # fused: %17 linear, %18 hc_post
# %16 -> arena+131072 col 0 [128]
# @layers.0.mlp.down_proj.weight -> weights
# %11 -> arena+65536 col 0 [4, 64]
# %12.1 -> arena+151552 col 0 [4]
# %12.2 -> arena+147456 col 0 [4, 4]
# %18 -> arena+0 col 0 [4, 64]
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


@triton.jit(do_not_specialize=["rows"])
def k07_linear_hc_post_l0_down(
    x_ptr, w_ptr, out_ptr, stream_ptr, post_ptr, comb_ptr, rows, sx_t, so_t, so_h, sst_t, sst_h,
    sp_t, sc_t, sc_i, fn_ptr, part_ptr, parts_ptr, s_fn, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, GEMV: tl.constexpr,
    SITE: tl.constexpr):
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
    w_cols = w_ptr + rn.to(tl.int64)[None, :] * 128
    tl.extra.cuda.gdc_wait()  # the previous grid's writes are visible
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, 128, BLOCK_K):
        kk = k0 + rk
        k_ok = kk < 128
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
            q = tl.arange(0, 16)
            gv = tl.zeros((16,), tl.float32)
            xs0 = tl.load(out_ptr + 0 * so_h + rn, mask=n_ok, other=0.0)
            wf = tl.load(fn_ptr + jj[:, None] * s_fn + 0 + rn[None, :],
                         mask=(jj < 24)[:, None] & n_ok[None, :], other=0.0)
            pj += tl.sum(wf.to(tl.float32) * xs0[None, :], axis=1)
            hi = xs0.to(parts_ptr.dtype.element_ty)
            tl.store(parts_ptr + 0 + rn, hi, mask=n_ok)
            tl.store(parts_ptr + 256 + rn, (xs0 - hi.to(tl.float32)).to(parts_ptr.dtype.element_ty), mask=n_ok)
            xs1 = tl.load(out_ptr + 1 * so_h + rn, mask=n_ok, other=0.0)
            wf = tl.load(fn_ptr + jj[:, None] * s_fn + 64 + rn[None, :],
                         mask=(jj < 24)[:, None] & n_ok[None, :], other=0.0)
            pj += tl.sum(wf.to(tl.float32) * xs1[None, :], axis=1)
            hi = xs1.to(parts_ptr.dtype.element_ty)
            tl.store(parts_ptr + 64 + rn, hi, mask=n_ok)
            tl.store(parts_ptr + 320 + rn, (xs1 - hi.to(tl.float32)).to(parts_ptr.dtype.element_ty), mask=n_ok)
            xs2 = tl.load(out_ptr + 2 * so_h + rn, mask=n_ok, other=0.0)
            wf = tl.load(fn_ptr + jj[:, None] * s_fn + 128 + rn[None, :],
                         mask=(jj < 24)[:, None] & n_ok[None, :], other=0.0)
            pj += tl.sum(wf.to(tl.float32) * xs2[None, :], axis=1)
            hi = xs2.to(parts_ptr.dtype.element_ty)
            tl.store(parts_ptr + 128 + rn, hi, mask=n_ok)
            tl.store(parts_ptr + 384 + rn, (xs2 - hi.to(tl.float32)).to(parts_ptr.dtype.element_ty), mask=n_ok)
            xs3 = tl.load(out_ptr + 3 * so_h + rn, mask=n_ok, other=0.0)
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
def k07_linear_hc_post_l0_down_y(
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
    w_cols = w_ptr + rn.to(tl.int64)[None, :] * 128
    tl.extra.cuda.gdc_wait()  # the previous grid's writes are visible
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, 128, BLOCK_K):
        kk = k0 + rk
        k_ok = kk < 128
        x_ok = m_ok[:, None] & k_ok[None, :]
        b0 = tl.load(w_cols + kk[:, None], mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        a = tl.load(x_rows + kk[None, :], mask=x_ok, other=0.0)
        acc = tl.dot(a.to(b0.dtype), b0, acc)
    o_ok = m_ok[:, None] & n_ok[None, :]
    o_rows = out_ptr + rm64[:, None] * so_t
    tl.store(o_rows + rn[None, :], acc.to(out_ptr.dtype.element_ty), mask=o_ok)


@triton.jit
def k07_linear_hc_post_l0_down_post(f_ptr, x_ptr, post_ptr, comb_ptr, o_ptr, sf, sx_row, sx_i, spost, scomb_row,
        scomb_i, so_row, so_i, N: tl.constexpr = 4,
        NP: tl.constexpr = 4, D: tl.constexpr = 64,
        BLOCK_D: tl.constexpr = 64):
    tl.extra.cuda.gdc_wait()  # the previous grid's writes are visible
    pid = tl.program_id(0)
    r = (tl.num_programs(0) - 1 - pid).to(tl.int64)
    c = tl.arange(0, BLOCK_D)
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
