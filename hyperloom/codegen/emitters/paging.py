"""Token caches behind block tables (`runtime.paged`), for the emitters that gather single rows
(`dsa`, `mla`): position p of slot s lives at [table[s, p // PAGE], p % PAGE] of a block pool
[num_blocks, PAGE, ...]; block_size 0 is one contiguous [slots, S, ...] cache per slot."""

from __future__ import annotations

import torch


def params(block_size: int) -> tuple[str, str]:
    """(table parameters, PAGE constexpr) of a kernel signature; empty when contiguous."""
    if not block_size:
        return "", ""
    return " bt_ptr, bt_s0,", f", PAGE: tl.constexpr = {block_size}"


def row(block_size: int, cache: str, s: str, p: str, mask: str = "") -> str:
    """Source of the element offset of row (s, p) of `cache` (strides {cache}_s0, _s1); a paged
    lookup reads the table only where `mask` holds (int64 block offsets)."""
    if not block_size:
        return f"{s} * {cache}_s0 + {p} * {cache}_s1"
    m = f", mask={mask}, other=0" if mask else ""
    return (f"tl.load(bt_ptr + {s} * bt_s0 + {p} // PAGE{m}).to(tl.int64) * {cache}_s0 "
            f"+ ({p} % PAGE) * {cache}_s1")


def table_args(block_size: int, table: torch.Tensor | None,
               cache: torch.Tensor) -> tuple[tuple, int]:
    """(kernel arguments for the table, positions one slot can hold)."""
    if not block_size:
        if table is not None:
            raise ValueError("block_table given for a contiguous cache (block_size 0)")
        return (), cache.shape[1]
    if table is None:
        raise ValueError(f"a paged cache (block_size {block_size}) needs a block_table")
    if table.dtype != torch.int32 or table.dim() != 2 or not table.is_contiguous() \
            or table.device != cache.device:
        raise ValueError("block_table: contiguous int32 [slots, max_blocks] on the cache's "
                         f"device, got {table.dtype} {tuple(table.shape)} on {table.device}")
    if cache.shape[1] != block_size:
        raise ValueError(f"a pool of blocks of {block_size} tokens: [num_blocks, {block_size}, "
                         f"...], got {tuple(cache.shape)}")
    return (table, table.stride(0)), table.shape[1] * block_size
