"""The paged KV cache: token-indexed state of kernel-run ops lives in pools of fixed-size blocks;
each sequence slot has a block table (device-side, updated in place, so captured graphs never go
stale) and the free list hands blocks out as sequences grow. Other state (fixed-size, or owned
by ops still on the interpreter) stays one contiguous block per slot."""

from __future__ import annotations

import torch

from hyperloom.errors import CapacityError
from hyperloom.ir.state import StateStore
from hyperloom.ir.types import StateDecl


class PagedStateStore(StateStore):
    def __init__(self, decls: tuple[StateDecl, ...], paged: set[str], slots: int, capacity: int,
                 block_size: int, num_blocks: int, device: torch.device):
        super().__init__(tuple(d for d in decls if d.name not in paged), slots, capacity, device)
        self.block_size, self.slots = block_size, slots
        max_blocks = -(-capacity // block_size)
        self.table = torch.zeros((slots, max_blocks), dtype=torch.int32, device=device)
        self.blocks: list[list[int]] = [[] for _ in range(slots)]
        self.free = list(range(num_blocks))
        for d in decls:
            if d.name in paged:
                rest = tuple(int(s) for s in d.type.shape[1:])
                self.decls[d.name] = d
                self.tensors[d.name] = torch.zeros((num_blocks, block_size, *rest),
                                                   dtype=d.type.dtype.torch, device=device)
        self.paged = paged

    def missing(self, slot: int, length: int) -> int:
        """Blocks `slot` still needs to hold `length` tokens."""
        return max(0, -(-length // self.block_size) - len(self.blocks[slot]))

    def reserve(self, wants: list[tuple[int, int]]) -> None:
        """Back positions < length of each (slot, length), all or nothing."""
        need = sum(self.missing(s, n) for s, n in wants)
        if need > len(self.free):
            raise CapacityError(f"KV cache out of blocks: this step needs {need} more blocks of "
                                f"{self.block_size} tokens, {len(self.free)} are free "
                                f"(kv_blocks); no sequence was changed")
        for slot, length in wants:
            for _ in range(self.missing(slot, length)):
                j = len(self.blocks[slot])
                block = self.free.pop()
                self.blocks[slot].append(block)
                self.table[slot, j] = block

    def release(self, slot: int) -> None:
        self.free.extend(reversed(self.blocks[slot]))
        self.blocks[slot] = []
        self.table[slot].zero_()

    def reset(self, slot: int) -> None:
        for name, t in self.tensors.items():
            if name not in self.paged:
                t[slot].zero_()
