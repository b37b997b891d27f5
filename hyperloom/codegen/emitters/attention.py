"""Cached causal GQA attention with RoPE: three kernels in one module (`kernel_names`), the
third emitted by `attention_split`.

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

{name}_split: decode's split-KV form of {name}, RoPE and the KV write included (`attention_split`).

Paged layout (spec.block_size = B > 0): k_cache, v_cache are block pools [num_blocks, B, kv_heads,
d] and block_table int32 [slots, max_blocks] maps block j of a slot's sequence to a pool block:
position p of slot s lives at [block_table[s, p // B], p % B]. The kernels that touch the caches
take the table; their key loops gather each key's block through it. block_size 0 emits the
contiguous source unchanged.
"""

from __future__ import annotations

import torch

from hyperloom.codegen.emitters import attention_split
from hyperloom.codegen.emitters.attention_spec import (LOG2E, ROPE, AttentionSpec, KeyLines,
                                                       cache_table, check_contiguous,
                                                       check_rope, key_lines, padded_dim,
                                                       paged_args, tiling, upcast)
from hyperloom.codegen.emitters.ints import cdiv, next_power_of_2
from hyperloom.codegen.emitters.loops import runtime_loop
from hyperloom.codegen.emitters.text import comment, pdl

BLOCK_N = 64  # keys per iteration
# 2048-token prefill (32 x 128 heads, 8 kv heads) on the H200: 136 us at 64 rows, 4 warps, 2 stages
# (141.6 at 3 stages, 136.2 at 128 rows and 8 warps); the unmasked loop below the diagonal took it
# from ~160; torch's SDPA: 85.8
PREFILL_STAGES = 2


def kernel_names(name: str) -> tuple[str, str, str]:
    """(rope + KV write, attention, split-KV decode attention) defined by source(name, ...)."""
    return f"{name}_rope_kv", name, f"{name}_split"


def _rope_kv_source(name: str, spec: AttentionSpec) -> str:
    table, page = paged_args(spec)
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
        DP: tl.constexpr = {padded_dim(spec)}, ROPE: tl.constexpr = {spec.rope}{page}):
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


def _key_loop(keys: KeyLines, lo: str, hi: str, causal: bool) -> str:
    """The online-softmax loop over keys lo..hi of sequence `cur`; `causal` masks each row's
    keys past its position (else only the rows of other sequences)."""
    up = upcast()
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
    up = upcast()
    table, page = paged_args(spec)
    keys = key_lines(spec, " " * 8, BLOCK_N)
    base, row_table = keys.base, keys.row_table
    below, band = _key_loop(keys, "0", "full", False), _key_loop(keys, "full", "hi", True)
    return f'''
@triton.jit
def {name}(q_ptr, kc_ptr, vc_ptr, pos_ptr, slot_ptr, o_ptr, rows, sq, so,
        kc_s0, kc_s1, kc_s2, vc_s0, vc_s1, vc_s2,{table}
        BLOCK_M: tl.constexpr, GP: tl.constexpr,
        G: tl.constexpr = {spec.heads // spec.kv_heads}, HD: tl.constexpr = {spec.head_dim},
        DP: tl.constexpr = {padded_dim(spec)},
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


def source(name: str, spec: AttentionSpec, header: str = "") -> str:
    rope_kv, attend, split = kernel_names(name)
    return (f"{comment(header)}import triton\nimport triton.language as tl\n\n{ROPE}\n"
            f"{_rope_kv_source(rope_kv, spec)}\n{_attend_source(attend, spec)}\n"
            f"{attention_split.CHUNK}\n{attention_split.MERGE}\n"
            f"{attention_split.source(split, spec)}")


def launch_rope_kv(kernel, spec: AttentionSpec, *, q: torch.Tensor, k: torch.Tensor,
                   v: torch.Tensor, pos: torch.Tensor, slot: torch.Tensor,
                   inv_freq: torch.Tensor | None, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   q_out: torch.Tensor, rows: int, block_table: torch.Tensor | None = None) -> None:
    """block_table: int32 [slots, max_blocks] when spec.block_size > 0, else None."""
    table, capacity = cache_table(spec, block_table, k_cache, v_cache)
    if rows == 0:
        return
    check_contiguous(q=q, k=k, v=v, k_cache=k_cache, v_cache=v_cache, q_out=q_out)
    check_rope(spec, inv_freq)
    inv = inv_freq if spec.rope else pos  # never read without RoPE
    kernel[(rows,)](q, k, v, pos, slot, inv, q_out, k_cache, v_cache,
                    q.stride(0), k.stride(0), v.stride(0), q_out.stride(0),
                    *k_cache.stride()[:3], *v_cache.stride()[:3], capacity, *table, num_warps=4)


def launch_attend(kernel, spec: AttentionSpec, *, q: torch.Tensor, k_cache: torch.Tensor,
                  v_cache: torch.Tensor, pos: torch.Tensor, slot: torch.Tensor, o: torch.Tensor,
                  rows: int, seq_rows: int = 1, block_table: torch.Tensor | None = None) -> None:
    """seq_rows: the most rows one sequence has in this step; it only picks the tiling.
    block_table: int32 [slots, max_blocks] when spec.block_size > 0, else None."""
    table, _ = cache_table(spec, block_table, k_cache, v_cache)
    if rows == 0:
        return
    check_contiguous(q=q, k_cache=k_cache, v_cache=v_cache, o=o)
    block_m, gp = tiling(spec, seq_rows)
    kernel[(cdiv(rows, block_m), spec.kv_heads)](
        q, k_cache, v_cache, pos, slot, o, rows, q.stride(0), o.stride(0),
        *k_cache.stride()[:3], *v_cache.stride()[:3], *table, BLOCK_M=block_m, GP=gp,
        num_warps=4, num_stages=PREFILL_STAGES if seq_rows > 1 else 3)


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
        attention_split.launch_split(split, spec, q=q, k=k, v=v, inv_freq=inv_freq, k_cache=k_cache,
                     v_cache=v_cache, pos=pos, slot=slot, o=o, rows=rows, part=part,
                     block_table=block_table)
        return
    launch_rope_kv(rope_kv, spec, q=q, k=k, v=v, pos=pos, slot=slot, inv_freq=inv_freq,
                   k_cache=k_cache, v_cache=v_cache, q_out=q_out, rows=rows,
                   block_table=block_table)
    launch_attend(attend, spec, q=q_out, k_cache=k_cache, v_cache=v_cache, pos=pos, slot=slot,
                  o=o, rows=rows, seq_rows=seq_rows, block_table=block_table)
