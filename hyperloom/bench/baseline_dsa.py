"""The baseline's DSA layer: the lightning indexer over a pooled-key cache (a pool's key is
recomputed by the rows that land in it, so a complete pool's is final) and MLA over the latent
cache, absorbed and gathered at the selected tokens for a few rows a sequence (decode), or
expanded through kv_b_proj with a mask for a prefill. Static shapes throughout: B slots of
capacity S, the step's rows B groups of T."""

from __future__ import annotations

import torch

from hyperloom.ir.ops import DSAIndexAttrs
from hyperloom.ir.semantics.dsa import select

ABSORB_ROWS = 16  # at most this many rows a sequence: absorbed attention over gathered rows


def _rows(pos: torch.Tensor, b: int, s: int) -> torch.Tensor:
    """Row positions [B * T] -> indices into a [B * S, ...] view of a per-slot cache."""
    return (torch.arange(b, device=pos.device)[:, None] * s + pos.view(b, -1)).flatten()


def index(qi, w, ki, gate, ape, pos, keys, pooled, *, heads, head_dim, topk, kpool,
          select_tail):
    """keys [B, S, 2d] ([key | gate] a token), pooled [B, S // P, d] -> token ids [B * T, W]."""
    b, cap = keys.shape[:2]
    keys.view(b * cap, -1).index_copy_(0, _rows(pos, b, cap),
                                       torch.cat([ki, gate], -1).to(keys.dtype))
    _pool(keys, pooled, pos.view(b, -1), ape, head_dim)
    t, n_pools = pos.numel() // b, pooled.shape[1]
    q = qi.float().view(b, t, heads, head_dim)
    logits = torch.relu(torch.einsum("bthd,bpd->bthp", q, pooled.float()) * head_dim ** -0.5)
    scores = torch.einsum("bth,bthp->btp", w.float().view(b, t, heads) * heads ** -0.5, logits)
    at = DSAIndexAttrs(heads, head_dim, topk, kpool, select_tail, "")
    return select(at, scores.view(b * t, n_pools), pos)


def _pool(keys, pooled, pos, ape, d):
    """Recompute the pool of every row (rows sharing a pool write equal keys); a row past the
    last whole pool of the capacity rewrites that pool's key unchanged."""
    b, n_pools = pooled.shape[:2]
    p = ape.shape[0]
    pool = pos // p  # [B, T]
    inside = pool < n_pools
    pool = pool.clamp(max=n_pools - 1)
    toks = pool[..., None] * p + torch.arange(p, device=pos.device)  # [B, T, P]
    kv = keys[torch.arange(b, device=pos.device)[:, None, None], toks].float()  # [B, T, P, 2d]
    key = (torch.softmax(kv[..., d:] + ape.float(), 2) * kv[..., :d]).sum(2)
    flat = pooled.view(b * n_pools, d)
    at = _rows(pool, b, n_pools)
    key = torch.where(inside.flatten()[:, None], key.flatten(0, 1), flat[at].float())
    flat.index_copy_(0, at, key.to(pooled.dtype))


def mla(q, c, wkvb, pos, latent, sel=None, *, heads, qk_head_dim, v_head_dim, scale, dtype):
    """latent [B, S, r]; q [B * T, H * dk] -> [B * T, H * dv] over the selected tokens (sel
    [B * T, W] token ids, -1 none) or, without sel, every earlier token."""
    b, cap, r = latent.shape
    latent.view(b * cap, r).index_copy_(0, _rows(pos, b, cap), c.to(latent.dtype))
    t = pos.numel() // b
    if sel is None:
        sel = torch.arange(cap, device=pos.device).expand(b * t, cap)
        sel = torch.where(sel <= pos[:, None], sel, -1)
    w = wkvb.view(heads, qk_head_dim + v_head_dim, r).to(latent.dtype)
    q = q.view(b, t, heads, qk_head_dim).to(latent.dtype)
    attend = _absorbed if t <= ABSORB_ROWS else _expanded
    o = attend(q, latent, w, sel.view(b, t, -1), qk_head_dim, scale)
    return o.reshape(b * t, -1).to(dtype)


def _absorbed(q, latent, w, sel, dk, scale):
    """q folded into the latent space, attention over the gathered latent rows, then W_v."""
    b = latent.shape[0]
    q_lat = torch.einsum("bthd,hdr->bthr", q, w[:, :dk])
    rows = latent[torch.arange(b, device=q.device)[:, None, None], sel.clamp(min=0)]  # [B,T,W,r]
    s = torch.einsum("bthr,btwr->bthw", q_lat, rows).float() * scale
    p = torch.softmax(s.masked_fill((sel < 0)[:, :, None], float("-inf")), -1).nan_to_num(0.0)
    o_lat = torch.einsum("bthw,btwr->bthr", p.to(rows.dtype), rows)
    return torch.einsum("bthr,hdr->bthd", o_lat, w[:, dk:])


def _expanded(q, latent, w, sel, dk, scale):
    """Keys and values for the whole cache through kv_b_proj; the selection as a mask."""
    b, cap, _ = latent.shape
    kv = torch.einsum("bsr,hdr->bhsd", latent, w)
    allowed = torch.zeros(*sel.shape[:2], cap + 1, dtype=torch.bool, device=q.device)
    allowed.scatter_(2, torch.where(sel >= 0, sel.long(), cap), True)
    o = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), kv[..., :dk], kv[..., dk:], attn_mask=allowed[:, None, :, :cap],
        scale=scale)
    return o.transpose(1, 2).nan_to_num(0.0)
