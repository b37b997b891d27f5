"""Reference semantics of the fused ops the passes introduce, composed from the unfused ones,
so the interpreter can run the IR after any pass."""

from __future__ import annotations

import torch

from hyperloom.ir import ops
from hyperloom.ir.semantics import attention, dense, hc, kda
from hyperloom.ir.semantics.context import Ctx


def _gemm_in(x: torch.Tensor, eps: float | None) -> torch.Tensor:
    if x.dim() == 3:
        x = x.mean(1)  # hc_head_mean folded into the prologue
    return x if eps is None else dense.rms(x, eps)


def norm_linear(ctx: Ctx, at: ops.NormLinearAttrs, x: torch.Tensor,
                w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple((_gemm_in(x, at.eps) @ w.T).split(list(at.splits), -1))


def swiglu_linear(ctx: Ctx, at: ops.SwiGLULinearAttrs, x: torch.Tensor,
                  w: torch.Tensor) -> torch.Tensor:
    gate, up = (_gemm_in(x, at.eps) @ w.T).chunk(2, -1)
    return dense.swiglu(ctx, ops.SwiGLUAttrs(at.limit), gate, up)


def linear_residual(ctx: Ctx, at: ops.EpilogueLinearAttrs, x: torch.Tensor, w: torch.Tensor,
                    stream: torch.Tensor, *addend: torch.Tensor) -> torch.Tensor:
    f = _gemm_in(x, at.eps) @ w.T
    return stream + (f + addend[0] if addend else f)


def linear_hc_post(ctx: Ctx, at: ops.EpilogueLinearAttrs, x: torch.Tensor, w: torch.Tensor,
                   streams, post: torch.Tensor, comb: torch.Tensor,
                   *extra: torch.Tensor) -> torch.Tensor:
    """extra: the gated norm's gate and weight (at.group), or an addend."""
    if at.group:
        x = dense.gated_rmsnorm(ctx, ops.GatedNormAttrs(at.eps, at.group), x, *extra)
    else:
        x = _gemm_in(x, at.eps)
    f = x @ w.T
    if extra and not at.group:
        f = f + extra[0]
    return hc.hc_post(ctx, at, f, streams, post, comb)


def linear_kda_gate(ctx: Ctx, at: ops.KDAGateAttrs, x: torch.Tensor, w: torch.Tensor,
                    dt_bias: torch.Tensor, a_log: torch.Tensor) -> torch.Tensor:
    """f_b's projection with KDA's decay gate on its fp32 result (f never rounded)."""
    return kda.kda_gate(ctx, at, x @ w.T, dt_bias, a_log)


def linear_gated_norm(ctx: Ctx, at: ops.GatedNormAttrs, x: torch.Tensor, w: torch.Tensor,
                      normed: torch.Tensor, nw: torch.Tensor) -> torch.Tensor:
    """g_b's projection as the gate of KDA's output norm over `normed` (the gate never rounded)."""
    return dense.gated_rmsnorm(ctx, at, normed, x @ w.T, nw)


def rope_attention(ctx: Ctx, at: ops.RopeAttentionAttrs, q, k, v, slot, pos) -> torch.Tensor:
    rope = at.rope()
    q, k = dense.rope(ctx, rope, q, pos), dense.rope(ctx, rope, k, pos)
    return attention.attention(ctx, at.attention(), q, k, v, slot, pos)


def embed_streams(ctx: Ctx, at: ops.HCExpandAttrs, ids: torch.Tensor,
                  w: torch.Tensor) -> torch.Tensor:
    x = dense.embedding(ctx, at, ids, w)
    return x if at.n == 1 else hc.hc_expand(ctx, at, x)
