# k06_swiglu_linear_l0_gate_up: matmul
# fuses: %14 linear, %15 linear, %16 swiglu
# node: %16 = swiglu_linear(%12, @layers.0.mlp.gate_proj+up_proj.weight~post_attention_layernorm) {eps=None, limit=None} : bf16[T, 128]  # fused: %14 linear, %15 linear, %16 swiglu
# %12 -> arena+0 col 0 [64]
# @layers.0.mlp.gate_proj+up_proj.weight~post_attention_layernorm -> weights
# %16 -> arena+131072 col 0 [128]
import triton
import triton.language as tl


@triton.jit(do_not_specialize=["rows"])
def k06_swiglu_linear_l0_gate_up(
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
    acc_g = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, 64, BLOCK_K):
        kk = k0 + rk
        k_ok = kk < 64
        x_ok = m_ok[:, None] & k_ok[None, :]
        b0 = tl.load(w_cols + kk[:, None], mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        b1 = tl.load(w_cols + 8192 + kk[:, None], mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        a = tl.load(x_rows + kk[None, :], mask=x_ok, other=0.0)
        acc_g = tl.dot(a.to(b0.dtype), b0, acc_g)
        acc_u = tl.dot(a.to(b1.dtype), b1, acc_u)
    o_ok = m_ok[:, None] & n_ok[None, :]
    o_rows = out_ptr + rm64[:, None] * so_t
    h = acc_g * tl.sigmoid(acc_g) * acc_u
    tl.store(o_rows + rn[None, :], h.to(out_ptr.dtype.element_ty), mask=o_ok)
