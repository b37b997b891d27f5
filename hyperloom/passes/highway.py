"""Highway slots: every token in flight owns its fp32 streams ([n, D] with mHC, [D] plain) from
the embedding to the LM head. The slot of a row is its row index in the step, so prefill
sub-chunks (successive steps), the rows of a verify and the rows of a decode batch can never
share one; within a step the arena keeps every live highway value in bytes of its own."""

from __future__ import annotations

from dataclasses import dataclass

from hyperloom.errors import IRError
from hyperloom.ir.graph import Graph
from hyperloom.ir.ops import Op
from hyperloom.ir.types import DType, T
from hyperloom.passes.arena import ArenaPlan

# ops whose result is the highway (the residual streams between sites)
HIGHWAY_OPS = (Op.EMBED_STREAMS, Op.HC_EXPAND, Op.HC_POST, Op.LINEAR_HC_POST,
               Op.RESIDUAL_ADD, Op.LINEAR_RESIDUAL)


@dataclass(frozen=True)
class HighwayPlan:
    values: tuple[str, ...]  # highway values in order
    row_bytes: int  # bytes one token's streams take
    max_rows: int

    def text(self) -> str:
        return (f"highway: {len(self.values)} values, {self.row_bytes} B per token, slot = row "
                f"index (< {self.max_rows}); values: {', '.join(self.values)}\n")


def plan_highway(graph: Graph, arena: ArenaPlan) -> HighwayPlan:
    values, row_bytes = [], 0
    for node in graph.nodes:
        if node.op not in HIGHWAY_OPS:
            continue
        v, ty = node.outs[0], node.types[0]
        if ty.dtype is not DType.F32 or ty.shape[0] != T:
            raise IRError(f"highway value {v} must be f32[T, ...], got {ty}")
        values.append(v)
        p = arena.values[v]
        n = 4
        for s in p.shape:
            n *= s
        row_bytes = max(row_bytes, n)
    _check_disjoint(values, arena)
    return HighwayPlan(tuple(values), row_bytes, arena.max_rows)


def _check_disjoint(values: list[str], arena: ArenaPlan) -> None:
    bufs = {b.name: b for b in arena.buffers}
    live = [bufs[arena.values[v].buffer] for v in values]
    for i, a in enumerate(live):
        for b in live[i + 1:]:
            overlap_time = a.first <= b.last and b.first <= a.last
            overlap_bytes = a.offset < b.offset + b.nbytes and b.offset < a.offset + a.nbytes
            if overlap_time and overlap_bytes:
                raise IRError(f"highway values {a.name} and {b.name} share arena bytes while "
                              "both are live")
