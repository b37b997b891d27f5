# k13_swiglu_linear_l1_gate_up: matmul
# fuses: %30 rmsnorm, %31 linear, %32 linear, %33 swiglu
# node: %33 = swiglu_linear(%29, @layers.1.mlp.gate_proj+up_proj.weight~post_attention_layernorm) {eps=1e-05, limit=None} : bf16[T, 128]  # fused: %30 rmsnorm, %31 linear, %32 linear, %33 swiglu
# %29 -> arena+0 col 0 [64]
# @layers.1.mlp.gate_proj+up_proj.weight~post_attention_layernorm -> weights
# %33 -> arena+131072 col 0 [128]
import triton
import triton.language as tl


@triton.jit(do_not_specialize=["rows"])
def k13_swiglu_linear_l1_gate_up(
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
    acc_g = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    sq2 = tl.zeros([BLOCK_M, BLOCK_K], dtype=tl.float32)
    sqm = tl.zeros([BLOCK_M, BLOCK_M], dtype=tl.float32)  # GEMV: x x^T
    for k0 in range(0, 64, BLOCK_K):
        kk = k0 + rk
        k_ok = kk < 64
        x_ok = m_ok[:, None] & k_ok[None, :]
        b0 = tl.load(w_cols + kk[:, None], mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        b1 = tl.load(w_cols + 8192 + kk[:, None], mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        if GEMV:
            a = tl.load(x_rows + kk[None, :], mask=x_ok, other=0.0)
            sqm = tl.dot(a, tl.trans(a), sqm)
            acc_g = tl.dot(a.to(b0.dtype), b0, acc_g)
            acc_u = tl.dot(a.to(b1.dtype), b1, acc_u)
        else:
            a = tl.load(x_rows + kk[None, :], mask=x_ok, other=0.0)
            af = tl.load(x_rows + kk[None, :], mask=x_ok, other=0.0,
                         eviction_policy="evict_last").to(tl.float32)
            sq2 += af * af
            acc_g = tl.dot(a.to(b0.dtype), b0, acc_g)
            acc_u = tl.dot(a.to(b1.dtype), b1, acc_u)
    if GEMV:
        i = tl.arange(0, BLOCK_M)
        sq = tl.sum(tl.where(i[:, None] == i[None, :], sqm, 0.0), axis=1)
    else:
        sq = tl.sum(sq2, axis=1)
    scale = tl.rsqrt(sq / 64 + 1e-05)[:, None]
    acc_g = acc_g * scale
    acc_u = acc_u * scale
    o_ok = m_ok[:, None] & n_ok[None, :]
    o_rows = out_ptr + rm64[:, None] * so_t
    h = acc_g * tl.sigmoid(acc_g) * acc_u
    tl.store(o_rows + rn[None, :], h.to(out_ptr.dtype.element_ty), mask=o_ok)
