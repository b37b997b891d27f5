"""Reference semantics of routed MoE (SPEC "MLP"): sigmoid router with grouped top-k on the
bias-corrected scores, and the weighted sum of the chosen experts' clamped SwiGLU.

Ties in a top-k (groups or experts) go to the lowest index, in descending-value order: a stable
sort, not torch.topk, whose tie order is unspecified (its CPU quickselect picks neither the
lowest nor the highest index); the router kernel implements the same rule."""

from __future__ import annotations

import torch

from hyperloom.ir import ops
from hyperloom.ir.derive import join_bf16, unpack_k
from hyperloom.ir.semantics.context import Ctx
from hyperloom.ir.semantics.dense import swiglu


def stable_top(x: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k largest along the last dim, largest first, ties to the lowest index."""
    return x.sort(dim=-1, descending=True, stable=True).indices[..., :k]


def moe_router(ctx: Ctx, at: ops.RouterAttrs, x: torch.Tensor, w: torch.Tensor,
               bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    w = join_bf16(w).to(x.dtype)  # three bf16 terms (split_bf16) read as the fp32 weight
    t, e = x.shape[0], w.shape[0]
    s = torch.sigmoid(x @ w.T)  # [T, E]
    choice = s + bias
    groups = choice.view(t, at.n_group, e // at.n_group)
    group_score = groups.topk(min(2, groups.shape[-1]), -1).values.sum(-1)  # [T, G]
    keep = torch.zeros_like(group_score, dtype=torch.bool)
    keep.scatter_(1, stable_top(group_score, at.topk_group), True)
    choice = choice.masked_fill(~keep.repeat_interleave(e // at.n_group, 1), float("-inf"))
    ids = stable_top(choice, at.top_k)
    weights = s.gather(1, ids)
    if at.norm_topk_prob:
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
    return weights * at.scaling, ids.to(torch.int32)


def moe_experts(ctx: Ctx, at: ops.ExpertsAttrs, x: torch.Tensor, weights: torch.Tensor,
                ids: torch.Tensor, wg: torch.Tensor, wu: torch.Tensor,
                wd: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    lim = ops.SwiGLUAttrs(at.limit)
    wg, wu, wd = (unpack_k(w) for w in (wg, wu, wd))  # packed stacks read as [E, N, K]
    for e in ids.unique().tolist():
        rows, k = (ids == e).nonzero(as_tuple=True)
        h = swiglu(ctx, lim, x[rows] @ wg[e].T, x[rows] @ wu[e].T) @ wd[e].T
        out.index_add_(0, rows, h * weights[rows, k][:, None])
    return out
