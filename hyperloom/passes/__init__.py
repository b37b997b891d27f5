"""Pure Graph -> Graph rewrites, in the order they run. Each returns the new graph and the
reasons it declined candidates; `run_pipeline` verifies the graph after every pass."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hyperloom.ir.graph import Graph
from hyperloom.ir.verifier import verify
from hyperloom.passes.epilogues import (
    fold_gated_norm, fuse_embedding, fuse_gated_norm, fuse_hc_post, fuse_kda_gate, fuse_residual,
    fuse_rope_attention, fuse_swiglu,
)
from hyperloom.passes.fuse_linears import (
    fold_norm_into_linear, fuse_head_mean, fuse_site_norm, merge_sibling_linears,
)
from hyperloom.passes.layouts import pack_expert_stacks, split_router_weights
from hyperloom.passes.rewrite import PassResult

Pass = Callable[[Graph], PassResult]

PIPELINE: tuple[Pass, ...] = (
    merge_sibling_linears,
    fold_norm_into_linear,
    fuse_head_mean,
    fuse_swiglu,
    fuse_site_norm,
    fuse_residual,
    fuse_hc_post,
    fuse_gated_norm,
    fold_gated_norm,
    fuse_kda_gate,
    fuse_rope_attention,
    fuse_embedding,
    pack_expert_stacks,
    split_router_weights,
)


@dataclass(frozen=True)
class Stage:
    name: str  # "input" or the pass that produced the graph
    graph: Graph
    declined: tuple[str, ...]


def run_pipeline(graph: Graph, passes: tuple[Pass, ...] = PIPELINE) -> tuple[Stage, ...]:
    """Every stage of the pipeline, the input first; the last stage's graph is the result."""
    stages = [Stage("input", verify(graph), ())]
    for p in passes:
        new, declined = p(stages[-1].graph)
        stages.append(Stage(p.__name__, verify(new), declined))
    return tuple(stages)


__all__ = ["PIPELINE", "Stage", "run_pipeline"]
