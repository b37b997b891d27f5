"""Canonical IR text: the repr, the dump format, the golden-test format and the context of every
IR error. `parse_graph(print_graph(g)) == g` for every graph.

    %12 = rmsnorm(%9, @layers.0.input_layernorm.weight) {eps=1e-05} : bf16[T, 64]
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hyperloom.ir.graph import Graph, Node


def format_attrs(attrs: object) -> str:
    fields = dataclasses.fields(attrs)
    if not fields:
        return ""
    body = ", ".join(f"{f.name}={getattr(attrs, f.name)!r}" for f in fields)
    return " {" + body + "}"


def print_node(node: Node) -> str:
    types = ", ".join(str(t) for t in node.types)
    call = f"{node.op.value}({', '.join(node.args)})"
    fused = f"  # fused: {', '.join(node.origin)}" if node.origin else ""
    return f"{', '.join(node.outs)} = {call}{format_attrs(node.attrs)} : {types}{fused}"


def header(graph: Graph) -> str:
    ins = ", ".join(f"{n}: {t}" for n, t in graph.inputs)
    return f"graph {graph.name}({ins}) {{"


def graph_lines(graph: Graph) -> list[str]:
    lines = [header(graph)]
    lines += [f"  param @{p.name} : {p.type}" for p in graph.params]
    lines += [f"  derive @{d.name} : {d.type} = {d.kind}({', '.join(d.args)})"
              for d in graph.derived]
    lines += [f"  state ${s.name} : {s.kind.value} {s.type}" for s in graph.states()]
    lines += [f"  {print_node(n)}" for n in graph.nodes]
    lines.append("  return " + ", ".join(f"{label}={v}" for label, v in graph.outputs))
    lines.append("}")
    return lines


def print_graph(graph: Graph) -> str:
    return "\n".join(graph_lines(graph)) + "\n"


def context(graph: Graph, index: int, radius: int = 3) -> str:
    """The few lines of IR around node `index`, the failing one marked with `>>`."""
    lo, hi = max(0, index - radius), min(len(graph.nodes), index + radius + 1)
    out = []
    for i in range(lo, hi):
        mark = ">>" if i == index else "  "
        out.append(f"{mark} {print_node(graph.nodes[i])}")
    return "\n".join(out)
