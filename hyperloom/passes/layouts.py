"""Weight layouts the kernels read best, derived once when weights are bound."""

from __future__ import annotations

import dataclasses

from hyperloom.ir.derive import derived_type
from hyperloom.ir.graph import Derived, Graph
from hyperloom.ir.ops import Op
from hyperloom.ir.types import DType
from hyperloom.passes.rewrite import PassResult, rebuild


def pack_expert_stacks(graph: Graph) -> PassResult:
    """Routed experts read their gate, up and down stacks packed ([E, K / R, N, R], `pack_k`):
    a grouped GEMM's K step of a column block is then one contiguous run of memory, not N rows
    of R values a row apart."""
    types, replace, derived = graph.value_types(), {}, {}
    for i, node in enumerate(graph.nodes):
        if node.op is not Op.MOE_EXPERTS or types[node.args[3]].rank != 3:
            continue
        packed = []
        for w in node.args[3:]:
            d = Derived(f"{w[1:]}~packed", derived_type("pack_k", [types[w]]), "pack_k", (w,))
            derived[d.name] = d
            packed.append("@" + d.name)
        replace[i] = dataclasses.replace(node, args=node.args[:3] + tuple(packed))
    return rebuild(graph, replace, set(), derived.values()), ()


def split_router_weights(graph: Graph) -> PassResult:
    """A router of bf16 rows reads its fp32 weight as three bf16 terms (`split_bf16`): each
    product stays exact in fp32 and the GEMM runs three bf16 MMAs on operands loaded as they
    are, where splitting W inside the kernel cost a conversion per element per row tile."""
    types, replace, derived = graph.value_types(), {}, {}
    for i, node in enumerate(graph.nodes):
        x, w = (types[a] for a in node.args[:2]) if node.op is Op.MOE_ROUTER else (None, None)
        if x is None or x.dtype is not DType.BF16 or w.rank != 2 or w.dtype is not DType.F32:
            continue
        name = node.args[1]
        d = Derived(f"{name[1:]}~bf16x3", derived_type("split_bf16", [w]), "split_bf16", (name,))
        derived[d.name] = d
        replace[i] = dataclasses.replace(node, args=(node.args[0], "@" + d.name) + node.args[2:])
    return rebuild(graph, replace, set(), derived.values()), ()
