"""Split-KV decode attention: {name}_split, one launch a layer that also does rope_kv's work
for its rows (`attention` emits it beside its other kernels; `attention_spec` holds what they
share).

{name}_split: the same as `attention`'s {name} for a decode step (one row per sequence),
split-KV: grid (rows, kv_heads, splits), program s takes one chunk of the row's keys (chunk:
pos + 1 keys over `splits`, whole SPLIT_N blocks, computed on device) and stores fp32 partials
(m, l, acc) to a scratch buffer; programs past the row's keys exit. Each then takes a ticket
from its (row, kv head) counter; the last one resets it and merges (rescales and sums) the
partials of every head of its group. `splits` is fixed by the cache capacity (`scratch`), not
the length, so a captured launch stays valid as sequences grow.
"""

from __future__ import annotations

import torch

from hyperloom.codegen.emitters.attention_spec import (LOG2E, AttentionSpec, cache_table,
                                                       check_contiguous, check_rope, key_lines,
                                                       padded_dim, paged_args, tiling, upcast)
from hyperloom.codegen.emitters.ints import cdiv, next_power_of_2
from hyperloom.codegen.emitters.loops import runtime_loop
from hyperloom.codegen.emitters.text import pdl
from hyperloom.config import CONFIG
from hyperloom.errors import require

# split-KV decode, swept on the H200 (one row, 32 x 128 heads, 8 kv heads): 64 keys a step,
# 4 warps, 4 stages and at most 16 splits took 8.9 / 15.8 / 41.1 us at 1K / 8K / 32K keys,
# against 12.7 / 21.5 / 52.7 with 32 keys, 8 warps, 3 stages and 32 splits
SPLIT_N, SPLIT_WARPS, SPLIT_STAGES = 64, 4, 4
MAX_SPLITS = 16  # key-range splits of a decode launch (8 kv heads, one row: 128 programs)


CHUNK = '''
@triton.jit
def _chunk(n_keys, splits, BLOCK_N: tl.constexpr):
    """Keys per split at length n_keys: the keys spread over `splits`, whole key blocks."""
    return tl.cdiv(tl.cdiv(tl.maximum(n_keys, 1), splits), BLOCK_N) * BLOCK_N
'''


def source(name: str, spec: AttentionSpec) -> str:
    """Decode attention split over the key range. It also does rope_kv's work for its row: the
    group's q heads are rotated in registers, and the split holding the row's own position
    rotates and writes that key and value before its loop reads them (one launch a layer
    instead of two)."""
    up = upcast()
    loop_head, loop_tail = runtime_loop("start", "lo", "hi", "BLOCK_N", " " * 4)
    table, page = paged_args(spec)
    keys = key_lines(spec, " " * 4, SPLIT_N, ahead=True)
    g = spec.heads // spec.kv_heads
    gp, dp = tiling(spec, 1)[1], padded_dim(spec)
    k_at, v_at = "kc_ptr + cur * kc_s0 + own * kc_s1", "vc_ptr + cur * vc_s0 + own * vc_s1"
    lookup = ""
    if spec.block_size:
        lookup = "        b = tl.load(bt_ptr + cur * bt_s0 + own // PAGE).to(tl.int64)\n"
        k_at = "kc_ptr + b * kc_s0 + (own % PAGE) * kc_s1"
        v_at = "vc_ptr + b * vc_s0 + (own % PAGE) * vc_s1"
    return f'''
@triton.jit
def {name}(q_ptr, k_ptr, v_ptr, inv_ptr, kc_ptr, vc_ptr, pos_ptr, slot_ptr, o_ptr, acc_ptr,
        ml_ptr, cnt_ptr, sq, sk, sv, so, kc_s0, kc_s1, kc_s2, vc_s0, vc_s1, vc_s2, capacity,{table}
        SP: tl.constexpr, H: tl.constexpr = {spec.heads}, HKV: tl.constexpr = {spec.kv_heads},
        G: tl.constexpr = {g}, GP: tl.constexpr = {gp},
        HD: tl.constexpr = {spec.head_dim}, DP: tl.constexpr = {dp},
        HALF: tl.constexpr = {spec.head_dim // 2}, ROPE: tl.constexpr = {spec.rope},
        BLOCK_N: tl.constexpr = {SPLIT_N}, QK_SCALE: tl.constexpr = {spec.scale * LOG2E!r}{page}):
{pdl("    ")}    r = tl.program_id(0).to(tl.int64)
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
    q = q.to(q_ptr.dtype.element_ty).to(kc_ptr.dtype.element_ty){up}
    if (hi == n_keys) & (own < capacity):  # this split holds the row's own key: write it first
{lookup}        kn = _rope_row(k_ptr + r * sk + kvh * HD, dc, dmask, cos, sin, HALF, ROPE)
        tl.store({k_at} + kvh * kc_s2 + dc, kn.to(kc_ptr.dtype.element_ty), mask=dmask)
        vn = tl.load(v_ptr + r * sv + kvh * HD + dc, mask=dmask, other=0.0)
        tl.store({v_at} + kvh * vc_s2 + dc, vn.to(vc_ptr.dtype.element_ty), mask=dmask)
        tl.debug_barrier()  # the stores are visible to the whole program's key loads

    # keys lo..hi-1, all visible to the row (decode: its own position is the last key)
    m_i = tl.full((GP,), -1e30, tl.float32)
    l_i = tl.zeros((GP,), tl.float32)
    acc = tl.zeros((GP, DP), tl.float32)
    n = tl.arange(0, BLOCK_N)
    k_base = kc_ptr + {keys.base[0]}kvh * kc_s2
    v_base = vc_ptr + {keys.base[1]}kvh * vc_s2
{keys.row_table}{loop_head}        kp = start + n
        kmask = (kp < hi)[:, None] & dmask[None, :]
{keys.gather}        k = tl.load(k_base + {keys.rows[0]} + dc[None, :], mask=kmask, other=0.0)
        s = tl.dot(q, tl.trans(k{up})) * QK_SCALE
        s = tl.where((kp < hi)[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_base + {keys.rows[1]} + dc[None, :], mask=kmask, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(vc_ptr.dtype.element_ty){up}, v{up})
        m_i = m_new
{loop_tail}    # partials of (row, head, split sp): acc [r, head, sp, :HD], m, l [r, head, 0|1, sp]
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
'''


