"""Helpers the passes share: who uses a value, and building the rewritten graph."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from hyperloom.ir.graph import Derived, Graph, Node
from hyperloom.ir.signatures import infer

Declined = tuple[str, ...]
PassResult = tuple[Graph, Declined]


def producers(graph: Graph) -> dict[str, Node]:
    return {o: n for n in graph.nodes for o in n.outs}


def sole_user(graph: Graph, value: str, users: dict[str, list[Node]]) -> Node | None:
    """The one node reading `value`, if it is read once and is not a graph output."""
    if any(v == value for _, v in graph.outputs):
        return None
    us = users.get(value, [])
    return us[0] if len(us) == 1 and us[0].args.count(value) == 1 else None


def make_node(graph: Graph, outs: tuple[str, ...], op, args: tuple[str, ...], attrs,
              sources: Iterable[Node], extra: Iterable[Derived] = ()) -> Node:
    """A fused node replacing `sources` (its origin lists the input-graph nodes they were)."""
    types = graph.value_types() | {"@" + d.name: d.type for d in extra}
    origin = tuple(dict.fromkeys(o for s in sources for o in s.sources))
    return Node(outs, op, args, attrs, infer(op, attrs, [types[a] for a in args]), origin)


def rebuild(graph: Graph, replace: dict[int, Node], drop: set[int],
            derived: Iterable[Derived] = ()) -> Graph:
    """`graph` with node i replaced by replace[i], nodes in `drop` removed, weights added."""
    nodes = tuple(replace.get(i, n) for i, n in enumerate(graph.nodes) if i not in drop)
    known = {d.name for d in graph.derived}
    extra = tuple(d for d in derived if d.name not in known)
    return dataclasses.replace(graph, nodes=nodes, derived=graph.derived + extra)


def weight_leaf(name: str) -> str:
    """`layers.0.self_attn.q_proj.weight` -> `q_proj` (for derived names and kernel names)."""
    parts = [p for p in name.split(".") if p not in ("weight",)]
    return parts[-1] if parts else name
