"""The baseline's ops: plain torch, written the way a careful user writes a static-cache model
(no host syncs, static shapes, so torch.compile can capture it whole). Activations keep the IR's
declared dtypes (bf16 activations, fp32 norms and highway)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hyperloom.ir.ops import GatedNormAttrs
from hyperloom.ir.semantics import dense
from hyperloom.ir.semantics.hc import sinkhorn


def rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rmsnorm(x, w, *, eps, dtype):
    return (rms(x, eps) * w.float()).to(dtype)


def gated_rmsnorm(x, gate, w, *, eps, head_dim, dtype):
    """RMSNorm per head_dim group, times sigmoid(gate): the reference's, in fp32."""
    at = GatedNormAttrs(eps, head_dim)
    return dense.gated_rmsnorm(None, at, x.float(), gate.float(), w.float()).to(dtype)


def layernorm(x, w, b, *, eps, dtype):
    return F.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float(), eps).to(dtype)


def concat(a, b, *, dtype):
    return torch.cat([a, b], -1).to(dtype)


def linear(x, w, *, dtype):
    return F.linear(x.to(w.dtype), w).to(dtype)


def embedding(ids, w, *, dtype):
    return F.embedding(ids, w).to(dtype)


def cast(x, *, dtype):
    return x.to(dtype)


def rope(x, pos, cos, sin, *, head_dim, dtype):
    """cos / sin: [S, head_dim] tables (a buffer), gathered at the rows' positions."""
    t = x.shape[0]
    xf = x.float().view(t, -1, head_dim)
    c, s = cos[pos][:, None], sin[pos][:, None]
    rot = torch.cat([-xf[..., head_dim // 2:], xf[..., : head_dim // 2]], -1)
    return (xf * c + rot * s).reshape(t, -1).to(dtype)


def attention(q, k, v, pos, k_cache, v_cache, *, heads, kv_heads, head_dim, scale, dtype):
    """Static caches [B, S, kv_heads, d], a slot per sequence; the step's rows are B groups of
    T, group b sequence b's: write them at their positions, attend causally over the cache."""
    b, s = k_cache.shape[:2]
    t = q.shape[0] // b
    pos = pos.view(b, t)
    rows = (torch.arange(b, device=q.device)[:, None] * s + pos).flatten()  # into [B * S]
    for cache, x in ((k_cache, k), (v_cache, v)):
        cache.view(b * s, kv_heads, head_dim).index_copy_(
            0, rows, x.view(b * t, kv_heads, head_dim).to(cache.dtype))
    mask = torch.arange(s, device=q.device) <= pos[..., None]  # [B, T, S]
    o = F.scaled_dot_product_attention(
        q.view(b, t, heads, head_dim).transpose(1, 2).to(k_cache.dtype), k_cache.transpose(1, 2),
        v_cache.transpose(1, 2), attn_mask=mask[:, None], scale=scale, enable_gqa=True)
    return o.transpose(1, 2).reshape(b * t, heads * head_dim).to(dtype)


def swiglu(gate, up, *, limit, dtype):
    if limit is not None:
        gate, up = gate.clamp(max=limit), up.clamp(-limit, limit)
    return (F.silu(gate) * up).to(dtype)


def add(a, b, *, dtype):
    return (a + b).to(dtype)


def hc_expand(x, *, n, dtype):
    return x.to(dtype)[:, None, :].expand(-1, n, -1).contiguous()


def hc_pre(x, fn, base, scale, *, n, norm_eps, hc_eps, iters):
    t = x.shape[0]
    m = rms(x.reshape(t, -1), norm_eps) @ fn.float().T
    pre = torch.sigmoid(scale[0] * m[:, :n] + base[:n]) + hc_eps
    post = 2 * torch.sigmoid(scale[1] * m[:, n: 2 * n] + base[n: 2 * n])
    comb = sinkhorn((scale[2] * m[:, 2 * n:] + base[2 * n:]).view(t, n, n), hc_eps, iters)
    return (pre[:, :, None] * x).sum(1), post, comb


def hc_post(f, x, post, comb):
    return post[:, :, None] * f.float()[:, None, :] + torch.einsum("tij,tid->tjd", comb, x)


def hc_head_mean(x):
    return x.mean(1)


def lm_head(x, w):
    return F.linear(x.to(w.dtype), w).float()