MERGE = '''
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
'''


def splits(capacity: int, max_splits: int = MAX_SPLITS) -> int:
    """Key-range splits of a decode launch on a cache of `capacity` positions per slot."""
    return max(1, min(max_splits, cdiv(capacity, SPLIT_N)))


def launch_splits(most: int, rows: int, kv_heads: int) -> int:
    """The split count of a decode launch whose scratch holds `most`: fewer when rows x kv heads
    already fill the GPU (the partials stay packed per launch: the kernel indexes them by its
    own split count)."""
    return min(most, max(1, cdiv(4 * CONFIG.sms, rows * kv_heads)))


def scratch(spec: AttentionSpec, max_rows: int, capacity: int, device,
            max_splits: int = MAX_SPLITS) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """launch_split's buffers for up to max_rows rows: fp32 partials acc [rows, heads, splits,
    d] and (m, l) [rows, heads, 2, splits], and int32 ticket counters [rows, kv_heads], zeroed
    (the kernel leaves them zeroed). The split count is the launch's, so allocate them once per
    cache (outside any captured launch): it never changes as sequences grow."""
    n = splits(capacity, max_splits)
    f32 = dict(dtype=torch.float32, device=device)
    return (torch.empty((max_rows, spec.heads, n, spec.head_dim), **f32),
            torch.empty((max_rows, spec.heads, 2, n), **f32),
            torch.zeros((max_rows, spec.kv_heads), dtype=torch.int32, device=device))


def launch_split(kernel, spec: AttentionSpec, *, q: torch.Tensor, k: torch.Tensor,
                 v: torch.Tensor, inv_freq: torch.Tensor | None, k_cache: torch.Tensor,
                 v_cache: torch.Tensor, pos: torch.Tensor, slot: torch.Tensor, o: torch.Tensor,
                 rows: int, part: tuple[torch.Tensor, ...],
                 block_table: torch.Tensor | None = None) -> None:
    """Decode (one row per sequence, at most one row a slot): RoPE of q and k, the KV write
    and attention split over the key range, in one launch. kernel = the split kernel of
    attention.kernel_names, loaded; q, k, v as rope_kv takes them; part = scratch(spec, >= rows,
    capacity)."""
    table, capacity = cache_table(spec, block_table, k_cache, v_cache)
    if rows == 0:
        return
    check_contiguous(q=q, k=k, v=v, k_cache=k_cache, v_cache=v_cache, o=o)
    check_rope(spec, inv_freq)
    acc, ml, count = part
    n = acc.shape[2]
    require(acc.shape == (acc.shape[0], spec.heads, n, spec.head_dim) and acc.shape[0] >= rows
            and ml.shape == (acc.shape[0], spec.heads, 2, n)
            and tuple(count.shape) == (acc.shape[0], spec.kv_heads),
            lambda: f"attention scratch for {rows} rows: scratch(spec, >= {rows}, ...) "
                    "allocates it")
    n = launch_splits(n, rows, spec.kv_heads)
    inv = inv_freq if spec.rope else pos  # never read without RoPE
    kernel[(rows, spec.kv_heads, n)](q, k, v, inv, k_cache, v_cache, pos, slot, o, acc, ml,
                                     count, q.stride(0), k.stride(0), v.stride(0), o.stride(0),
                                     *k_cache.stride()[:3], *v_cache.stride()[:3], capacity,
                                     *table,
                                     SP=next_power_of_2(n), num_warps=SPLIT_WARPS,
                                     num_stages=SPLIT_STAGES)
