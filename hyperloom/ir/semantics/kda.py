"""Reference semantics of KDA, Kimi delta attention (SPEC "KDA"): the causal conv window, the
decay gate, and the recurrence in its exact per-token form."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hyperloom.ir import ops
from hyperloom.ir.semantics.context import Ctx


def kda_conv(ctx: Ctx, at: ops.KDAConvAttrs, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor, slot: torch.Tensor,
             pos: torch.Tensor) -> tuple[torch.Tensor, ...]:
    window = ctx.state[at.state + ".conv"]  # [slots, 3C, K-1]: the last K-1 inputs
    w = torch.cat([wq, wk, wv], 0)[:, 0, :]  # [3C, K]
    x = torch.cat([q, k, v], -1)  # [T, 3C]
    out = torch.empty_like(x)
    for seg in ctx.segments:
        r = slice(seg.start, seg.stop)
        ext = torch.cat([window[seg.slot].T, x[r]], 0)  # [K-1+n, 3C]
        taps = ext.unfold(0, at.kernel, 1)  # [n, 3C, K]
        out[r] = F.silu((taps * w[None]).sum(-1))
        window[seg.slot] = ext[-(at.kernel - 1):].T
    return tuple(out.chunk(3, -1))


def kda_gate(ctx: Ctx, at: ops.KDAGateAttrs, f: torch.Tensor, dt_bias: torch.Tensor,
             a_log: torch.Tensor) -> torch.Tensor:
    t = f.shape[0]
    g = (f + dt_bias).view(t, at.heads, at.head_dim)
    rate = a_log.exp()[None, :, None]
    if at.lower_bound is not None:
        g = at.lower_bound * torch.sigmoid(rate * g)
    else:
        g = -rate * F.softplus(g)
    return g.reshape(t, -1)


def l2norm(x: torch.Tensor) -> torch.Tensor:
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def kda(ctx: Ctx, at: ops.KDAAttrs, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
        g: torch.Tensor, b: torch.Tensor, slot: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    state = ctx.state[at.state + ".recurrent"]  # [slots, H, dv, dk]: each head's S^T
    t, h, d = q.shape[0], at.heads, at.head_dim
    q = l2norm(q.view(t, h, d)) * d ** -0.5
    k, v, g = l2norm(k.view(t, h, d)), v.view(t, h, d), g.view(t, h, d)
    beta = torch.sigmoid(b)  # [T, H]
    out = torch.empty_like(v)
    for seg in ctx.segments:
        s = state[seg.slot].transpose(-1, -2)  # [H, dk, dv]
        for i in range(seg.start, seg.stop):
            s = s * g[i].exp()[:, :, None]
            delta = beta[i][:, None] * (v[i] - torch.einsum("hkv,hk->hv", s, k[i]))
            s = s + k[i][:, :, None] * delta[:, None, :]
            out[i] = torch.einsum("hkv,hk->hv", s, q[i])
        state[seg.slot] = s.transpose(-1, -2)
    return out.reshape(t, -1)
