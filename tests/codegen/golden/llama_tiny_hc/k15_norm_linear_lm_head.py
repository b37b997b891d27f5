# k15_norm_linear_lm_head: matmul
# fuses: %36 hc_head_mean, %37 rmsnorm, %38 lm_head
# node: %38 = norm_linear(%35, @lm_head.weight~norm) {eps=1e-05, splits=(256,), out_dtype='f32'} : f32[T, 256]  # fused: %36 hc_head_mean, %37 rmsnorm, %38 lm_head
# %35 -> arena+0 col 0 [4, 64]
# @lm_head.weight~norm -> weights
# %38 -> arena+65536 col 0 [256]
import triton
import triton.language as tl


@triton.jit
def k15_norm_linear_lm_head_norm(x_ptr, h_ptr, sx_t, sx_s, sh_t, BLOCK_K: tl.constexpr):
    tl.extra.cuda.gdc_wait()  # the previous grid's writes are visible
    t = tl.program_id(0).to(tl.int64)  # row offsets of big activations overflow int32
    x_row = x_ptr + t * sx_t
    h_row = h_ptr + t * sh_t
    rk = tl.arange(0, BLOCK_K)
    sq2 = tl.zeros([BLOCK_K], dtype=tl.float32)
    for k0 in range(0, 64, BLOCK_K):
        kk = k0 + rk
        k_ok = kk < 64
        m = tl.zeros([BLOCK_K], dtype=tl.float32)
        for s in tl.static_range(4):
            m += tl.load(x_row + s * sx_s + kk, mask=k_ok, other=0.0,
                         eviction_policy="evict_last").to(tl.float32)
        m = m / 4
        sq2 += m * m
    scale = tl.rsqrt(tl.sum(sq2, axis=0) / 64 + 1e-05)
    for k0 in range(0, 64, BLOCK_K):
        kk = k0 + rk
        k_ok = kk < 64
        m = tl.zeros([BLOCK_K], dtype=tl.float32)
        for s in tl.static_range(4):
            m += tl.load(x_row + s * sx_s + kk, mask=k_ok, other=0.0,
                         eviction_policy="evict_first").to(tl.float32)
        m = m / 4
        tl.store(h_row + kk, (m * scale).to(h_ptr.dtype.element_ty), mask=k_ok)


@triton.jit(do_not_specialize=["rows"])
def k15_norm_linear_lm_head(
    x_ptr, w_ptr, out_ptr, rows, sx_t, so_t, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, GEMV: tl.constexpr):
    pid = tl.program_id(0)
    num_m = tl.cdiv(rows, BLOCK_M)
    num_n = tl.cdiv(256, BLOCK_N)
    group = GROUP_M * num_n
    first_m = (pid // group) * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < rows
    n_ok = rn < 256
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


@triton.jit(do_not_specialize=["rows"])
def k15_norm_linear_lm_head_mean(
    x_ptr, w_ptr, out_ptr, rows, sx_t, so_t, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, GEMV: tl.constexpr):
    pid = tl.program_id(0)
    num_m = tl.cdiv(rows, BLOCK_M)
    num_n = tl.cdiv(256, BLOCK_N)
    group = GROUP_M * num_n
    first_m = (pid // group) * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < rows
    n_ok = rn < 256
    rm64 = rm.to(tl.int64)  # row offsets of big activations overflow int32
    x_rows = x_ptr + rm64[:, None] * sx_t
    w_cols = w_ptr + rn.to(tl.int64)[None, :] * 64
    tl.extra.cuda.gdc_wait()  # the previous grid's writes are visible
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    sq2 = tl.zeros([BLOCK_M, BLOCK_K], dtype=tl.float32)
    sqm = tl.zeros([BLOCK_M, BLOCK_M], dtype=tl.float32)  # GEMV: x x^T
    for k0 in range(0, 64, BLOCK_K):
        kk = k0 + rk
        k_ok = kk < 64
        x_ok = m_ok[:, None] & k_ok[None, :]
        b0 = tl.load(w_cols + kk[:, None], mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        if GEMV:
            a = tl.load(x_rows + kk[None, :], mask=x_ok, other=0.0)
            sqm = tl.dot(a, tl.trans(a), sqm)
            acc = tl.dot(a.to(b0.dtype), b0, acc)
        else:
            a = tl.load(x_rows + kk[None, :], mask=x_ok, other=0.0)
            af = tl.load(x_rows + kk[None, :], mask=x_ok, other=0.0,
                         eviction_policy="evict_last").to(tl.float32)
            sq2 += af * af
            acc = tl.dot(a.to(b0.dtype), b0, acc)
    if GEMV:
        i = tl.arange(0, BLOCK_M)
        sq = tl.sum(tl.where(i[:, None] == i[None, :], sqm, 0.0), axis=1)
    else:
        sq = tl.sum(sq2, axis=1)
    scale = tl.rsqrt(sq / 64 + 1e-05)[:, None]
    acc = acc * scale
    o_ok = m_ok[:, None] & n_ok[None, :]
    o_rows = out_ptr + rm64[:, None] * so_t
    tl.store(o_rows + rn[None, :], acc.to(out_ptr.dtype.element_ty), mask=o_ok)
