"""What an op's reference implementation sees: the compute dtype, the state store and the
step's row segments."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hyperloom.ir.state import Segment, StateStore


@dataclass
class Ctx:
    dtype: torch.dtype
    state: StateStore | None
    segments: tuple[Segment, ...]
