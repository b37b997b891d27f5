# k06_swiglu_linear_l0_gate_up: matmul
# fuses: %14 linear, %15 linear, %16 swiglu
# node: %16 = swiglu_linear(%12, @layers.0.mlp.gate_proj+up_proj.weight~post_attention_layernorm) {eps=None, limit=None} : bf16[T, 128]  # fused: %14 linear, %15 linear, %16 swiglu
# %12 -> arena+0 col 0 [64]
# @layers.0.mlp.gate_proj+up_proj.weight~post_attention_layernorm -> weights
# %16 -> arena+131072 col 0 [128]
import triton
import triton.language as tl


@triton.jit
def _site_gates(part_ptr, splits, base_ptr, scale_ptr, post_ptr, comb_ptr, scomb_i,
                N: tl.constexpr, D: tl.constexpr, J: tl.constexpr, JP: tl.constexpr,
                SB: tl.constexpr, NORM_EPS: tl.constexpr, HC_EPS: tl.constexpr,
                ITERS: tl.constexpr):
    """Row 0's post and comb from its partials (rows_pad 1; sum(x^2) in column J)."""
    row = 0
    rows_pad = 1
    spost_row = 0
    scomb_row = 0
    j = tl.arange(0, JP)
    m = tl.zeros((JP,), tl.float32)
    sb = tl.arange(0, SB)
    for s0 in range(0, splits, SB):
        s = s0 + sb
        m += tl.sum(tl.load(part_ptr + (s[:, None] * rows_pad + row) * JP + j[None, :],
                            mask=(s < splits)[:, None], other=0.0, cache_modifier=".cg"), axis=0)
    ss = tl.sum(tl.where(j == J, m, 0.0), axis=0)
    # rms(x) @ fn^T == rsqrt(mean(x^2) + eps) * (x @ fn^T)
    sc = tl.where(j < N, tl.load(scale_ptr), tl.where(j < 2 * N, tl.load(scale_ptr + 1),
                                                       tl.load(scale_ptr + 2)))
    z = m * tl.rsqrt(ss / (N * D) + NORM_EPS) * sc + tl.load(base_ptr + j, mask=j < J, other=0.0)
    sig = tl.sigmoid(z)
    tl.store(post_ptr + row * spost_row + (j - N), 2.0 * sig, mask=(j >= N) & (j < 2 * N))
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
def k06_swiglu_linear_l0_gate_up(
    x_ptr, w_ptr, out_ptr, rows, sx_t, so_t, parts_ptr, part_ptr, base_ptr, scale_ptr, spost_ptr,
    scomb_ptr, s_comb_i, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, GEMV: tl.constexpr, FORM: tl.constexpr):
    pid = tl.program_id(0) - FORM
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
    if FORM:
        if tl.program_id(0) == 0:
            _site_gates(part_ptr, 2, base_ptr, scale_ptr, spost_ptr, scomb_ptr, s_comb_i, 4, 64, 24,
                        32, 128, 1e-05, 1e-06, 20)
            return
    if FORM:
        sp = tl.arange(0, 2)
        ip = tl.arange(0, 4)
        q = tl.arange(0, 16)
        live = (sp < 2)[:, None]
        pm = tl.load(part_ptr + sp[:, None] * 32 + ip[None, :],
                     mask=live & (ip < 4)[None, :], other=0.0, cache_modifier=".cg")
        pg = tl.load(part_ptr + 64 + sp[:, None] * 16 + q[None, :], mask=live,
                     other=0.0, cache_modifier=".cg")
    acc_g = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, 64, BLOCK_K):
        kk = k0 + rk
        k_ok = kk < 64
        x_ok = m_ok[:, None] & k_ok[None, :]
        b0 = tl.load(w_cols + kk[:, None], mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        b1 = tl.load(w_cols + 8192 + kk[:, None], mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        if FORM:
            a = tl.load(x_rows + kk[None, :], mask=(rm < 8)[:, None] & k_ok[None, :], other=0.0)
        else:
            a = tl.load(x_rows + kk[None, :], mask=x_ok, other=0.0)
        acc_g = tl.dot(a.to(b0.dtype), b0, acc_g)
        acc_u = tl.dot(a.to(b1.dtype), b1, acc_u)
    if FORM:
        g = tl.sum(pg, axis=0)
        ss = tl.sum(tl.where(q % 5 == 0, g, 0.0), axis=0)  # the trace: sum(x^2)
        r = tl.rsqrt(ss / 256 + 1e-05)
        pre = tl.sigmoid(tl.sum(pm, axis=0) * r * tl.load(scale_ptr)
                         + tl.load(base_ptr + ip, mask=ip < 4, other=0.0)) + 1e-06
        pick = ((rm % 4)[:, None] == ip[None, :]) & (rm < 8)[:, None]
        pa = tl.sum(tl.where(pick, pre[None, :], 0.0), axis=1)
        qa = tl.sum(tl.where((q // 4)[:, None] == ip[None, :], pre[None, :], 0.0), axis=1)
        qb = tl.sum(tl.where((q % 4)[:, None] == ip[None, :], pre[None, :], 0.0), axis=1)
        yy = tl.sum(g * qa * qb, axis=0)
        inv = tl.rsqrt(yy / 64 + 1e-05)
        acc_g = tl.broadcast_to(tl.sum(acc_g * pa[:, None], axis=0)[None, :] * inv, [BLOCK_M, BLOCK_N])
        acc_u = tl.broadcast_to(tl.sum(acc_u * pa[:, None], axis=0)[None, :] * inv, [BLOCK_M, BLOCK_N])
    o_ok = m_ok[:, None] & n_ok[None, :]
    o_rows = out_ptr + rm64[:, None] * so_t
    h = acc_g * tl.sigmoid(acc_g) * acc_u
    tl.store(o_rows + rn[None, :], h.to(out_ptr.dtype.element_ty), mask=o_ok)
