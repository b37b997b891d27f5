"""A step's operands as the launch builders see them: arena views, weights, the state pool and
the shared scratch, by IR name; and the launch a builder returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from hyperloom.ir.state import StateStore
from hyperloom.passes.kernel_plan import KernelEntry

Launch = Callable[[int, int], None]  # (rows, most rows of one sequence) -> None


@dataclass
class Operands:
    """Where a step's operands live: arena views and row inputs (by %name), weights (by @name),
    the state pool, and the buffers that hold whole multi-split results."""

    values: dict[str, torch.Tensor]
    weights: dict[str, torch.Tensor]
    groups: dict[str, torch.Tensor]
    state: StateStore
    types: dict  # IR types of every operand
    scratch: dict[tuple, torch.Tensor] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # kernel name -> generated source

    def source(self, entry: KernelEntry) -> str:
        return self.sources[entry.name]

    def __getitem__(self, ref: str) -> torch.Tensor:
        return self.weights[ref[1:]] if ref.startswith("@") else self.values[ref]

    def buffer(self, key: tuple, make: Callable[[], Any]) -> Any:
        """The scratch under `key`, made by make() on first use: every launch of that key (the
        layers of one shape) shares it, and it is allocated here, never inside a captured
        launch."""
        if key not in self.scratch:
            self.scratch[key] = make()
        return self.scratch[key]
