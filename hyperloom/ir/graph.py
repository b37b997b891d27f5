"""The graph: an SSA list of frozen nodes in topological order, with named inputs, parameters
(named by their checkpoint names, relative to the decoder root) and named outputs.

Operands are strings with a sigil: `%name` for SSA values, `@name` for parameters. Edits make new
graphs (`dataclasses.replace`); nothing here mutates.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from hyperloom.ir.ops import Op
from hyperloom.ir.state_decls import state_decls
from hyperloom.ir.types import StateDecl, TensorType


@dataclass(frozen=True, slots=True)
class Param:
    """A weight. A `*` in the name marks a stack: on disk one tensor per index of the first dim."""

    name: str
    type: TensorType

    @property
    def stacked(self) -> bool:
        return "*" in self.name


@dataclass(frozen=True, slots=True)
class Derived:
    """A weight computed from others once, when weights are bound: `concat` stacks rows,
    `scale_cols` multiplies W [N, K] by g [K] column-wise (RMSNorm weight folding), `pack_k`
    lays an expert stack [E, N, K] out as [E, K / R, N, R] (`derive.pack_k`), `split_bf16`
    holds an fp32 weight as three bf16 terms [3, ...] (`derive.split_bf16`)."""

    name: str
    type: TensorType
    kind: str
    args: tuple[str, ...]  # @params or earlier @derived


@dataclass(frozen=True, slots=True)
class Node:
    outs: tuple[str, ...]
    op: Op
    args: tuple[str, ...]
    attrs: object
    types: tuple[TensorType, ...]
    origin: tuple[str, ...] = ()  # the input-graph nodes a fused node replaces ("%3 linear")

    @property
    def sources(self) -> tuple[str, ...]:
        return self.origin or (f"{self.outs[0]} {self.op.value}",)

    @property
    def state(self) -> str | None:
        return getattr(self.attrs, "state", None)


@dataclass(frozen=True, slots=True)
class Graph:
    name: str
    inputs: tuple[tuple[str, TensorType], ...]
    params: tuple[Param, ...]
    nodes: tuple[Node, ...]
    outputs: tuple[tuple[str, str], ...]  # (label, %value)
    derived: tuple[Derived, ...] = ()

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def value_types(self) -> dict[str, TensorType]:
        """Type of every operand: inputs, parameters and node results."""
        types = {n: t for n, t in self.inputs} | {"@" + p.name: p.type for p in self.params}
        types |= {"@" + d.name: d.type for d in self.derived}
        for node in self.nodes:
            types.update(zip(node.outs, node.types))
        return types

    def states(self) -> tuple[StateDecl, ...]:
        types = self.value_types()
        return tuple(s for n in self.nodes
                     for s in state_decls(n.op, n.attrs, [types[a] for a in n.args]))

    def users(self) -> dict[str, list[Node]]:
        out: dict[str, list[Node]] = {}
        for node in self.nodes:
            for a in node.args:
                out.setdefault(a, []).append(node)
        return out

    def by_op(self, op: Op) -> Iterator[Node]:
        return (n for n in self.nodes if n.op is op)

    def __str__(self) -> str:
        from hyperloom.ir.printer import print_graph

        return print_graph(self)

    __repr__ = __str__
