"""The DSA indexer's contract (`DSASpec`): its heads, pools and top-k; `dsa` emits the pool and
score kernels from it, `dsa_select` the selection."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DSASpec:
    heads: int
    head_dim: int
    topk: int
    kpool: int
    select_tail: bool
    block_size: int = 0  # tokens per block of a paged key cache; 0: contiguous per slot

    def __post_init__(self) -> None:
        assert self.topk % self.kpool == 0, "topk must be a multiple of kpool"

    @property
    def width(self) -> int:
        return self.topk + (self.kpool - 1 if self.select_tail else 0)
