"""Canonical IR text: golden dumps, print/parse round trips, graph structure per config, the
states a graph declares, and parser errors that name the offending text."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sympy

import hyperloom
from hyperloom.errors import IRError
from hyperloom.ir import (
    Graph, Node, Op, StateKind, TensorType, parse_graph, print_graph, verify,
)
from hyperloom.ir.types import S
from hyperloom.models import Model, family
from hyperloom.models.glm5next import DSA, KDA

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("HYPERLOOM_UPDATE_GOLDEN") == "1"
CONFIGS = [("llama", "tiny"), ("llama", "tiny-hc"), ("glm5next", "tiny")]
HC_OPS = {Op.HC_EXPAND, Op.HC_PRE, Op.HC_POST, Op.HC_HEAD_MEAN}


@functools.cache
def built(model: str, config: str = "tiny") -> Model:
    return hyperloom.build(model, config)


def cfg(model: str, config: str = "tiny") -> Any:  # the family's own config dataclass
    return family(model).configs[config]


def all_graphs() -> list[tuple[str, Graph]]:
    return [(f"{m}-{c}-{g.name}", g) for m, c in CONFIGS for g in built(m, c).graphs]


GRAPH_PARAMS = [pytest.param(g, id=name) for name, g in all_graphs()]


def counts(graph: Graph) -> Counter[Op]:
    return Counter(n.op for n in graph.nodes)


_LAYER = re.compile(r"^@?layers\.(\d+)\.")


def layer_of(node: Node) -> int | None:
    """The decoder layer a node belongs to, from its parameter operands or its state name."""
    for ref in (*node.args, node.state or ""):
        if m := _LAYER.match(ref):
            return int(m.group(1))
    return None


def per_layer(graph: Graph, op: Op) -> Counter[int | None]:
    return Counter(layer_of(n) for n in graph.by_op(op))


# -- golden files ----------------------------------------------------------------------------

@pytest.mark.parametrize("fname, model, which", [
    ("llama_tiny.ir", "llama", "main"),
    ("glm5next_tiny.ir", "glm5next", "main"),
    ("glm5next_tiny_mtp.ir", "glm5next", "mtp"),
])
def test_golden(fname: str, model: str, which: str) -> None:
    text = print_graph(getattr(built(model), which))
    path = GOLDEN / fname
    if UPDATE:
        path.write_text(text)
        return
    assert path.exists(), f"missing {path}; run with HYPERLOOM_UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(), f"{fname} changed; diff it, then HYPERLOOM_UPDATE_GOLDEN=1"


# -- round trip ------------------------------------------------------------------------------

@pytest.mark.parametrize("graph", GRAPH_PARAMS)
def test_round_trip(graph: Graph) -> None:
    text = print_graph(graph)
    back = parse_graph(text)
    assert back == graph
    assert print_graph(back) == text


def test_round_trip_keeps_symbolic_dims() -> None:
    # T and S must come back as the same (assumption-carrying) sympy symbols, not fresh ones
    g = built("glm5next").main
    back = parse_graph(print_graph(g))
    assert back.value_types() == g.value_types()
    assert {d.type for d in back.states()} == {d.type for d in g.states()}


def test_round_trip_infinite_attr() -> None:
    g = built("glm5next").main
    i = next(k for k, n in enumerate(g.nodes) if n.op is Op.SWIGLU)
    nodes = list(g.nodes)
    nodes[i] = dataclasses.replace(nodes[i], attrs=dataclasses.replace(nodes[i].attrs,
                                                                     limit=float("inf")))
    g = verify(dataclasses.replace(g, nodes=tuple(nodes)))
    assert parse_graph(print_graph(g)) == g


# -- structure -------------------------------------------------------------------------------

def test_llama_plain_residual() -> None:
    c, g = cfg("llama"), built("llama").main
    assert c.hc_mult == 1
    ops = counts(g)
    assert not HC_OPS & set(ops)
    layers = range(c.num_hidden_layers)
    # two sites per layer (attention, MLP); attribute each add to its layer by the norm before
    assert ops[Op.RESIDUAL_ADD] == 2 * c.num_hidden_layers
    assert per_layer(g, Op.RMSNORM) == Counter({i: 2 for i in layers} | {None: 1})
    assert per_layer(g, Op.ATTENTION) == Counter({i: 1 for i in layers})


def test_llama_residual_adds_form_one_chain() -> None:
    # each add must extend the previous stream, starting from the fp32 cast of the embedding
    g = built("llama").main
    adds = list(g.by_op(Op.RESIDUAL_ADD))
    (cast,) = g.by_op(Op.CAST)
    streams = [cast.outs[0]] + [a.outs[0] for a in adds[:-1]]
    assert [a.args[0] for a in adds] == streams


def test_llama_hc_sites() -> None:
    c, g = cfg("llama", "tiny-hc"), built("llama", "tiny-hc").main
    assert c.hc_mult > 1
    ops = counts(g)
    per = {i: 2 for i in range(c.num_hidden_layers)}
    assert per_layer(g, Op.HC_PRE) == Counter(per)
    assert ops[Op.HC_POST] == 2 * c.num_hidden_layers
    assert ops[Op.HC_EXPAND] == 1 and ops[Op.HC_HEAD_MEAN] == 1
    assert ops[Op.RESIDUAL_ADD] == 0
    for n in g.by_op(Op.HC_PRE):
        assert n.attrs.n == c.hc_mult and n.types[0].shape[1:] == (c.hidden_size,)


def test_llama_hc_posts_pair_with_pres() -> None:
    # hc_post i consumes the post/comb results of hc_pre i and the stream hc_pre i read
    g = built("llama", "tiny-hc").main
    for pre, post in zip(g.by_op(Op.HC_PRE), g.by_op(Op.HC_POST), strict=True):
        assert post.args[1:] == (pre.args[0], pre.outs[1], pre.outs[2])


def test_glm5next_layer_ops() -> None:
    c, g = cfg("glm5next"), built("glm5next").main
    kda = {i for i, t in enumerate(c.layer_types) if t == KDA}
    dsa = {i for i, t in enumerate(c.layer_types) if t == DSA}
    sparse = {i for i, t in enumerate(c.mlp_layer_types) if t == "sparse"}
    assert kda and dsa and sparse and len(kda) + len(dsa) == c.num_hidden_layers
    for op in (Op.KDA_CONV, Op.KDA_GATE, Op.KDA):
        assert per_layer(g, op) == Counter(kda), op
    for op in (Op.DSA_INDEX, Op.MLA_ATTENTION):
        assert per_layer(g, op) == Counter(dsa), op
    for op in (Op.MOE_ROUTER, Op.MOE_EXPERTS):
        assert per_layer(g, op) == Counter(sparse), op


def test_glm5next_residual_and_head() -> None:
    c, g = cfg("glm5next"), built("glm5next").main
    ops = counts(g)
    assert per_layer(g, Op.HC_PRE) == Counter({i: 2 for i in range(c.num_hidden_layers)})
    assert ops[Op.HC_POST] == 2 * c.num_hidden_layers
    assert ops[Op.HC_EXPAND] == ops[Op.HC_HEAD_MEAN] == ops[Op.LM_HEAD] == 1
    assert ops[Op.RESIDUAL_ADD] == 0
    # the head reads the mean of the streams, through the final norm
    (mean,), (head,) = g.by_op(Op.HC_HEAD_MEAN), g.by_op(Op.LM_HEAD)
    norm = next(n for n in g.nodes if n.outs[0] == head.args[0])
    assert norm.args == (mean.outs[0], "@norm.weight")
    assert dict(g.outputs) == {"logits": head.outs[0], "hidden": norm.outs[0]}


def test_glm5next_dsa_feeds_mla() -> None:
    c, g = cfg("glm5next"), built("glm5next").main
    for idx, mla in zip(g.by_op(Op.DSA_INDEX), g.by_op(Op.MLA_ATTENTION), strict=True):
        assert mla.args[-1] == idx.outs[0]
        width = c.index_topk + (c.index_kpool - 1 if c.index_kpool_always_select_tail else 0)
        assert idx.types[0].shape[1] == width == idx.attrs.width


def test_glm5next_mtp_graph() -> None:
    c, g = cfg("glm5next"), built("glm5next").mtp
    assert c.num_nextn_predict_layers == 1 and c.mtp_layer_type == DSA
    ops = counts(g)
    assert not HC_OPS & set(ops)
    assert ops[Op.RESIDUAL_ADD] == 2 and ops[Op.CONCAT] == 1
    assert ops[Op.DSA_INDEX] == ops[Op.MLA_ATTENTION] == ops[Op.MOE_ROUTER] == 1
    layers = {layer_of(n) for n in g.nodes} - {None}
    assert layers == {c.num_hidden_layers}
    assert [n for n, _ in g.inputs] == ["%ids", "%pos", "%slot", "%hidden"]


# -- declared states -------------------------------------------------------------------------

def test_llama_states() -> None:
    c, g = cfg("llama"), built("llama").main
    decls = {d.name: d for d in g.states()}
    kv = TensorType.make("bf16", S, c.num_key_value_heads, c.head_dim)
    want = {f"layers.{i}.self_attn.{x}" for i in range(c.num_hidden_layers) for x in "kv"}
    assert set(decls) == want
    assert all(d.kind is StateKind.TOKEN and d.type == kv for d in decls.values())


def test_glm5next_states() -> None:
    c, g = cfg("glm5next"), built("glm5next").main
    decls = {d.name: d for d in g.states()}
    assert len(decls) == len(g.states()), "state names must be unique"
    conv = TensorType.make("f32", 3 * c.linear_num_heads * c.linear_head_dim,
                           c.linear_conv_kernel_dim - 1)
    rec = TensorType.make("f32", c.linear_num_heads, c.linear_head_dim, c.linear_head_dim)
    want = {}
    for i, t in enumerate(c.layer_types):
        p = f"layers.{i}.self_attn."
        if t == KDA:
            want[p + "kda.conv"] = (StateKind.FIXED, conv)
            want[p + "kda.recurrent"] = (StateKind.FIXED, rec)
        else:
            want[p + "mla.latent"] = (StateKind.TOKEN, TensorType.make("bf16", S, c.kv_lora_rank))
            want[p + "indexer.keys"] = (StateKind.TOKEN,
                                        TensorType.make("bf16", S, 2 * c.index_head_dim))
            pools = sympy.floor(S / c.index_kpool)  # one row per pool
            want[p + "indexer.pooled"] = (StateKind.TOKEN,
                                          TensorType.make("bf16", pools, c.index_head_dim))
    assert {n: (d.kind, d.type) for n, d in decls.items()} == want


def test_token_states_lead_with_capacity() -> None:
    """Token state rows are positions (or pools of positions): its leading dim is S (or a
    function of it); fixed state is sized without S."""
    for name, g in all_graphs():
        for d in g.states():
            lead = d.type.shape[0]
            assert (S in lead.free_symbols) == (d.kind is StateKind.TOKEN), (name, d)
            if d.kind is StateKind.TOKEN:
                assert lead == S or d.name.endswith(".pooled"), (name, d)
            assert all(s.free_symbols <= {S} for s in d.type.shape), (name, d)


# -- parser errors ---------------------------------------------------------------------------

def _mutated(old: str, new: str) -> str:
    text = print_graph(built("llama").main)
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize("old, new, named", [
    ("= rmsnorm(", "= rmsnorn(", "rmsnorn"),  # unknown op
    ("bf16[256, 64]", "bf17[256, 64]", "bf17[256, 64]"),  # unknown dtype
    (": bf16[T, 64]", ": bf16[T, 64", "bf16[T, 64"),  # unclosed shape
    ("{eps=1e-05}", "{eps=1e-05x}", "1e-05x"),  # attribute value that is no literal
    ("{eps=1e-05}", "{eps=1e-05, epsilon=2.0}", "epsilon"),  # unknown attribute
    ("{head_dim=16, theta=10000.0", "{head_dim=16, theta=(1", "(1"),  # unbalanced value
])
def test_parse_error_names_text(old: str, new: str, named: str) -> None:
    with pytest.raises(IRError) as err:
        parse_graph(_mutated(old, new))
    assert named in str(err.value)


def test_parse_error_bad_attr_names_attribute() -> None:
    with pytest.raises(IRError, match=r"attribute 'eps'"):
        parse_graph(_mutated("{eps=1e-05}", "{eps=1e-05x}"))


def test_parse_error_garbled_line() -> None:
    with pytest.raises(IRError, match=r"cannot parse IR line: '%2 rmsnorm\(%1, "):
        parse_graph(_mutated("%2 = rmsnorm", "%2 rmsnorm"))


def test_parse_error_no_header() -> None:
    with pytest.raises(IRError, match="graph NAME"):
        parse_graph("\n".join(print_graph(built("llama").main).splitlines()[1:]))
