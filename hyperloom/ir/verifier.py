"""The verifier: SSA form, operand references, attribute types, shapes and dtypes, state names.
Its errors name the failing node and quote the IR around it.
"""

from __future__ import annotations

import dataclasses
import typing

from hyperloom.errors import IRError
from hyperloom.ir import ops
from hyperloom.ir.derive import derived_type
from hyperloom.ir.graph import Derived, Graph, Node
from hyperloom.ir.printer import context
from hyperloom.ir.signatures import infer
from hyperloom.ir.state_decls import state_decls

_ATTR_TYPES = {"int": (int,), "float": (float,), "bool": (bool,), "str": (str,)}


def _attr_ok(value: object, annotation: str) -> bool:
    if annotation.startswith("tuple[int"):
        return isinstance(value, tuple) and all(type(v) is int for v in value)
    for alt in (a.strip() for a in annotation.split("|")):
        if alt == "None" and value is None:
            return True
        allowed = _ATTR_TYPES.get(alt, ())
        if isinstance(value, allowed) and not (alt != "bool" and isinstance(value, bool)):
            return True
    return False


def check_attrs(node: Node) -> None:
    want = ops.ATTRS[node.op]
    if type(node.attrs) is not want:
        raise IRError(f"{node.op.value} wants {want.__name__}, got {type(node.attrs).__name__}")
    hints = {f.name: f.type for f in dataclasses.fields(want)}
    for name, ann in hints.items():
        value = getattr(node.attrs, name)
        ann = ann if isinstance(ann, str) else typing.get_type_hints(want)[name].__name__
        if not _attr_ok(value, ann):
            raise IRError(f"attribute {name}={value!r} is not of type {ann}")


def _check_node(node: Node, types: dict, states: set[str]) -> None:
    for a in node.args:
        if a not in types:
            kind = "parameter" if a.startswith("@") else "value"
            raise IRError(f"operand {a} is not a defined {kind}")
    for i, o in enumerate(node.outs):
        if not o.startswith("%"):
            raise IRError(f"result {o} must start with %")
        if o in types or o in node.outs[:i]:
            raise IRError(f"{o} is defined twice (SSA)")
    check_attrs(node)
    args = [types[a] for a in node.args]
    got = infer(node.op, node.attrs, args)
    if len(got) != len(node.outs) or got != node.types:
        have = ", ".join(map(str, node.types))
        raise IRError(f"declared types [{have}] but the operands give [{', '.join(map(str, got))}]")
    for s in state_decls(node.op, node.attrs, args):
        if s.name in states:
            raise IRError(f"state ${s.name} is used by two nodes")
        states.add(s.name)


def _check_derived(graph: Graph, d: Derived, types: dict) -> None:
    where = f"graph {graph.name}, derive @{d.name}"
    if "@" + d.name in types:
        raise IRError(f"{where}: declared twice")
    missing = [a for a in d.args if a not in types]
    if missing:
        raise IRError(f"{where}: operand {missing[0]} is not a defined parameter")
    try:
        want = derived_type(d.kind, [types[a] for a in d.args])
    except IRError as e:
        raise IRError(f"{where}: {e}") from None
    if want != d.type:
        raise IRError(f"{where}: declared {d.type} but the operands give {want}")


def _check_interface(graph: Graph) -> None:
    for what, names in (("input", [n for n, _ in graph.inputs]),
                        ("output label", [label for label, _ in graph.outputs])):
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise IRError(f"graph {graph.name}: {what} {', '.join(dup)} declared twice")
    bad = [n for n, _ in graph.inputs if not n.startswith("%")]
    if bad:
        raise IRError(f"graph {graph.name}: input {bad[0]} must start with %")


def _check_index_layout(node: Node, topks: dict[str, int]) -> None:
    """An MLA that walks its index by the DSA layout (index_topk) reads a DSA selection of that
    topk: a wrong one would skip chosen tokens silently."""
    if node.op is ops.Op.DSA_INDEX:
        topks[node.outs[0]] = node.attrs.topk
    elif node.op is ops.Op.MLA_ATTENTION and node.attrs.index_topk:
        index = node.args[5] if len(node.args) > 5 else "(none)"
        got = topks.get(index)
        if got != node.attrs.index_topk:
            what = "not a dsa_index selection" if got is None else f"topk {got}"
            raise IRError(f"index_topk={node.attrs.index_topk}, but the index {index} is {what}")


def verify(graph: Graph) -> Graph:
    """Raise IRError if `graph` is malformed; return it unchanged otherwise."""
    _check_interface(graph)
    types = dict(graph.inputs)
    for p in graph.params:
        if "@" + p.name in types:
            raise IRError(f"graph {graph.name}: parameter @{p.name} declared twice")
        types["@" + p.name] = p.type
    for d in graph.derived:
        _check_derived(graph, d, types)
        types["@" + d.name] = d.type
    states: set[str] = set()
    topks: dict[str, int] = {}  # DSA selections -> their topk
    for i, node in enumerate(graph.nodes):
        try:
            _check_node(node, types, states)
            _check_index_layout(node, topks)
        except IRError as e:
            where = f"graph {graph.name}, node {node.outs[0]}"
            raise IRError(f"{where}: {e}\n{context(graph, i)}") from None
        types.update(zip(node.outs, node.types))
    for label, value in graph.outputs:
        if not value.startswith("%"):
            raise IRError(f"graph {graph.name}: output {label}={value} must be a % value")
        if value not in types:
            raise IRError(f"graph {graph.name}: output {label}={value} is not defined")
    used = {a for n in graph.nodes for a in n.args} | {a for d in graph.derived for a in d.args}
    unused = [p.name for p in graph.params + graph.derived if "@" + p.name not in used]
    if unused:
        raise IRError(f"graph {graph.name}: parameters never used: {', '.join(unused[:5])}")
    return graph
