"""The verifier rejects corrupted graphs, and its messages name the failing node and quote the IR
around it. Every case starts from the real glm5next tiny main graph and breaks one thing."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

import hyperloom
from hyperloom.errors import IRError
from hyperloom.ir import DType, Graph, Op, Param, TensorType, verify
from hyperloom.ir.ops import GatedNormAttrs
from hyperloom.ir.printer import print_node


@pytest.fixture(scope="module")
def g() -> Graph:
    return hyperloom.build("glm5next", "tiny").main


def find(g: Graph, op: Op, nth: int = 0) -> int:
    """Index of the nth node with `op`."""
    return [i for i, n in enumerate(g.nodes) if n.op is op][nth]


def with_node(g: Graph, i: int, **changes: object) -> Graph:
    nodes = list(g.nodes)
    nodes[i] = dataclasses.replace(nodes[i], **changes)
    return dataclasses.replace(g, nodes=tuple(nodes))


def with_attrs(g: Graph, i: int, **changes: object) -> Graph:
    return with_node(g, i, attrs=dataclasses.replace(g.nodes[i].attrs, **changes))


def rejected(g: Graph, i: int) -> str:
    """verify(g) must fail at node i: the message names its result and marks its IR line."""
    with pytest.raises(IRError) as err:
        verify(g)
    msg, node = str(err.value), g.nodes[i]
    head = msg.splitlines()[0]
    assert head.startswith(f"graph {g.name}, node {node.outs[0]}: "), head
    assert f">> {print_node(node)}" in msg.splitlines(), msg
    assert f"{node.op.value}(" in msg
    return msg


def test_real_graphs_verify() -> None:
    for m, c in (("llama", "tiny"), ("llama", "tiny-hc"), ("glm5next", "tiny")):
        for graph in hyperloom.build(m, c).graphs:
            assert verify(graph) is graph


# (a) -----------------------------------------------------------------------------------------
def test_undefined_operand(g: Graph) -> None:
    i = find(g, Op.RMSNORM, 2)
    bad = with_node(g, i, args=("%nowhere",) + g.nodes[i].args[1:])
    assert "operand %nowhere is not a defined value" in rejected(bad, i)


# (b) -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("clash", ["earlier result", "graph input"])
def test_defined_twice(g: Graph, clash: str) -> None:
    i = find(g, Op.LINEAR, 1)
    name = g.nodes[i - 1].outs[0] if clash == "earlier result" else "%pos"
    assert f"{name} is defined twice (SSA)" in rejected(with_node(g, i, outs=(name,)), i)


# (c), (d) -----------------------------------------------------------------------------------
@pytest.mark.parametrize("op, res, wrong", [
    (Op.LINEAR, 0, lambda t: t.with_shape(t.shape[0], t.shape[1] + 1)),  # shape
    (Op.HC_PRE, 2, lambda t: t.with_shape(*t.shape[:2])),  # rank, on a later result
    (Op.KDA_GATE, 0, lambda t: t.with_dtype(DType.BF16)),  # dtype
    (Op.MOE_ROUTER, 1, lambda t: t.with_dtype(DType.I64)),  # dtype of ids
], ids=["shape", "rank", "dtype", "int-dtype"])
def test_wrong_result_type(g: Graph, op: Op, res: int,
                          wrong: Callable[[TensorType], TensorType]) -> None:
    i = find(g, op)
    node = g.nodes[i]
    right, types = node.types[res], list(node.types)
    types[res] = wrong(right)
    assert types[res] != right
    msg = rejected(with_node(g, i, types=tuple(types)), i)
    assert "declared types" in msg and str(types[res]) in msg and str(right) in msg


def test_missing_result(g: Graph) -> None:
    i = find(g, Op.MOE_ROUTER)
    node = g.nodes[i]
    rejected(with_node(g, i, outs=node.outs[:1], types=node.types[:1]), i)


# (e) -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("op, field, value", [
    (Op.RMSNORM, "eps", "x"),
    (Op.KDA, "heads", 2.0),
    (Op.RMSNORM, "eps", 1),  # an int is no float
    (Op.MOE_ROUTER, "top_k", True),  # a bool is no int
    (Op.DSA_INDEX, "select_tail", 1),
    (Op.KDA_GATE, "lower_bound", "none"),
    (Op.MLA_ATTENTION, "state", None),
])
def test_attr_of_wrong_type(g: Graph, op: Op, field: str, value: object) -> None:
    i = find(g, op)
    msg = rejected(with_attrs(g, i, **{field: value}), i)
    assert f"attribute {field}={value!r} is not of type" in msg


def test_attrs_of_wrong_record(g: Graph) -> None:
    i = find(g, Op.RMSNORM)
    msg = rejected(with_node(g, i, attrs=GatedNormAttrs(1e-5, 16)), i)
    assert "rmsnorm wants NormAttrs, got GatedNormAttrs" in msg


# (f) -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("op, delta, want", [
    (Op.RMSNORM, -1, "rmsnorm takes 2 operands, got 1"),
    (Op.KDA, -1, "kda takes 7 operands, got 6"),
    (Op.LINEAR, +1, "linear takes 2 operands, got 3"),
    (Op.MLA_ATTENTION, -2, "mla_attention takes 5 or 6 operands, got 4"),
])
def test_operand_count(g: Graph, op: Op, delta: int, want: str) -> None:
    i = find(g, op)
    args = g.nodes[i].args
    args = args[:delta] if delta < 0 else args + args[-1:] * delta
    assert want in rejected(with_node(g, i, args=args), i)


# (g) -----------------------------------------------------------------------------------------
def test_use_before_definition(g: Graph) -> None:
    i = find(g, Op.RMSNORM)
    first, second = g.nodes[i], g.nodes[i + 1]
    assert first.outs[0] in second.args, "needs a dependent pair"
    nodes = list(g.nodes)
    nodes[i], nodes[i + 1] = second, first
    msg = rejected(dataclasses.replace(g, nodes=tuple(nodes)), i)
    assert f"operand {first.outs[0]} is not a defined value" in msg


# (h) -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("op, decl", [(Op.KDA_CONV, "conv"), (Op.KDA, "recurrent")])
def test_shared_state_name(g: Graph, op: Op, decl: str) -> None:
    first, i = g.nodes[find(g, op, 0)], find(g, op, 1)
    msg = rejected(with_attrs(g, i, state=first.state), i)
    assert f"state ${first.state}.{decl} is used by two nodes" in msg


# (i) -----------------------------------------------------------------------------------------
def test_param_not_declared(g: Graph) -> None:
    bad = dataclasses.replace(g, params=tuple(p for p in g.params if p.name != "norm.weight"))
    i = next(k for k, n in enumerate(g.nodes) if "@norm.weight" in n.args)
    assert "operand @norm.weight is not a defined parameter" in rejected(bad, i)


def test_param_misspelt(g: Graph) -> None:
    i = find(g, Op.KDA_GATE)
    args = g.nodes[i].args
    bad = with_node(g, i, args=(args[0], args[1] + "s", args[2]))
    assert f"operand {args[1]}s is not a defined parameter" in rejected(bad, i)


# (j) -----------------------------------------------------------------------------------------
def test_output_undefined(g: Graph) -> None:
    bad = dataclasses.replace(g, outputs=(("logits", "%999"),) + g.outputs[1:])
    with pytest.raises(IRError, match=f"graph {g.name}: output logits=%999 is not defined"):
        verify(bad)


# (k) -----------------------------------------------------------------------------------------
def test_param_unused(g: Graph) -> None:
    extra = Param("layers.0.self_attn.extra.weight", TensorType.make("bf16", 64))
    bad = dataclasses.replace(g, params=g.params + (extra,))
    with pytest.raises(IRError, match=r"parameters never used: layers\.0\.self_attn\.extra"):
        verify(bad)


def test_param_declared_twice(g: Graph) -> None:
    bad = dataclasses.replace(g, params=g.params + (g.params[3],))
    with pytest.raises(IRError, match=f"parameter @{g.params[3].name} declared twice"):
        verify(bad)


# context -------------------------------------------------------------------------------------
def test_message_quotes_context(g: Graph) -> None:
    i = find(g, Op.KDA)
    bad = with_attrs(g, i, heads=2.0)
    lines = rejected(bad, i).splitlines()
    marked = [ln for ln in lines if ln.startswith(">>")]
    assert marked == [f">> {print_node(bad.nodes[i])}"]
    # three nodes either side, unmarked, in graph order
    want = [f"   {print_node(n)}" for n in bad.nodes[i - 3: i]] + marked + \
        [f"   {print_node(n)}" for n in bad.nodes[i + 1: i + 4]]
    assert lines[1:] == want


def test_context_clipped_at_graph_start(g: Graph) -> None:
    bad = with_node(g, 0, args=("%nowhere", g.nodes[0].args[1]))
    lines = rejected(bad, 0).splitlines()
    assert lines[1].startswith(">> %0 = embedding(") and len(lines) == 1 + 4


# interface and result-name checks ---------------------------------------------------------
def test_duplicate_result_within_node(g: Graph) -> None:
    i = find(g, Op.KDA_CONV)
    outs = g.nodes[i].outs  # three results of one type, so types still check
    nodes = [dataclasses.replace(n, args=tuple(outs[0] if a == outs[1] else a for a in n.args))
             for n in g.nodes]
    nodes[i] = dataclasses.replace(nodes[i], outs=(outs[0], outs[0], outs[2]))
    with pytest.raises(IRError, match="defined twice"):
        verify(dataclasses.replace(g, nodes=tuple(nodes)))


def test_output_naming_a_parameter(g: Graph) -> None:
    with pytest.raises(IRError, match="@norm.weight"):
        verify(dataclasses.replace(g, outputs=g.outputs + (("w", "@norm.weight"),)))


def test_duplicate_output_label(g: Graph) -> None:
    with pytest.raises(IRError, match="logits"):
        verify(dataclasses.replace(g, outputs=g.outputs + (("logits", g.outputs[1][1]),)))


def test_duplicate_input_name(g: Graph) -> None:
    with pytest.raises(IRError, match="%ids"):
        verify(dataclasses.replace(g, inputs=g.inputs + (g.inputs[0],)))


@pytest.mark.parametrize("topk", [4, 10])
def test_mla_index_topk_names_its_selection(g: Graph, topk: int) -> None:
    """An MLA that walks its index by the DSA layout must read a selection of that topk (the
    tiny model's is 8): any other would skip chosen tokens."""
    i = find(g, Op.MLA_ATTENTION)
    msg = rejected(with_attrs(g, i, index_topk=topk), i)
    assert f"index_topk={topk}, but the index {g.nodes[i].args[5]} is topk 8" in msg
    assert verify(with_attrs(g, i, index_topk=0)), "no layout promised: any index"
