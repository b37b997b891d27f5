"""Reference semantics of the mHC hyper-connection ops (SPEC "mHC")."""

from __future__ import annotations

import torch

from hyperloom.ir import ops
from hyperloom.ir.semantics.context import Ctx
from hyperloom.ir.semantics.dense import rms


def hc_expand(ctx: Ctx, at: ops.HCExpandAttrs, x: torch.Tensor) -> torch.Tensor:
    return x[:, None, :].expand(-1, at.n, -1).contiguous()  # [T, n, D]


def sinkhorn(logits: torch.Tensor, eps: float, iters: int) -> torch.Tensor:
    """Row softmax + eps, then column, then (iters - 1) rounds of rows-then-columns."""
    c = torch.softmax(logits, -1) + eps
    c = c / (c.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        c = c / (c.sum(-1, keepdim=True) + eps)
        c = c / (c.sum(-2, keepdim=True) + eps)
    return c


def hc_pre(ctx: Ctx, at: ops.HCPreAttrs, x: torch.Tensor, fn: torch.Tensor, base: torch.Tensor,
           scale: torch.Tensor, w: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    t, n = x.shape[0], at.n
    m = rms(x.reshape(t, -1), at.norm_eps) @ fn.T  # [T, (2+n)*n]
    pre = torch.sigmoid(scale[0] * m[:, :n] + base[:n]) + at.hc_eps
    post = 2 * torch.sigmoid(scale[1] * m[:, n: 2 * n] + base[n: 2 * n])
    comb = (scale[2] * m[:, 2 * n:] + base[2 * n:]).view(t, n, n)
    comb = sinkhorn(comb, at.hc_eps, at.iters)
    y = (pre[:, :, None] * x).sum(1)  # [T, D]
    if at.out_eps is not None:  # the site norm (times its weight w when not folded away)
        y = rms(y, at.out_eps) if w is None else rms(y, at.out_eps) * w
    return y, post, comb


def hc_post(ctx: Ctx, at: ops.NoAttrs, f: torch.Tensor, x: torch.Tensor, post: torch.Tensor,
            comb: torch.Tensor) -> torch.Tensor:
    # X_new[j] = post[j] * F + sum_i comb[i, j] * X[i]
    return post[:, :, None] * f[:, None, :] + torch.einsum("tij,tid->tjd", comb, x)


def hc_head_mean(ctx: Ctx, at: ops.NoAttrs, x: torch.Tensor) -> torch.Tensor:
    return x.mean(1)
