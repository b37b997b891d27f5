"""Reference semantics of routed MoE (SPEC "MLP"): sigmoid router with grouped top-k on the
bias-corrected scores, and the weighted sum of the chosen experts' clamped SwiGLU."""

from __future__ import annotations

import torch

from hyperloom.ir import ops
from hyperloom.ir.semantics.context import Ctx
from hyperloom.ir.semantics.dense import swiglu


def moe_router(ctx: Ctx, at: ops.RouterAttrs, x: torch.Tensor, w: torch.Tensor,
               bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    t, e = x.shape[0], w.shape[0]
    s = torch.sigmoid(x @ w.T)  # [T, E]
    choice = s + bias
    groups = choice.view(t, at.n_group, e // at.n_group)
    group_score = groups.topk(min(2, groups.shape[-1]), -1).values.sum(-1)  # [T, G]
    keep = torch.zeros_like(group_score, dtype=torch.bool)
    keep.scatter_(1, group_score.topk(at.topk_group, -1).indices, True)
    choice = choice.masked_fill(~keep.repeat_interleave(e // at.n_group, 1), float("-inf"))
    ids = choice.topk(at.top_k, -1).indices
    weights = s.gather(1, ids)
    if at.norm_topk_prob:
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
    return weights * at.scaling, ids.to(torch.int32)


def moe_experts(ctx: Ctx, at: ops.ExpertsAttrs, x: torch.Tensor, weights: torch.Tensor,
                ids: torch.Tensor, wg: torch.Tensor, wu: torch.Tensor,
                wd: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    lim = ops.SwiGLUAttrs(at.limit)
    for e in ids.unique().tolist():
        rows, k = (ids == e).nonzero(as_tuple=True)
        h = swiglu(ctx, lim, x[rows] @ wg[e].T, x[rows] @ wu[e].T) @ wd[e].T
        out.index_add_(0, rows, h * weights[rows, k][:, None])
    return out
