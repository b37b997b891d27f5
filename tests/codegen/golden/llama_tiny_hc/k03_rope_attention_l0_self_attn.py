# k03_rope_attention_l0_self_attn: attention
# fuses: %7 rope, %8 rope, %9 attention
# node: %9 = rope_attention(%4, %5, %6, %slot, %pos) {heads=4, kv_heads=2, head_dim=16, scale=0.25, state='layers.0.self_attn', theta=10000.0, kind='llama3', factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position=64} : bf16[T, 64]  # fused: %7 rope, %8 rope, %9 attention
# %4 -> arena+65536 col 0 [64]
# %5 -> arena+65536 col 64 [32]
# %6 -> arena+65536 col 96 [32]
# %slot -> row input
# %pos -> row input
# %9 -> arena+131072 col 0 [64]
# $layers.0.self_attn.* -> state pool
import triton
import triton.language as tl


@triton.jit
def _rope_angles(p, inv_ptr, dc, dmask, HALF: tl.constexpr, ROPE: tl.constexpr):
    """(cos, sin) of position p for every head-dim column dc (column c pairs with c +- HALF and
    shares its frequency, inv[c % HALF]); zeros without RoPE."""
    cos = tl.zeros(dc.shape, tl.float32)
    sin = tl.zeros(dc.shape, tl.float32)
    if ROPE:
        ang = p.to(tl.float32) * tl.load(inv_ptr + dc % HALF, mask=dmask, other=0.0)
        cos = tl.cos(ang)
        sin = tl.sin(ang)
    return cos, sin


@triton.jit
def _rope_row(ptr, dc, dmask, cos, sin, HALF: tl.constexpr, ROPE: tl.constexpr):
    """Rotate-half RoPE of rows at ptr + dc in fp32: x c + (-x2 | x1) s, the partner half of
    each element loaded beside it (cos, sin: per dc)."""
    x = tl.load(ptr + dc, mask=dmask, other=0.0).to(tl.float32)
    if ROPE:
        lower = dc < HALF
        xp = tl.load(ptr + tl.where(lower, dc + HALF, dc - HALF), mask=dmask, other=0.0)
        x = x * cos + tl.where(lower, -xp.to(tl.float32), xp.to(tl.float32)) * sin
    return x


