"""Per-sequence state of a graph, pooled by sequence slot, and the row segments of a step.

TOKEN state is [slots, capacity, ...] indexed by position; FIXED state is [slots, ...]. A step's
rows are grouped into segments: consecutive rows of one sequence at consecutive positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hyperloom.errors import InputError
from hyperloom.ir.types import S, StateDecl, StateKind


@dataclass(frozen=True, slots=True)
class Segment:
    slot: int
    start: int  # first row in the step
    stop: int
    pos: int  # position of the first row in its sequence

    @property
    def end_pos(self) -> int:
        return self.pos + self.stop - self.start


def segments(slot: torch.Tensor, pos: torch.Tensor) -> tuple[Segment, ...]:
    """Split rows into per-sequence runs; each sequence may appear in one run only."""
    slots, poss = slot.tolist(), pos.tolist()
    if any(s < 0 for s in slots):
        raise InputError("a row with a negative slot (padding) reached a stateful op")
    out: list[Segment] = []
    start = 0
    for r in range(1, len(slots) + 1):
        if r == len(slots) or slots[r] != slots[start]:
            seg = Segment(slots[start], start, r, poss[start])
            if poss[start:r] != list(range(seg.pos, seg.end_pos)):
                raise InputError(f"rows {start}..{r - 1} of slot {seg.slot}: positions "
                                 f"{poss[start:r]} are not consecutive")
            if any(s.slot == seg.slot for s in out):
                raise InputError(f"slot {seg.slot} appears in two separate runs of rows")
            out.append(seg)
            start = r
    return tuple(out)


class StateStore:
    """Tensors for every declared state, for `slots` sequences of up to `capacity` tokens."""

    def __init__(self, decls: tuple[StateDecl, ...], slots: int, capacity: int,
                 device: torch.device | str, dtype: torch.dtype | None = None):
        """dtype None keeps each state's declared dtype (the compiled engine's storage)."""
        self.decls = {d.name: d for d in decls}
        self.capacity = capacity
        self.tensors: dict[str, torch.Tensor] = {}
        for d in decls:
            shape = tuple(int(s.subs(S, capacity)) for s in d.type.shape)
            self.tensors[d.name] = torch.zeros((slots, *shape), device=device,
                                               dtype=dtype or d.type.dtype.torch)

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.tensors[name]

    def reset(self, slot: int) -> None:
        for t in self.tensors.values():
            t[slot].zero_()

    def reserve(self, wants: list[tuple[int, int]]) -> None:
        """Back positions < length of each (slot, length) before a step; contiguous state
        already holds the whole capacity (a paged store hands out blocks here)."""

    def release(self, slot: int) -> None:
        """Give back what a freed slot held (nothing, for contiguous state)."""

    def snapshot(self, slot: int) -> dict[str, torch.Tensor]:
        """Copies of the FIXED state of `slot`; TOKEN state rolls back by length alone."""
        return {n: self.tensors[n][slot].clone() for n, d in self.decls.items()
                if d.kind is StateKind.FIXED}

    def restore(self, slot: int, snap: dict[str, torch.Tensor]) -> None:
        for n, t in snap.items():
            self.tensors[n][slot].copy_(t)
