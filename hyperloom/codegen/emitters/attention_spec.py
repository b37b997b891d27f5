"""The attention kernels' contract (`AttentionSpec`) and what their emitters share: the
paged cache's arguments and key addressing, the RoPE helpers' source, the query tiling and the
host-side checks. `attention` emits the one-pass and RoPE kernels, `attention_split` the
split-KV decode kernel."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hyperloom.codegen.emitters.ints import cdiv, next_power_of_2
from hyperloom.config import CONFIG
from hyperloom.errors import require

PREFILL_M = 64  # stacked (row, head) query rows per program for a prefill chunk
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


def paged_args(spec: AttentionSpec) -> tuple[str, str]:
    """(table arguments after the strides, PAGE constexpr); both empty for a contiguous cache,
    whose source must stay byte for byte what it was (golden snapshots)."""
    if not spec.block_size:
        return "", ""
    return " bt_ptr, bt_s0,", f",\n        PAGE: tl.constexpr = {spec.block_size}"


ROPE = '''
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


def padded_dim(spec: AttentionSpec) -> int:
    """head_dim padded to a power of two >= 16 (tl.dot's smallest K)."""
    return max(16, next_power_of_2(spec.head_dim))


def upcast() -> str:
    """The interpreter mis-computes low-precision dots: upcast every operand there."""
    return ".to(tl.float32)" if CONFIG.interpret else ""


@dataclass(frozen=True)
class KeyLines:
    """Source that addresses keys kp of sequence `cur` in a key loop (see key_lines)."""
    base: tuple[str, str]  # slot offsets of k_base, v_base
    row_table: str  # line before the loop
    gather: str  # lines at the top of the loop body
    rows: tuple[str, str]  # k, v row offsets of keys kp [BLOCK_N, 1]


def key_lines(spec: AttentionSpec, ind: str, block_n: int, ahead: bool = False) -> KeyLines:
    """The pieces for a key loop of block_n keys a step whose head is indented by `ind`;
    `ahead` (a loop over lo..hi, lo < hi): a page's table entry is read one step early."""
    if not spec.block_size:
        return KeyLines(("cur * kc_s0 + ", "cur * vc_s0 + "), "", "",
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
    return KeyLines(("", ""), table, gather, ("kr[:, None]", "vr[:, None]"))


def tiling(spec: AttentionSpec, seq_rows: int) -> tuple[int, int]:
    """(BLOCK_M rows, GP padded group heads) per program; BLOCK_M * GP >= 16 for tl.dot."""
    gp = next_power_of_2(spec.heads // spec.kv_heads)
    if seq_rows <= 1:
        return 1, max(16, gp)
    block_m = max(1, min(PREFILL_M // gp, next_power_of_2(seq_rows)))
    return block_m, max(gp, cdiv(16, block_m))


def check_contiguous(**tensors: torch.Tensor) -> None:
    for name, t in tensors.items():
        require(t.stride(-1) == 1, lambda: f"attention {name}: a contiguous last dim, got "
                                           f"{tuple(t.shape)} with strides {t.stride()}")


def check_rope(spec: AttentionSpec, inv_freq: torch.Tensor | None) -> None:
    require(not spec.rope or (inv_freq is not None and inv_freq.dtype == torch.float32),
            lambda: "attention with RoPE: inv_freq float32 [head_dim / 2], got "
                    f"{None if inv_freq is None else inv_freq.dtype}")


def cache_table(spec: AttentionSpec, block_table: torch.Tensor | None, k_cache: torch.Tensor,
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


def capacity(spec: AttentionSpec, k_cache: torch.Tensor, v_cache: torch.Tensor,
             block_table: torch.Tensor | None = None) -> int:
    """Positions one slot can hold (block_table: as for launch)."""
    return cache_table(spec, block_table, k_cache, v_cache)[1]