@triton.jit
def k03_rope_attention_l0_self_attn_rope_kv(q_ptr, k_ptr, v_ptr, pos_ptr, slot_ptr, inv_ptr, qo_ptr, kc_ptr, vc_ptr,
        sq, sk, sv, sqo, kc_s0, kc_s1, kc_s2, vc_s0, vc_s1, vc_s2, capacity, bt_ptr, bt_s0,
        H: tl.constexpr = 4, HKV: tl.constexpr = 2,
        HD: tl.constexpr = 16, HALF: tl.constexpr = 8,
        HP: tl.constexpr = 4,
        HKVP: tl.constexpr = 2,
        DP: tl.constexpr = 16, ROPE: tl.constexpr = True,
        PAGE: tl.constexpr = 64):
    tl.extra.cuda.gdc_wait()  # the previous grid's writes are visible
    row = tl.program_id(0).to(tl.int64)
    p = tl.load(pos_ptr + row)
    s = tl.load(slot_ptr + row)
    dc = tl.arange(0, DP)
    dmask = dc < HD
    cos, sin = _rope_angles(p, inv_ptr, dc, dmask, HALF, ROPE)
    cos = cos[None, :]
    sin = sin[None, :]
    h = tl.arange(0, HP)[:, None]
    qmask = (h < H) & dmask[None, :]
    q = _rope_row(q_ptr + row * sq + h * HD, dc[None, :], qmask, cos, sin, HALF, ROPE)
    tl.store(qo_ptr + row * sqo + h * HD + dc[None, :], q.to(qo_ptr.dtype.element_ty), mask=qmask)

    # padding rows (slot < 0) and out-of-range positions must not touch the caches
    keep = (s >= 0) & (p >= 0) & (p < capacity)
    s = tl.where(keep, s, 0)
    p = tl.where(keep, p, 0)
    b = tl.load(bt_ptr + s * bt_s0 + p // PAGE, mask=keep, other=0).to(tl.int64)
    hk = tl.arange(0, HKVP)[:, None]
    kmask = (hk < HKV) & dmask[None, :] & keep
    kn = _rope_row(k_ptr + row * sk + hk * HD, dc[None, :], kmask, cos, sin, HALF, ROPE)
    tl.store(kc_ptr + b * kc_s0 + (p % PAGE) * kc_s1 + hk * kc_s2 + dc[None, :], kn.to(kc_ptr.dtype.element_ty), mask=kmask)
    vn = tl.load(v_ptr + row * sv + hk * HD + dc[None, :], mask=kmask, other=0.0)
    tl.store(vc_ptr + b * vc_s0 + (p % PAGE) * vc_s1 + hk * vc_s2 + dc[None, :], vn.to(vc_ptr.dtype.element_ty), mask=kmask)


@triton.jit
def k03_rope_attention_l0_self_attn(q_ptr, kc_ptr, vc_ptr, pos_ptr, slot_ptr, o_ptr, rows, sq, so,
        kc_s0, kc_s1, kc_s2, vc_s0, vc_s1, vc_s2, bt_ptr, bt_s0,
        BLOCK_M: tl.constexpr, GP: tl.constexpr,
        G: tl.constexpr = 2, HD: tl.constexpr = 16,
        DP: tl.constexpr = 16,
        BLOCK_N: tl.constexpr = 64, QK_SCALE: tl.constexpr = 0.36067376022224085,
        PAGE: tl.constexpr = 64):
    BM: tl.constexpr = BLOCK_M * GP
    tl.extra.cuda.gdc_wait()  # the previous grid's writes are visible
    kvh = tl.program_id(1)
    i = tl.arange(0, BM)
    # the last row blocks first: in a causal prefill chunk they walk the most keys, so the
    # short ones fill the tail of the launch
    rb = tl.num_programs(0) - 1 - tl.program_id(0)
    r = rb * BLOCK_M + i // GP  # query row i -> (step row r, group head g)
    g = i % GP
    in_rows = r < rows
    slot = tl.load(slot_ptr + r, mask=in_rows, other=-1)
    pos = tl.load(pos_ptr + r, mask=in_rows, other=0)
    live = in_rows & (g < G) & (slot >= 0)
    head = kvh * G + g
    dc = tl.arange(0, DP)
    dmask = dc < HD
    r64 = r.to(tl.int64)
    q = tl.load(q_ptr + r64[:, None] * sq + head[:, None] * HD + dc[None, :],
                mask=live[:, None] & dmask[None, :], other=0.0)
    q = q.to(kc_ptr.dtype.element_ty)

    # finite floor: a row that sees no key keeps alpha = 1, p = 0 and ends with l = 0
    m_i = tl.full((BM,), -1e30, tl.float32)
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, DP), tl.float32)
    n = tl.arange(0, BLOCK_N)
    todo = live
    while tl.max(todo.to(tl.int32), axis=0) > 0:
        # one sequence of the block per pass (a single pass for decode or one prefill chunk)
        cur = tl.min(tl.where(todo, slot, 2147483647), axis=0)
        sel = todo & (slot == cur)
        hi = tl.max(tl.where(sel, pos, -1), axis=0) + 1
        k_base = kc_ptr + kvh * kc_s2
        v_base = vc_ptr + kvh * vc_s2
        # keys below `full` are visible to every selected row: no causal mask there
        full = (tl.min(tl.where(sel, pos, 2147483647), axis=0) + 1) // BLOCK_N * BLOCK_N
        bt_row = bt_ptr + cur * bt_s0
        for start in range(0, full, BLOCK_N):
            kp = start + n
            kmask = (kp < hi)[:, None] & dmask[None, :]
            blk = tl.load(bt_row + start // PAGE).to(tl.int64)
            kr = blk * kc_s0 + (start % PAGE + n) * kc_s1
            vr = blk * vc_s0 + (start % PAGE + n) * vc_s1
            k = tl.load(k_base + kr[:, None] + dc[None, :], mask=kmask, other=0.0)
            s = tl.dot(q, tl.trans(k)) * QK_SCALE
            s = tl.where(sel[:, None], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            v = tl.load(v_base + vr[:, None] + dc[None, :], mask=kmask, other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(vc_ptr.dtype.element_ty), v)
            m_i = m_new
        for start in range(full, hi, BLOCK_N):
            kp = start + n
            kmask = (kp < hi)[:, None] & dmask[None, :]
            blk = tl.load(bt_row + start // PAGE).to(tl.int64)
            kr = blk * kc_s0 + (start % PAGE + n) * kc_s1
            vr = blk * vc_s0 + (start % PAGE + n) * vc_s1
            k = tl.load(k_base + kr[:, None] + dc[None, :], mask=kmask, other=0.0)
            s = tl.dot(q, tl.trans(k)) * QK_SCALE
            s = tl.where(sel[:, None] & (kp[None, :] <= pos[:, None]), s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            v = tl.load(v_base + vr[:, None] + dc[None, :], mask=kmask, other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(vc_ptr.dtype.element_ty), v)
            m_i = m_new
        todo = todo & ~sel
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    tl.store(o_ptr + r64[:, None] * so + head[:, None] * HD + dc[None, :],
             out.to(o_ptr.dtype.element_ty), mask=(in_rows & (g < G))[:, None] & dmask[None, :])


@triton.jit
def _chunk(n_keys, splits, BLOCK_N: tl.constexpr):
    """Keys per split at length n_keys: the keys spread over `splits`, whole key blocks."""
    return tl.cdiv(tl.cdiv(tl.maximum(n_keys, 1), splits), BLOCK_N) * BLOCK_N


@triton.jit
def _merge_group(acc_ptr, ml_ptr, o_at, rh, gmask, splits, active, SP: tl.constexpr,
                 HD: tl.constexpr, DP: tl.constexpr):
    """o of a (row, kv head)'s query heads rh [GP] (o_at: their [GP, DP] outputs): the `active`
    splits' partials rescaled to a common max and summed, every head at once (one round of
    loads, where a loop over heads waited on one round a head)."""
    sp = tl.arange(0, SP)
    live = gmask[:, None] & (sp < active)[None, :]
    ml = ml_ptr + rh[:, None] * 2 * splits + sp[None, :]
    m = tl.load(ml, mask=live, other=-1e30, cache_modifier=".cg")
    w = tl.exp2(m - tl.max(m, axis=1)[:, None])  # [GP, SP]: 0 past `active`
    l_sum = tl.sum(tl.load(ml + splits, mask=live, other=0.0, cache_modifier=".cg") * w, axis=1)
    dc = tl.arange(0, DP)
    dmask = dc < HD
    at = (rh[:, None] * splits + sp[None, :]) * HD
    acc = tl.load(acc_ptr + at[:, :, None] + dc[None, None, :],
                  mask=live[:, :, None] & dmask[None, None, :], other=0.0, cache_modifier=".cg")
    out = tl.sum(acc * w[:, :, None], axis=1) / tl.where(gmask, l_sum, 1.0)[:, None]
    tl.store(o_at, out.to(o_at.dtype.element_ty), mask=gmask[:, None] & dmask[None, :])


@triton.jit
def k03_rope_attention_l0_self_attn_split(q_ptr, k_ptr, v_ptr, inv_ptr, kc_ptr, vc_ptr, pos_ptr, slot_ptr, o_ptr, acc_ptr,
        ml_ptr, cnt_ptr, sq, sk, sv, so, kc_s0, kc_s1, kc_s2, vc_s0, vc_s1, vc_s2, capacity, bt_ptr, bt_s0,
        SP: tl.constexpr, H: tl.constexpr = 4, HKV: tl.constexpr = 2,
        G: tl.constexpr = 2, GP: tl.constexpr = 16,
        HD: tl.constexpr = 16, DP: tl.constexpr = 16,
        HALF: tl.constexpr = 8, ROPE: tl.constexpr = True,
        BLOCK_N: tl.constexpr = 64, QK_SCALE: tl.constexpr = 0.36067376022224085,
        PAGE: tl.constexpr = 64):
    tl.extra.cuda.gdc_wait()  # the previous grid's writes are visible
    r = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1)
    sp = tl.program_id(2)
    splits = tl.num_programs(2)
    cur = tl.load(slot_ptr + r)
    n_keys = tl.load(pos_ptr + r) + 1
    chunk = _chunk(n_keys, splits, BLOCK_N)
    lo = sp * chunk
    hi = tl.minimum(lo + chunk, n_keys)
    g = tl.arange(0, GP)
    head = kvh * G + g
    dc = tl.arange(0, DP)
    dmask = dc < HD
    if cur < 0:  # a padding row: split 0 writes its zeros
        tl.store(o_ptr + r * so + head[:, None] * HD + dc[None, :], tl.zeros((GP, DP), tl.float32),
                 mask=(sp == 0) & (g < G)[:, None] & dmask[None, :])
        return
    if lo >= hi:  # a split past the row's keys
        return
    hmask = (g < G)[:, None] & dmask[None, :]
    own = n_keys - 1  # the row's position: its own key
    cos, sin = _rope_angles(own, inv_ptr, dc, dmask, HALF, ROPE)
    q = _rope_row(q_ptr + r * sq + head[:, None] * HD, dc[None, :], hmask, cos[None, :],
                  sin[None, :], HALF, ROPE)
    q = q.to(q_ptr.dtype.element_ty).to(kc_ptr.dtype.element_ty)
    if (hi == n_keys) & (own < capacity):  # this split holds the row's own key: write it first
        b = tl.load(bt_ptr + cur * bt_s0 + own // PAGE).to(tl.int64)
        kn = _rope_row(k_ptr + r * sk + kvh * HD, dc, dmask, cos, sin, HALF, ROPE)
        tl.store(kc_ptr + b * kc_s0 + (own % PAGE) * kc_s1 + kvh * kc_s2 + dc, kn.to(kc_ptr.dtype.element_ty), mask=dmask)
        vn = tl.load(v_ptr + r * sv + kvh * HD + dc, mask=dmask, other=0.0)
        tl.store(vc_ptr + b * vc_s0 + (own % PAGE) * vc_s1 + kvh * vc_s2 + dc, vn.to(vc_ptr.dtype.element_ty), mask=dmask)
        tl.debug_barrier()  # the stores are visible to the whole program's key loads

    # keys lo..hi-1, all visible to the row (decode: its own position is the last key)
    m_i = tl.full((GP,), -1e30, tl.float32)
    l_i = tl.zeros((GP,), tl.float32)
    acc = tl.zeros((GP, DP), tl.float32)
    n = tl.arange(0, BLOCK_N)
    k_base = kc_ptr + kvh * kc_s2
    v_base = vc_ptr + kvh * vc_s2
    bt_row = bt_ptr + cur * bt_s0
    blk_next = tl.load(bt_row + lo // PAGE)
    for start in range(lo, hi, BLOCK_N):
        kp = start + n
        kmask = (kp < hi)[:, None] & dmask[None, :]
        blk = blk_next.to(tl.int64)
        blk_next = tl.load(bt_row + tl.minimum(start + BLOCK_N, hi - 1) // PAGE)
        kr = blk * kc_s0 + (start % PAGE + n) * kc_s1
        vr = blk * vc_s0 + (start % PAGE + n) * vc_s1
        k = tl.load(k_base + kr[:, None] + dc[None, :], mask=kmask, other=0.0)
        s = tl.dot(q, tl.trans(k)) * QK_SCALE
        s = tl.where((kp < hi)[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_base + vr[:, None] + dc[None, :], mask=kmask, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(vc_ptr.dtype.element_ty), v)
        m_i = m_new
    # partials of (row, head, split sp): acc [r, head, sp, :HD], m, l [r, head, 0|1, sp]
    rh = r * H + head
    tl.store(acc_ptr + (rh * splits + sp)[:, None] * HD + dc[None, :], acc, mask=hmask)
    ml = ml_ptr + rh * 2 * splits + sp
    tl.store(ml, m_i, mask=g < G)
    tl.store(ml + splits, l_i, mask=g < G)

    # every thread's partials are written before the ticket; the last split merges the group
    tl.debug_barrier()
    active = tl.cdiv(n_keys, chunk)
    ticket = tl.atomic_add(cnt_ptr + r * HKV + kvh, 1, sem="acq_rel")
    if ticket == active - 1:
        tl.debug_barrier()
        tl.store(cnt_ptr + r * HKV + kvh, 0)
        _merge_group(acc_ptr, ml_ptr, o_ptr + r * so + head[:, None] * HD + dc[None, :], rh,
                     g < G, splits, active, SP, HD, DP)
