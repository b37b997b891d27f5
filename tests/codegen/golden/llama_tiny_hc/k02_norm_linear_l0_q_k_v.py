# k02_norm_linear_l0_q_k_v: matmul
# fuses: %4 linear, %5 linear, %6 linear
# node: %4, %5, %6 = norm_linear(%2, @layers.0.self_attn.q_proj+k_proj+v_proj.weight~input_layernorm) {eps=None, splits=(64, 32, 32), out_dtype=''} : bf16[T, 64], bf16[T, 32], bf16[T, 32]  # fused: %4 linear, %5 linear, %6 linear
# %2 -> arena+81920 col 0 [64]
# @layers.0.self_attn.q_proj+k_proj+v_proj.weight~input_layernorm -> weights
# %4 -> arena+65536 col 0 [64]
# %5 -> arena+65536 col 64 [32]
# %6 -> arena+65536 col 96 [32]
import triton
import triton.language as tl


@triton.jit(do_not_specialize=["rows"])
def k02_norm_linear_l0_q_k_v(
    x_ptr, w_ptr, out_ptr, rows, sx_t, so_t, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, GEMV: tl.constexpr):
    pid = tl.program_id(0)
    num_m = tl.cdiv(rows, BLOCK_M)
    num_n = tl.cdiv(128, BLOCK_N)
    group = GROUP_M * num_n
    first_m = (pid // group) * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < rows
    n_ok = rn < 128
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
