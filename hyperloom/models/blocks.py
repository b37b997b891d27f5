"""Blocks shared by the model specs: each takes the normed block input and returns the block
output, declaring its parameters under their checkpoint names below `prefix`."""

from __future__ import annotations

from hyperloom.ir import ops
from hyperloom.ir.builder import GraphBuilder
from hyperloom.ir.ops import Op
from hyperloom.ir.types import DType

F32 = DType.F32


def swiglu_mlp(b: GraphBuilder, prefix: str, x: str, inter: int, limit: float | None) -> str:
    d = b.type_of(x).shape[1]
    gate = b.linear(x, prefix + "gate_proj.weight", inter)
    up = b.linear(x, prefix + "up_proj.weight", inter)
    h = b.one(Op.SWIGLU, gate, up, attrs=ops.SwiGLUAttrs(limit))
    return b.linear(h, prefix + "down_proj.weight", d)


def gqa_attention(b: GraphBuilder, prefix: str, x: str, rows: tuple[str, str, str],
                  attn: ops.AttentionAttrs, rope: ops.RopeAttrs) -> str:
    _, pos, slot = rows
    d = b.type_of(x).shape[1]
    q = b.linear(x, prefix + "q_proj.weight", attn.heads * attn.head_dim)
    k = b.linear(x, prefix + "k_proj.weight", attn.kv_heads * attn.head_dim)
    v = b.linear(x, prefix + "v_proj.weight", attn.kv_heads * attn.head_dim)
    q = b.one(Op.ROPE, q, pos, attrs=rope)
    k = b.one(Op.ROPE, k, pos, attrs=rope)
    o = b.one(Op.ATTENTION, q, k, v, slot, pos, attrs=attn)
    return b.linear(o, prefix + "o_proj.weight", d)


def kda_block(b: GraphBuilder, prefix: str, x: str, rows: tuple[str, str, str], heads: int,
              head_dim: int, kernel: int, lower_bound: float | None, eps: float) -> str:
    _, pos, slot = rows
    d, c = b.type_of(x).shape[1], heads * head_dim
    q, k, v = (b.linear(x, f"{prefix}{n}_proj.weight", c) for n in "qkv")
    convs = tuple(b.param(f"{prefix}{n}_conv1d.weight", c, 1, kernel, dtype=F32) for n in "qkv")
    q, k, v = b.emit(Op.KDA_CONV, (q, k, v, *convs, slot, pos),
                     ops.KDAConvAttrs(kernel=kernel, state=prefix + "kda"))
    f = b.linear(b.linear(x, prefix + "f_a_proj.weight", head_dim), prefix + "f_b_proj.weight", c)
    g = b.one(Op.KDA_GATE, f, b.param(prefix + "dt_bias", c, dtype=F32),
              b.param(prefix + "A_log", heads, dtype=F32),
              attrs=ops.KDAGateAttrs(heads, head_dim, lower_bound))
    beta = b.linear(x, prefix + "b_proj.weight", heads)
    o = b.one(Op.KDA, q, k, v, g, beta, slot, pos,
              attrs=ops.KDAAttrs(heads, head_dim, state=prefix + "kda"))
    gate = b.linear(b.linear(x, prefix + "g_a_proj.weight", head_dim),
                    prefix + "g_b_proj.weight", c)
    o = b.one(Op.GATED_RMSNORM, o, gate, b.param(prefix + "o_norm.weight", head_dim),
              attrs=ops.GatedNormAttrs(eps, head_dim))
    return b.linear(o, prefix + "o_proj.weight", d)


def dsa_indexer(b: GraphBuilder, prefix: str, x: str, q_resid: str, rows: tuple[str, str, str],
                at: ops.DSAIndexAttrs) -> str:
    _, pos, slot = rows
    qi = b.linear(q_resid, prefix + "wq_b.weight", at.heads * at.head_dim)
    ki = b.linear(x, prefix + "wk.weight", at.head_dim)
    ki = b.one(Op.LAYERNORM, ki, b.param(prefix + "k_norm.weight", at.head_dim),
               b.param(prefix + "k_norm.bias", at.head_dim), attrs=ops.NormAttrs(1e-6))
    gate = b.linear(x, prefix + "index_kpool_compress_gate", at.head_dim)
    w = b.linear(x, prefix + "weights_proj.weight", at.heads)
    ape = b.param(prefix + "index_kpool_compress_ape", at.kpool, at.head_dim)
    return b.one(Op.DSA_INDEX, qi, w, ki, gate, ape, slot, pos, attrs=at)


def mla_block(b: GraphBuilder, prefix: str, x: str, rows: tuple[str, str, str], at: ops.MLAAttrs,
              q_lora: int, eps: float, index: ops.DSAIndexAttrs | str | None) -> tuple[str, str]:
    """MLA (no RoPE) with the DSA indexer. `index` is the indexer's attrs for a layer that runs
    its own, or the selection of an earlier layer to reuse. Returns (output, selection)."""
    _, pos, slot = rows
    d = b.type_of(x).shape[1]
    qa = b.rmsnorm(b.linear(x, prefix + "q_a_proj.weight", q_lora), prefix + "q_a_layernorm.weight",
                   eps)
    q = b.linear(qa, prefix + "q_b_proj.weight", at.heads * at.qk_head_dim)
    c = b.linear(x, prefix + "kv_a_proj_with_mqa.weight", at.kv_lora_rank)
    c = b.rmsnorm(c, prefix + "kv_a_layernorm.weight", eps)
    if isinstance(index, ops.DSAIndexAttrs):
        index = dsa_indexer(b, prefix + "indexer.", x, qa, rows, index)
    wkvb = b.param(prefix + "kv_b_proj.weight", at.heads * (at.qk_head_dim + at.v_head_dim),
                   at.kv_lora_rank)
    args = (q, c, wkvb, slot, pos) + ((index,) if index else ())
    o = b.one(Op.MLA_ATTENTION, *args, attrs=at)
    return b.linear(o, prefix + "o_proj.weight", d), index or ""


def moe_block(b: GraphBuilder, prefix: str, x: str, experts: int, inter: int, shared_inter: int,
              router: ops.RouterAttrs, limit: float | None) -> str:
    d = b.type_of(x).shape[1]
    w, ids = b.emit(Op.MOE_ROUTER, (x, b.param(prefix + "gate.weight", experts, d, dtype=F32),
                                    b.param(prefix + "gate.e_score_correction_bias", experts,
                                            dtype=F32)), router)
    stack = prefix + "experts.*."
    routed = b.one(Op.MOE_EXPERTS, x, w, ids,
                   b.param(stack + "gate_proj.weight", experts, inter, d),
                   b.param(stack + "up_proj.weight", experts, inter, d),
                   b.param(stack + "down_proj.weight", experts, d, inter),
                   attrs=ops.ExpertsAttrs(limit))
    if shared_inter == 0:
        return routed
    return b.one(Op.ADD, routed, swiglu_mlp(b, prefix + "shared_experts.", x, shared_inter, limit))


def lm_head(b: GraphBuilder, h: str, norm: str, head: str, vocab: int,
            eps: float) -> tuple[str, str]:
    """Final norm + LM head; returns (logits, normed hidden)."""
    h = b.rmsnorm(h, norm, eps)
    d = b.type_of(h).shape[1]
    return b.one(Op.LM_HEAD, h, b.param(head, vocab, d)), h
