"""Reference semantics of every op: one torch function per op, computing in fp32 or fp64.
These define what the IR means; every compiled kernel is tested against them."""

from __future__ import annotations

from collections.abc import Callable

from hyperloom.ir.ops import Op
from hyperloom.ir.semantics import attention, dense, dsa, fused, hc, kda, moe
from hyperloom.ir.semantics.context import Ctx

EVAL: dict[Op, Callable] = {
    Op.EMBEDDING: dense.embedding, Op.CAST: dense.cast, Op.RMSNORM: dense.rmsnorm,
    Op.GATED_RMSNORM: dense.gated_rmsnorm, Op.LAYERNORM: dense.layernorm,
    Op.LINEAR: dense.linear, Op.ROPE: dense.rope, Op.SWIGLU: dense.swiglu, Op.ADD: dense.add,
    Op.CONCAT: dense.concat, Op.RESIDUAL_ADD: dense.add, Op.LM_HEAD: dense.lm_head,
    Op.ATTENTION: attention.attention, Op.MLA_ATTENTION: attention.mla_attention,
    Op.DSA_INDEX: dsa.dsa_index, Op.KDA_CONV: kda.kda_conv, Op.KDA_GATE: kda.kda_gate,
    Op.KDA: kda.kda, Op.MOE_ROUTER: moe.moe_router, Op.MOE_EXPERTS: moe.moe_experts,
    Op.HC_EXPAND: hc.hc_expand, Op.HC_PRE: hc.hc_pre, Op.HC_POST: hc.hc_post,
    Op.HC_HEAD_MEAN: hc.hc_head_mean, Op.NORM_LINEAR: fused.norm_linear,
    Op.SWIGLU_LINEAR: fused.swiglu_linear, Op.LINEAR_RESIDUAL: fused.linear_residual,
    Op.LINEAR_KDA_GATE: fused.linear_kda_gate, Op.LINEAR_GATED_NORM: fused.linear_gated_norm,
    Op.LINEAR_HC_POST: fused.linear_hc_post, Op.ROPE_ATTENTION: fused.rope_attention,
    Op.EMBED_STREAMS: fused.embed_streams,
}

__all__ = ["EVAL", "Ctx"]
