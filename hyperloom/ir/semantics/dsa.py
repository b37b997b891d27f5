"""Reference semantics of the DSA lightning indexer with k-pool compression (SPEC "DSA").

Pools are P consecutive tokens from the sequence start. A complete pool's key is a per-channel
softmax(gate + ape)-weighted sum of its tokens' keys; pools whose last token is visible compete,
the top topk/P are expanded to token ids, and the visible incomplete tail is appended. Tied
scores (relu makes exact zeros common) go to the lowest pool, as in the router and the kernel."""

from __future__ import annotations

import torch

from hyperloom.ir import ops
from hyperloom.ir.semantics.context import Ctx
from hyperloom.ir.semantics.moe import stable_top


def pool_keys(keys: torch.Tensor, gate: torch.Tensor, ape: torch.Tensor) -> torch.Tensor:
    """keys, gate [L, d] of cached tokens -> [L // P, d] keys of the complete pools."""
    p, d = ape.shape
    n = keys.shape[0] // p
    k, g = keys[: n * p].view(n, p, d), gate[: n * p].view(n, p, d)
    return (torch.softmax(g + ape[None], dim=1) * k).sum(1)


def pool_scores(at: ops.DSAIndexAttrs, qi: torch.Tensor, w: torch.Tensor, cached: torch.Tensor,
                ape: torch.Tensor) -> torch.Tensor:
    """qi [n, H*d], w [n, H] of n rows over cached [L, 2d] ([key | gate] per token) -> scores
    [n, L // P] of the complete pools: sum_h w_h H^-1/2 relu(q_h . key d^-1/2)."""
    d, h = at.head_dim, at.heads
    keys = pool_keys(cached[:, :d], cached[:, d:], ape)  # [pools, d]
    logits = torch.relu(torch.einsum("nhd,pd->nhp", qi.view(-1, h, d), keys) * d ** -0.5)
    return torch.einsum("nh,nhp->np", w * h ** -0.5, logits)


def select(at: ops.DSAIndexAttrs, scores: torch.Tensor, qpos: torch.Tensor) -> torch.Tensor:
    """scores [n, pools] for rows at positions qpos -> token ids [n, width] (-1 padded)."""
    p, n, pools = at.kpool, scores.shape[0], scores.shape[1]
    pool_end = torch.arange(pools, device=scores.device) * p + p - 1
    visible = pool_end[None, :] <= qpos[:, None]
    out = torch.full((n, at.width), -1, dtype=torch.int32, device=scores.device)
    k = min(at.topk // p, pools)
    if k:
        masked = scores.masked_fill(~visible, float("-inf"))
        top = stable_top(masked, k)  # [n, k]
        ok = visible.gather(1, top)
        toks = top[:, :, None] * p + torch.arange(p, device=scores.device)
        toks = toks.masked_fill(~ok[:, :, None], -1).flatten(1)
        out[:, : k * p] = toks.to(torch.int32)
    if at.select_tail and p > 1:
        count = (qpos + 1) % p
        start = qpos + 1 - count
        off = torch.arange(p - 1, device=scores.device)
        tail = torch.where(off[None] < count[:, None], start[:, None] + off[None], -1)
        out[:, at.topk:] = tail.to(torch.int32)
    return out


def dsa_index(ctx: Ctx, at: ops.DSAIndexAttrs, qi: torch.Tensor, w: torch.Tensor,
              ki: torch.Tensor, gate: torch.Tensor, ape: torch.Tensor, slot: torch.Tensor,
              pos: torch.Tensor) -> torch.Tensor:
    cache = ctx.state[at.state + ".keys"]
    out = torch.empty(qi.shape[0], at.width, dtype=torch.int32, device=qi.device)
    for seg in ctx.segments:
        r = slice(seg.start, seg.stop)
        cache[seg.slot, seg.pos: seg.end_pos] = torch.cat([ki[r], gate[r]], -1)
        scores = pool_scores(at, qi[r], w[r], cache[seg.slot, : seg.end_pos], ape)
        qpos = torch.arange(seg.pos, seg.end_pos, device=qi.device)
        out[r] = select(at, scores, qpos)
    return out
