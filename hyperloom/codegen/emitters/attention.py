"""Cached causal GQA attention with RoPE: four kernels in one module (`kernel_names`).

{name}_rope_kv: q, k, v [rows, heads*d] (act dtype), pos, slot int64 [rows], inv_freq fp32 [d/2]
-> q_out = rotate-half RoPE(q) (angle pos * inv_freq in fp32, as semantics.dense.rope), and
RoPE(k), v written into k_cache, v_cache [slots, S, kv_heads, d] at [slot, pos]. A row with
slot < 0 is padding and writes nothing to the caches. Without RoPE q is copied, k written as is.
Grid: (rows,), every head of one row per program.

{name}: q_out, caches, pos, slot -> o [rows, heads*d]: row r attends to positions 0..pos[r] of
sequence slot[r] (fp32 online softmax, exp2), head h reads kv head h // (heads // kv_heads);
padding rows write zeros. Grid: (cdiv(rows, BLOCK_M), kv_heads); a program stacks the query
heads of one kv head for BLOCK_M rows into one [BLOCK_M * GP, d] tile, so K/V are read once per
kv head. Decode uses BLOCK_M = 1; a prefill chunk (`seq_rows` > 1) packs rows too. Rows of a
block may belong to several sequences: the program walks them one sequence (slot) at a time, so
any tiling is correct and the host hint only picks speed. Keys below the smallest position of
the sequence's rows skip the causal mask (a second loop masks the rest).

{name}_split: the same for a decode step (one row per sequence), split-KV: grid (rows,
kv_heads, splits), program s takes one chunk of the row's keys (chunk: pos + 1 keys over
`splits`, whole SPLIT_N blocks, computed on device) and stores fp32 partials (m, l, acc) to a
scratch buffer; programs past the row's keys exit. Each then takes a ticket from its (row, kv
head) counter; the last one resets it and merges (rescales and sums) the partials of every head
of its group. `splits` is fixed by the cache capacity (`scratch`), not the length, so a captured
launch stays valid as sequences grow.

Paged layout (spec.block_size = B > 0): k_cache, v_cache are block pools [num_blocks, B, kv_heads,
d] and block_table int32 [slots, max_blocks] maps block j of a slot's sequence to a pool block:
position p of slot s lives at [block_table[s, p // B], p % B]. The kernels that touch the caches
take the table; their key loops gather each key's block through it. block_size 0 emits the
contiguous source unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hyperloom.codegen.emitters.ints import cdiv, next_power_of_2
from hyperloom.codegen.emitters.loops import runtime_loop
from hyperloom.codegen.emitters.text import comment, pdl
from hyperloom.config import CONFIG
from hyperloom.errors import require

BLOCK_N = 64  # keys per iteration
# split-KV decode, swept on the H200 (one row, 32 x 128 heads, 8 kv heads): 64 keys a step,
# 4 warps, 4 stages and at most 16 splits took 8.9 / 15.8 / 41.1 us at 1K / 8K / 32K keys,
# against 12.7 / 21.5 / 52.7 with 32 keys, 8 warps, 3 stages and 32 splits
SPLIT_N, SPLIT_WARPS, SPLIT_STAGES = 64, 4, 4
MAX_SPLITS = 16  # key-range splits of a decode launch (8 kv heads, one row: 128 programs)
PREFILL_M = 64  # stacked (row, head) query rows per program for a prefill chunk
# 2048-token prefill (32 x 128 heads, 8 kv heads) on the H200: 136 us at 64 rows, 4 warps, 2 stages
# (141.6 at 3 stages, 136.2 at 128 rows and 8 warps); the unmasked loop below the diagonal took it
# from ~160; torch's SDPA: 85.8
PREFILL_STAGES = 2
LOG2E = 1.4426950408889634


@dataclass(frozen=True)
class AttentionSpec:
    heads: int
    kv_heads: int
    head_dim: int
    scale: float
    rope: bool = True
    block_size: int = 0  # tokens per KV-cache block of a paged cache; 0: contiguous per slot

    def __post_init__(self) -> None:
        assert self.heads % self.kv_heads == 0, "heads must be a multiple of kv_heads"
        assert self.head_dim % 2 == 0, "rotate-half RoPE splits head_dim in two halves"
        b = self.block_size
        assert b == 0 or (b >= 16 and b & (b - 1) == 0), "block_size: 0 or a power of two >= 16"


def kernel_names(name: str) -> tuple[str, str, str]:
    """(rope + KV write, attention, split-KV decode attention) defined by source(name, ...)."""
    return f"{name}_rope_kv", name, f"{name}_split"


def _paged_args(spec: AttentionSpec) -> tuple[str, str]:
    """(table arguments after the strides, PAGE constexpr); both empty for a contiguous cache,
    whose source must stay byte for byte what it was (golden snapshots)."""
    if not spec.block_size:
        return "", ""
    return " bt_ptr, bt_s0,", f",\n        PAGE: tl.constexpr = {spec.block_size}"


_ROPE = '''
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
'''


def _dp(spec: AttentionSpec) -> int:
    """head_dim padded to a power of two >= 16 (tl.dot's smallest K)."""
    return max(16, next_power_of_2(spec.head_dim))


def _rope_kv_source(name: str, spec: AttentionSpec) -> str:
    table, page = _paged_args(spec)
    k_dst, v_dst = "kc_ptr + s * kc_s0 + p * kc_s1", "vc_ptr + s * vc_s0 + p * vc_s1"
    lookup = ""
    if spec.block_size:
        # capacity = max_blocks * PAGE keeps p // PAGE inside the table row; int64 block offsets
        # (a pool may pass 2^31 elements); the masked load never reads the table for padding
        lookup = ("    b = tl.load(bt_ptr + s * bt_s0 + p // PAGE, mask=keep, other=0)"
                  ".to(tl.int64)\n")
        k_dst = "kc_ptr + b * kc_s0 + (p % PAGE) * kc_s1"
        v_dst = "vc_ptr + b * vc_s0 + (p % PAGE) * vc_s1"
    return f'''
@triton.jit
def {name}(q_ptr, k_ptr, v_ptr, pos_ptr, slot_ptr, inv_ptr, qo_ptr, kc_ptr, vc_ptr,
        sq, sk, sv, sqo, kc_s0, kc_s1, kc_s2, vc_s0, vc_s1, vc_s2, capacity,{table}
        H: tl.constexpr = {spec.heads}, HKV: tl.constexpr = {spec.kv_heads},
        HD: tl.constexpr = {spec.head_dim}, HALF: tl.constexpr = {spec.head_dim // 2},
        HP: tl.constexpr = {next_power_of_2(spec.heads)},
        HKVP: tl.constexpr = {next_power_of_2(spec.kv_heads)},
        DP: tl.constexpr = {_dp(spec)}, ROPE: tl.constexpr = {spec.rope}{page}):
{pdl("    ")}    row = tl.program_id(0).to(tl.int64)
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
{lookup}    hk = tl.arange(0, HKVP)[:, None]
    kmask = (hk < HKV) & dmask[None, :] & keep
    kn = _rope_row(k_ptr + row * sk + hk * HD, dc[None, :], kmask, cos, sin, HALF, ROPE)
    tl.store({k_dst} + hk * kc_s2 + dc[None, :], kn.to(kc_ptr.dtype.element_ty), mask=kmask)
    vn = tl.load(v_ptr + row * sv + hk * HD + dc[None, :], mask=kmask, other=0.0)
    tl.store({v_dst} + hk * vc_s2 + dc[None, :], vn.to(vc_ptr.dtype.element_ty), mask=kmask)
'''


def _upcast() -> str:
    """The interpreter mis-computes low-precision dots: upcast every operand there."""
    return ".to(tl.float32)" if CONFIG.interpret else ""


@dataclass(frozen=True)
class _Keys:
    """Source that addresses keys kp of sequence `cur` in a key loop (see _keys)."""
    base: tuple[str, str]  # slot offsets of k_base, v_base
    row_table: str  # line before the loop
    gather: str  # lines at the top of the loop body
    rows: tuple[str, str]  # k, v row offsets of keys kp [BLOCK_N, 1]


def _keys(spec: AttentionSpec, ind: str, block_n: int, ahead: bool = False) -> _Keys:
    """The pieces for a key loop of block_n keys a step whose head is indented by `ind`;
    `ahead` (a loop over lo..hi, lo < hi): a page's table entry is read one step early."""
    if not spec.block_size:
        return _Keys(("cur * kc_s0 + ", "cur * vc_s0 + "), "", "",
                     ("kp[:, None] * kc_s1", "kp[:, None] * vc_s1"))
    table = f"{ind}bt_row = bt_ptr + cur * bt_s0\n"
    if spec.block_size >= block_n:
        # a key block starts at a multiple of BLOCK_N, so it lies in one page: one table read
        # per block and contiguous rows, which load as vectors and pipeline like a contiguous
        # cache's (a table read per key row cost 40 us a layer at 32K keys on the H200)
        if ahead:  # the next block's entry loads while this block's keys do
            table += f"{ind}blk_next = tl.load(bt_row + lo // PAGE)\n"
            gather = (f"{ind}    blk = blk_next.to(tl.int64)\n"
                      f"{ind}    blk_next = tl.load(bt_row + tl.minimum(start + BLOCK_N, hi - 1)"
                      " // PAGE)\n")
        else:
            gather = f"{ind}    blk = tl.load(bt_row + start // PAGE).to(tl.int64)\n"
        gather += (f"{ind}    kr = blk * kc_s0 + (start % PAGE + n) * kc_s1\n"
                   f"{ind}    vr = blk * vc_s0 + (start % PAGE + n) * vc_s1\n")
    else:
        # key kp -> row kp % PAGE of pool block blk (int64 offsets); keys past hi stay masked,
        # so the table is read only for blocks 0..pos // PAGE, which the host allocated
        gather = (f"{ind}    blk = tl.load(bt_row + kp // PAGE, mask=kp < hi, other=0)"
                  ".to(tl.int64)\n"
                  f"{ind}    kr = blk * kc_s0 + (kp % PAGE) * kc_s1\n"
                  f"{ind}    vr = blk * vc_s0 + (kp % PAGE) * vc_s1\n")
    return _Keys(("", ""), table, gather, ("kr[:, None]", "vr[:, None]"))


def _key_loop(keys: _Keys, lo: str, hi: str, causal: bool) -> str:
    """The online-softmax loop over keys lo..hi of sequence `cur`; `causal` masks each row's
    keys past its position (else only the rows of other sequences)."""
    up = _upcast()
    head, tail = runtime_loop("start", lo, hi, "BLOCK_N", " " * 8)
    k_rows, v_rows = keys.rows
    mask = "sel[:, None] & (kp[None, :] <= pos[:, None])" if causal else "sel[:, None]"
    return f'''{head}            kp = start + n
            kmask = (kp < hi)[:, None] & dmask[None, :]
{keys.gather}            k = tl.load(k_base + {k_rows} + dc[None, :], mask=kmask, other=0.0)
            s = tl.dot(q, tl.trans(k{up})) * QK_SCALE
            s = tl.where({mask}, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            v = tl.load(v_base + {v_rows} + dc[None, :], mask=kmask, other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(vc_ptr.dtype.element_ty){up}, v{up})
            m_i = m_new
{tail}'''


def _attend_source(name: str, spec: AttentionSpec) -> str:
    up = _upcast()
    table, page = _paged_args(spec)
    keys = _keys(spec, " " * 8, BLOCK_N)
    base, row_table = keys.base, keys.row_table
    below, band = _key_loop(keys, "0", "full", False), _key_loop(keys, "full", "hi", True)
    return f'''
@triton.jit
def {name}(q_ptr, kc_ptr, vc_ptr, pos_ptr, slot_ptr, o_ptr, rows, sq, so,
        kc_s0, kc_s1, kc_s2, vc_s0, vc_s1, vc_s2,{table}
        BLOCK_M: tl.constexpr, GP: tl.constexpr,
        G: tl.constexpr = {spec.heads // spec.kv_heads}, HD: tl.constexpr = {spec.head_dim},
        DP: tl.constexpr = {_dp(spec)},
        BLOCK_N: tl.constexpr = {BLOCK_N}, QK_SCALE: tl.constexpr = {spec.scale * LOG2E!r}{page}):
    BM: tl.constexpr = BLOCK_M * GP
{pdl("    ")}    kvh = tl.program_id(1)
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
    q = q.to(kc_ptr.dtype.element_ty){up}

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
        k_base = kc_ptr + {base[0]}kvh * kc_s2
        v_base = vc_ptr + {base[1]}kvh * vc_s2
        # keys below `full` are visible to every selected row: no causal mask there
        full = (tl.min(tl.where(sel, pos, 2147483647), axis=0) + 1) // BLOCK_N * BLOCK_N
{row_table}{below}{band}        todo = todo & ~sel
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    tl.store(o_ptr + r64[:, None] * so + head[:, None] * HD + dc[None, :],
             out.to(o_ptr.dtype.element_ty), mask=(in_rows & (g < G))[:, None] & dmask[None, :])
'''


_CHUNK = '''
@triton.jit
def _chunk(n_keys, splits, BLOCK_N: tl.constexpr):
    """Keys per split at length n_keys: the keys spread over `splits`, whole key blocks."""
    return tl.cdiv(tl.cdiv(tl.maximum(n_keys, 1), splits), BLOCK_N) * BLOCK_N
'''


def _split_source(name: str, spec: AttentionSpec) -> str:
    """Decode attention split over the key range. It also does rope_kv's work for its row: the
    group's q heads are rotated in registers, and the split holding the row's own position
    rotates and writes that key and value before its loop reads them (one launch a layer
    instead of two)."""
    up = _upcast()
    loop_head, loop_tail = runtime_loop("start", "lo", "hi", "BLOCK_N", " " * 4)
    table, page = _paged_args(spec)
    keys = _keys(spec, " " * 4, SPLIT_N, ahead=True)
    g = spec.heads // spec.kv_heads
    gp, dp = tiling(spec, 1)[1], _dp(spec)
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


_MERGE = '''
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


def source(name: str, spec: AttentionSpec, header: str = "") -> str:
    rope_kv, attend, split = kernel_names(name)
    return (f"{comment(header)}import triton\nimport triton.language as tl\n\n{_ROPE}\n"
            f"{_rope_kv_source(rope_kv, spec)}\n{_attend_source(attend, spec)}\n{_CHUNK}\n"
            f"{_MERGE}\n{_split_source(split, spec)}")


def _check(**tensors: torch.Tensor) -> None:
    for name, t in tensors.items():
        require(t.stride(-1) == 1, lambda: f"attention {name}: a contiguous last dim, got "
                                           f"{tuple(t.shape)} with strides {t.stride()}")


def _check_rope(spec: AttentionSpec, inv_freq: torch.Tensor | None) -> None:
    require(not spec.rope or (inv_freq is not None and inv_freq.dtype == torch.float32),
            lambda: "attention with RoPE: inv_freq float32 [head_dim / 2], got "
                    f"{None if inv_freq is None else inv_freq.dtype}")


def _table(spec: AttentionSpec, block_table: torch.Tensor | None, k_cache: torch.Tensor,
           v_cache: torch.Tensor) -> tuple[tuple, int]:
    """(block-table kernel args, positions one slot can hold); no args for a contiguous cache."""
    if not spec.block_size:
        if block_table is not None:
            raise ValueError("block_table given for a contiguous cache (spec.block_size == 0)")
        return (), k_cache.shape[1]
    if block_table is None:
        raise ValueError(f"a paged cache (block_size {spec.block_size}) needs a block_table")
    if (block_table.dtype != torch.int32 or block_table.dim() != 2
            or not block_table.is_contiguous() or block_table.device != k_cache.device):
        raise ValueError("block_table: contiguous int32 [slots, max_blocks] on the caches' "
                         f"device, got {block_table.dtype} {tuple(block_table.shape)} on "
                         f"{block_table.device}")
    if k_cache.shape[1] != spec.block_size or v_cache.shape[1] != spec.block_size:
        raise ValueError(f"pools must be [num_blocks, {spec.block_size}, kv_heads, head_dim], "
                         f"got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    return (block_table, block_table.stride(0)), block_table.shape[1] * spec.block_size


def launch_rope_kv(kernel, spec: AttentionSpec, *, q: torch.Tensor, k: torch.Tensor,
                   v: torch.Tensor, pos: torch.Tensor, slot: torch.Tensor,
                   inv_freq: torch.Tensor | None, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   q_out: torch.Tensor, rows: int, block_table: torch.Tensor | None = None) -> None:
    """block_table: int32 [slots, max_blocks] when spec.block_size > 0, else None."""
    table, capacity = _table(spec, block_table, k_cache, v_cache)
    if rows == 0:
        return
    _check(q=q, k=k, v=v, k_cache=k_cache, v_cache=v_cache, q_out=q_out)
    _check_rope(spec, inv_freq)
    inv = inv_freq if spec.rope else pos  # never read without RoPE
    kernel[(rows,)](q, k, v, pos, slot, inv, q_out, k_cache, v_cache,
                    q.stride(0), k.stride(0), v.stride(0), q_out.stride(0),
                    *k_cache.stride()[:3], *v_cache.stride()[:3], capacity, *table, num_warps=4)


def tiling(spec: AttentionSpec, seq_rows: int) -> tuple[int, int]:
    """(BLOCK_M rows, GP padded group heads) per program; BLOCK_M * GP >= 16 for tl.dot."""
    gp = next_power_of_2(spec.heads // spec.kv_heads)
    if seq_rows <= 1:
        return 1, max(16, gp)
    block_m = max(1, min(PREFILL_M // gp, next_power_of_2(seq_rows)))
    return block_m, max(gp, cdiv(16, block_m))


def launch_attend(kernel, spec: AttentionSpec, *, q: torch.Tensor, k_cache: torch.Tensor,
                  v_cache: torch.Tensor, pos: torch.Tensor, slot: torch.Tensor, o: torch.Tensor,
                  rows: int, seq_rows: int = 1, block_table: torch.Tensor | None = None) -> None:
    """seq_rows: the most rows one sequence has in this step; it only picks the tiling.
    block_table: int32 [slots, max_blocks] when spec.block_size > 0, else None."""
    table, _ = _table(spec, block_table, k_cache, v_cache)
    if rows == 0:
        return
    _check(q=q, k_cache=k_cache, v_cache=v_cache, o=o)
    block_m, gp = tiling(spec, seq_rows)
    kernel[(cdiv(rows, block_m), spec.kv_heads)](
        q, k_cache, v_cache, pos, slot, o, rows, q.stride(0), o.stride(0),
        *k_cache.stride()[:3], *v_cache.stride()[:3], *table, BLOCK_M=block_m, GP=gp,
        num_warps=4, num_stages=PREFILL_STAGES if seq_rows > 1 else 3)


def splits(capacity: int, max_splits: int = MAX_SPLITS) -> int:
    """Key-range splits of a decode launch on a cache of `capacity` positions per slot."""
    return max(1, min(max_splits, cdiv(capacity, SPLIT_N)))


def launch_splits(most: int, rows: int, kv_heads: int) -> int:
    """The split count of a decode launch whose scratch holds `most`: fewer when rows x kv heads
    already fill the GPU (the partials stay packed per launch: the kernel indexes them by its
    own split count)."""
    return min(most, max(1, cdiv(4 * CONFIG.sms, rows * kv_heads)))


def capacity(spec: AttentionSpec, k_cache: torch.Tensor, v_cache: torch.Tensor,
             block_table: torch.Tensor | None = None) -> int:
    """Positions one slot can hold (block_table: as for launch)."""
    return _table(spec, block_table, k_cache, v_cache)[1]


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
    kernel_names, loaded; q, k, v as rope_kv takes them; part = scratch(spec, >= rows,
    capacity)."""
    table, capacity = _table(spec, block_table, k_cache, v_cache)
    if rows == 0:
        return
    _check(q=q, k=k, v=v, k_cache=k_cache, v_cache=v_cache, o=o)
    _check_rope(spec, inv_freq)
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


def launch(kernels, spec: AttentionSpec, *, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           pos: torch.Tensor, slot: torch.Tensor, inv_freq: torch.Tensor | None,
           k_cache: torch.Tensor, v_cache: torch.Tensor, q_out: torch.Tensor, o: torch.Tensor,
           rows: int, seq_rows: int = 1, block_table: torch.Tensor | None = None,
           part: tuple[torch.Tensor, ...] | None = None) -> None:
    """RoPE + KV write, then attention; kernels = the three of kernel_names(name), loaded.
    block_table: int32 [slots, max_blocks] when spec.block_size > 0 (caches are block pools),
    else None. A decode step (seq_rows <= 1) whose rows fit `part` (scratch) runs the split-KV
    kernel alone, RoPE and KV write included (q_out is not written); any other step runs
    rope_kv into q_out and the caches, then the one-pass kernel."""
    rope_kv, attend, split = kernels
    if seq_rows <= 1 and part is not None and rows <= part[0].shape[0]:
        launch_split(split, spec, q=q, k=k, v=v, inv_freq=inv_freq, k_cache=k_cache,
                     v_cache=v_cache, pos=pos, slot=slot, o=o, rows=rows, part=part,
                     block_table=block_table)
        return
    launch_rope_kv(rope_kv, spec, q=q, k=k, v=v, pos=pos, slot=slot, inv_freq=inv_freq,
                   k_cache=k_cache, v_cache=v_cache, q_out=q_out, rows=rows,
                   block_table=block_table)
    launch_attend(attend, spec, q=q_out, k_cache=k_cache, v_cache=v_cache, pos=pos, slot=slot,
                  o=o, rows=rows, seq_rows=seq_rows, block_table=block_table)
