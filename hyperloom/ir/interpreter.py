"""The reference interpreter: runs any graph eagerly with torch, node by node, in fp32 or fp64,
reading and writing per-sequence state through a StateStore. It is the oracle of every test."""

from __future__ import annotations

import torch

from hyperloom.errors import IRError
from hyperloom.ir.graph import Graph
from hyperloom.ir.printer import print_node
from hyperloom.ir.semantics import EVAL, Ctx
from hyperloom.ir.state import StateStore, segments


def run_graph(graph: Graph, weights: dict[str, torch.Tensor], inputs: dict[str, torch.Tensor],
              state: StateStore | None, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Execute `graph` on one step. `inputs` maps input names (without %) to tensors; floats are
    computed in `dtype`. Returns the graph's outputs by label."""
    env: dict[str, torch.Tensor] = {}
    for name, ty in graph.inputs:
        t = inputs[name[1:]]
        env[name] = t.to(dtype) if ty.dtype.is_float else t
    ctx = Ctx(dtype, state, segments(inputs["slot"], inputs["pos"]))
    for node in graph.nodes:
        args = [weights[a[1:]] if a.startswith("@") else env[a] for a in node.args]
        try:
            res = EVAL[node.op](ctx, node.attrs, *args)
        except (RuntimeError, IndexError) as e:
            raise IRError(f"reference interpreter failed at {print_node(node)}: {e}") from e
        env.update(zip(node.outs, res if isinstance(res, tuple) else (res,)))
    return {label: env[v] for label, v in graph.outputs}
