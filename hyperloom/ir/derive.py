"""Derived weights: their type rules, and binding (computing them once from loaded weights)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from hyperloom.errors import IRError
from hyperloom.ir.graph import Graph
from hyperloom.ir.types import TensorType


def derived_type(kind: str, args: Sequence[TensorType]) -> TensorType:
    if kind == "concat":
        first = args[0]
        if any(a.shape[1:] != first.shape[1:] or a.dtype != first.dtype for a in args):
            raise IRError(f"concat operands differ: {', '.join(map(str, args))}")
        return first.with_shape(sum(a.shape[0] for a in args), *first.shape[1:])
    if kind == "scale_cols":
        w, g = args
        if w.rank != 2 or g.shape != (w.shape[1],):
            raise IRError(f"scale_cols wants W [N, K] and g [K], got {w}, {g}")
        return w
    raise IRError(f"unknown derivation {kind!r} (known: concat, scale_cols)")


def _compute(kind: str, args: list[torch.Tensor]) -> torch.Tensor:
    if kind == "concat":
        return torch.cat(args, 0)
    w, g = args
    wide = torch.promote_types(w.dtype, torch.float32)
    return (w.to(wide) * g.to(wide)[None, :]).to(w.dtype)


def bind(graph: Graph, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The weights a graph reads: its parameters and its derived weights, computed in order."""
    out = {p.name: weights[p.name] for p in graph.params}
    for d in graph.derived:
        out[d.name] = _compute(d.kind, [out[a[1:]] for a in d.args])
    return out
