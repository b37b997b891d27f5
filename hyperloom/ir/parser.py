"""IR text -> Graph, the inverse of the printer. Errors name the line that does not parse."""

from __future__ import annotations

import ast
import re

from hyperloom.errors import IRError
from hyperloom.ir.graph import Derived, Graph, Node, Param
from hyperloom.ir.ops import ATTRS, Op
from hyperloom.ir.types import DType, TensorType, dim

_TYPE = re.compile(r"^(\w+)\[(.*)\]$")
_HEADER = re.compile(r"^graph\s+([\w.\-]+)\((.*)\)\s*\{$")
_NODE = re.compile(r"^(%[\w.]+(?:\s*,\s*%[\w.]+)*)\s*=\s*(\w+)\((.*?)\)(\s*\{.*\})?\s*:\s*(.+)$")
_DERIVE = re.compile(r"^derive @(\S+) : (.+) = (\w+)\((.*)\)$")
_OPS = {op.value: op for op in Op}


def split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets, braces, parentheses or quotes."""
    parts, depth, quote, cur = [], 0, "", []
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def parse_type(text: str) -> TensorType:
    m = _TYPE.match(text.strip())
    if not m or m.group(1) not in {d.value for d in DType}:
        raise IRError(f"bad tensor type {text.strip()!r}")
    return TensorType(DType.of(m.group(1)), tuple(dim(s) for s in split_top(m.group(2))))


def _literal(text: str) -> object:
    """A Python literal as repr() prints it; repr gives bare inf / nan for non-finite floats."""
    if text in ("inf", "-inf", "nan"):
        return float(text)
    return ast.literal_eval(text)


def parse_attrs(op: Op, text: str | None) -> object:
    cls = ATTRS[op]
    body = (text or "").strip()
    fields = {}
    if body:
        for item in split_top(body[1:-1]):
            key, _, value = item.partition("=")
            try:
                fields[key.strip()] = _literal(value.strip())
            except (ValueError, SyntaxError) as e:
                raise IRError(f"bad value for attribute {key.strip()!r}: {value.strip()!r}") from e
    try:
        return cls(**fields)
    except TypeError as e:
        raise IRError(f"{op.value}: bad attributes {body!r} ({e})") from e


def parse_node(line: str) -> Node:
    line, _, fused = line.partition("  # fused: ")
    m = _NODE.match(line)
    if not m:
        raise IRError(f"cannot parse IR line: {line!r}")
    outs, opname, args, attrs, types = m.groups()
    if opname not in _OPS:
        raise IRError(f"unknown op {opname!r} in: {line!r}")
    op = _OPS[opname]
    return Node(
        outs=tuple(o.strip() for o in outs.split(",")),
        op=op,
        args=tuple(split_top(args)),
        attrs=parse_attrs(op, attrs),
        types=tuple(parse_type(t) for t in split_top(types)),
        origin=tuple(x.strip() for x in fused.split(",")) if fused else (),
    )


def _parse_input(text: str) -> tuple[str, TensorType]:
    name, _, ty = text.partition(":")
    return name.strip(), parse_type(ty)


def parse_graph(text: str) -> Graph:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    m = _HEADER.match(lines[0]) if lines else None
    if not m or lines[-1] != "}":
        raise IRError("IR text must be 'graph NAME(inputs) { ... }'")
    inputs = tuple(_parse_input(x) for x in split_top(m.group(2)))
    params, derived, nodes, outputs = [], [], [], ()
    for line in lines[1:-1]:
        if line.startswith("derive @"):
            d = _DERIVE.match(line)
            if not d:
                raise IRError(f"cannot parse IR line: {line!r}")
            derived.append(Derived(d.group(1), parse_type(d.group(2)), d.group(3),
                                   tuple(split_top(d.group(4)))))
        elif line.startswith("param @"):
            name, _, ty = line[len("param @"):].partition(" : ")
            params.append(Param(name.strip(), parse_type(ty)))
        elif line.startswith("state $"):
            continue  # derived from the stateful nodes; the verifier checks them
        elif line.startswith("return "):
            outputs = tuple(tuple(x.split("=")) for x in split_top(line[len("return "):]))
        else:
            nodes.append(parse_node(line))
    return Graph(m.group(1), inputs, tuple(params), tuple(nodes), outputs, tuple(derived))
