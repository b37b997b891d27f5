"""Reference semantics of cached attention: causal GQA over a KV cache, and MLA over a latent
cache (optionally restricted to the tokens a DSA indexer selected)."""

from __future__ import annotations

import torch

from hyperloom.ir import ops
from hyperloom.ir.semantics.context import Ctx
from hyperloom.ir.state import Segment


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor,
            scale: float) -> torch.Tensor:
    """q [n, H, dk], k [L, H, dk], v [L, H, dv], allowed [n, L] -> [n, H, dv]."""
    s = torch.einsum("nhd,lhd->hnl", q, k) * scale
    s = s.masked_fill(~allowed[None], float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)  # a row that may see nothing attends to nothing
    return torch.einsum("hnl,lhd->nhd", p, v)


def causal(seg: Segment, device: torch.device) -> torch.Tensor:
    """allowed[i, j]: key position j visible to the segment's row i."""
    qpos = torch.arange(seg.pos, seg.end_pos, device=device)
    return torch.arange(seg.end_pos, device=device)[None, :] <= qpos[:, None]


def attention(ctx: Ctx, at: ops.AttentionAttrs, q: torch.Tensor, k: torch.Tensor,
              v: torch.Tensor, slot: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    kc, vc = ctx.state[at.state + ".k"], ctx.state[at.state + ".v"]
    out = torch.empty_like(q)
    rep = at.heads // at.kv_heads
    for seg in ctx.segments:
        r = slice(seg.start, seg.stop)
        kc[seg.slot, seg.pos: seg.end_pos] = k[r].view(-1, at.kv_heads, at.head_dim)
        vc[seg.slot, seg.pos: seg.end_pos] = v[r].view(-1, at.kv_heads, at.head_dim)
        keys = kc[seg.slot, : seg.end_pos].repeat_interleave(rep, 1)
        vals = vc[seg.slot, : seg.end_pos].repeat_interleave(rep, 1)
        o = _attend(q[r].view(-1, at.heads, at.head_dim), keys, vals, causal(seg, q.device),
                    at.scale)
        out[r] = o.reshape(o.shape[0], -1)
    return out


def selected(index: torch.Tensor, length: int) -> torch.Tensor:
    """index [n, W] token ids (-1 = none) -> allowed [n, length]."""
    allowed = torch.zeros(index.shape[0], length + 1, dtype=torch.bool, device=index.device)
    idx = torch.where(index >= 0, index.long(), length)
    allowed.scatter_(1, idx, True)
    return allowed[:, :length]


def mla_attention(ctx: Ctx, at: ops.MLAAttrs, q: torch.Tensor, c: torch.Tensor,
                  wkvb: torch.Tensor, slot: torch.Tensor, pos: torch.Tensor,
                  index: torch.Tensor | None = None) -> torch.Tensor:
    cache = ctx.state[at.state + ".latent"]
    h, dk, dv = at.heads, at.qk_head_dim, at.v_head_dim
    out = q.new_empty(q.shape[0], h * dv)
    for seg in ctx.segments:
        r = slice(seg.start, seg.stop)
        cache[seg.slot, seg.pos: seg.end_pos] = c[r]
        kv = (cache[seg.slot, : seg.end_pos] @ wkvb.T).view(seg.end_pos, h, dk + dv)
        allowed = causal(seg, q.device) if index is None else selected(index[r], seg.end_pos)
        o = _attend(q[r].view(-1, h, dk), kv[..., :dk], kv[..., dk:], allowed, at.scale)
        out[r] = o.reshape(o.shape[0], -1)
    return out
