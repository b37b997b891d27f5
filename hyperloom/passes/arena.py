"""Arena planning: every node result lives at a fixed offset of one device buffer, sized for the
declared maximum rows per step, so addresses never move under a captured graph. Results whose
lifetimes do not overlap share bytes (first fit, largest buffers first). The results of one
multi-split projection share one buffer, as column slices."""

from __future__ import annotations

import math
from dataclasses import dataclass

import sympy

from hyperloom.errors import IRError
from hyperloom.ir.graph import Graph
from hyperloom.ir.ops import Op
from hyperloom.ir.types import T

ALIGN = 256
_NORMS = (Op.RMSNORM, Op.LAYERNORM, Op.GATED_RMSNORM)
# a node the kernel plan may run inside the launch of the node before it (kernel_plan._carry)
# writes its results while that node still reads and writes: they are born a node early, so
# they share no bytes with that node's operands
CARRIED_AFTER = {Op.LINEAR_KDA_GATE: (Op.KDA_CONV,), Op.LINEAR_GATED_NORM: (Op.KDA,),
                 **dict.fromkeys(_NORMS, _NORMS)}


@dataclass(frozen=True)
class Buffer:
    name: str  # the first value it holds
    values: tuple[str, ...]
    dtype: str
    row_elems: int  # elements per row (all values' columns side by side)
    first: int  # node index that writes it
    last: int  # last node index that reads it (len(nodes) for graph outputs)
    offset: int
    nbytes: int


@dataclass(frozen=True)
class Placement:
    buffer: str
    col: int  # first column of the value inside its buffer's row
    shape: tuple[int, ...]  # per-row shape


@dataclass(frozen=True)
class ArenaPlan:
    max_rows: int
    buffers: tuple[Buffer, ...]
    values: dict[str, Placement]
    total_bytes: int
    naive_bytes: int

    def text(self) -> str:
        lines = [f"arena: {self.total_bytes} bytes planned vs {self.naive_bytes} naive "
                 f"({self.max_rows} rows max)"]
        lines += [f"  +{b.offset:>10}  {b.nbytes:>10} B  live {b.first:>3}..{b.last:<3} "
                  f"{b.dtype}[R, {b.row_elems}]  {', '.join(b.values)}" for b in self.buffers]
        return "\n".join(lines) + "\n"


def _per_row(shape: tuple[sympy.Expr, ...], value: str) -> tuple[int, ...]:
    if not shape or shape[0] != T or any(s.free_symbols for s in shape[1:]):
        raise IRError(f"arena: {value} has shape {list(shape)}; results must be [T, consts...]")
    return tuple(int(s) for s in shape[1:])


def _groups(graph: Graph) -> list[tuple[tuple[str, ...], str, list[tuple[int, ...]]]]:
    out = []
    for node in graph.nodes:
        shapes = [_per_row(t.shape, v) for v, t in zip(node.outs, node.types)]
        if node.op is Op.NORM_LINEAR:
            out.append((node.outs, node.types[0].dtype.value, shapes))
        else:
            out += [((v,), t.dtype.value, [s]) for v, t, s in zip(node.outs, node.types, shapes)]
    return out


def _lifetimes(graph: Graph) -> dict[str, tuple[int, int]]:
    life = {}
    for i, node in enumerate(graph.nodes):
        early = i > 0 and graph.nodes[i - 1].op in CARRIED_AFTER.get(node.op, ())
        for o in node.outs:
            life[o] = (i - early, i)
        for a in node.args:
            if a in life:
                life[a] = (life[a][0], i)
    for _, v in graph.outputs:
        life[v] = (life[v][0], len(graph.nodes))
    return life


def _first_fit(size: int, span: tuple[int, int], placed: list[Buffer]) -> int:
    busy = sorted((b.offset, b.offset + b.nbytes) for b in placed
                  if b.first <= span[1] and span[0] <= b.last)
    offset = 0
    for lo, hi in busy:
        if offset + size <= lo:
            break
        offset = max(offset, -(-hi // ALIGN) * ALIGN)
    return offset


def plan_arena(graph: Graph, max_rows: int) -> ArenaPlan:
    from hyperloom.ir.types import DType

    life = _lifetimes(graph)
    pending = []
    for values, dtype, shapes in _groups(graph):
        elems = [math.prod(s) for s in shapes]
        size = max_rows * sum(elems) * DType.of(dtype).torch.itemsize
        span = (min(life[v][0] for v in values), max(life[v][1] for v in values))
        pending.append((values, dtype, shapes, elems, size, span))
    placed: list[Buffer] = []
    placements: dict[str, Placement] = {}
    for values, dtype, shapes, elems, size, span in sorted(pending, key=lambda p: -p[4]):
        off = _first_fit(size, span, placed)
        placed.append(Buffer(values[0], values, dtype, sum(elems), span[0], span[1], off, size))
        cols = 0
        for v, s, e in zip(values, shapes, elems):
            placements[v] = Placement(values[0], cols, s)
            cols += e
    placed.sort(key=lambda b: (b.first, b.name))
    total = max((b.offset + b.nbytes for b in placed), default=0)
    naive = sum(b.nbytes for b in placed)
    return ArenaPlan(max_rows, tuple(placed), placements, total, naive)

