"""Reference semantics of the stateless dense ops: embedding, norms, linear, RoPE, SwiGLU, adds
and the LM head. Everything computes in the context's dtype (fp32 or fp64)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from hyperloom.ir import ops
from hyperloom.ir.semantics.context import Ctx


def embedding(ctx: Ctx, at: ops.NoAttrs, ids: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return w[ids.long()]


def cast(ctx: Ctx, at: ops.CastAttrs, x: torch.Tensor) -> torch.Tensor:
    return x  # storage precision is the compiled engine's business; the oracle keeps ctx.dtype


def rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rmsnorm(ctx: Ctx, at: ops.NormAttrs, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return rms(x, at.eps) * w


def gated_rmsnorm(ctx: Ctx, at: ops.GatedNormAttrs, x: torch.Tensor, gate: torch.Tensor,
                  w: torch.Tensor) -> torch.Tensor:
    t = x.shape[0]
    x, gate = x.view(t, -1, at.head_dim), gate.view(t, -1, at.head_dim)
    return (rms(x, at.eps) * w * torch.sigmoid(gate)).reshape(t, -1)


def layernorm(ctx: Ctx, at: ops.NormAttrs, x: torch.Tensor, w: torch.Tensor,
              b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), w, b, at.eps)


def linear(ctx: Ctx, at: ops.NoAttrs, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x @ w.T


def rope_inv_freq(at: ops.RopeAttrs, dtype: torch.dtype) -> torch.Tensor:
    d = at.head_dim
    inv = 1.0 / (at.theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    if at.kind == "llama3":
        lo_wave = at.original_max_position / at.low_freq_factor
        hi_wave = at.original_max_position / at.high_freq_factor
        wave = 2 * math.pi / inv
        scaled = torch.where(wave > lo_wave, inv / at.factor, inv)
        smooth = (at.original_max_position / wave - at.low_freq_factor) / (
            at.high_freq_factor - at.low_freq_factor)
        mid = (wave >= hi_wave) & (wave <= lo_wave)
        inv = torch.where(mid, (1 - smooth) * scaled / at.factor + smooth * scaled, scaled)
    return inv.to(dtype)


def rope(ctx: Ctx, at: ops.RopeAttrs, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    t, d = x.shape[0], at.head_dim
    ang = pos.to(ctx.dtype)[:, None] * rope_inv_freq(at, ctx.dtype).to(x.device)[None]  # [T, d/2]
    cos, sin = torch.cat([ang, ang], -1).cos()[:, None], torch.cat([ang, ang], -1).sin()[:, None]
    x = x.view(t, -1, d)
    rot = torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1)
    return (x * cos + rot * sin).reshape(t, -1)


def swiglu(ctx: Ctx, at: ops.SwiGLUAttrs, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    if at.limit is not None:
        gate, up = gate.clamp(max=at.limit), up.clamp(-at.limit, at.limit)
    return F.silu(gate) * up


def add(ctx: Ctx, at: ops.NoAttrs, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b


def concat(ctx: Ctx, at: ops.NoAttrs, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.cat([a, b], -1)


def lm_head(ctx: Ctx, at: ops.NoAttrs, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x @ w.T
