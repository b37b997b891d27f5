"""Emitter specs from IR: every static size and option a kernel bakes in, read off the fused
node and its operand types (no tensors needed, so plans and sources can be dumped offline)."""

from __future__ import annotations

from hyperloom.config import CONFIG
from hyperloom.codegen.emitters import (
    elementwise,
    embedding,
    hc_post,
    hc_pre,
    kda,
    kda_conv,
    kda_gate,
    matmul,
    mla,
    moe_experts,
    moe_router,
    norm,
)
from hyperloom.codegen.emitters.attention_spec import AttentionSpec
from hyperloom.codegen.emitters.dsa_spec import DSASpec
from hyperloom.errors import CodegenError
from hyperloom.ir.derive import unpacked_shape
from hyperloom.ir.graph import Node
from hyperloom.ir.ops import Op, addend_of


def matmul_spec(node: Node, types: dict) -> matmul.MatmulSpec:
    at, op = node.attrs, node.op
    x, w = types[node.args[0]], types[node.args[1]]
    eps, group = getattr(at, "eps", None), getattr(at, "group", 0)
    prologue = "none" if eps is None else ("mean_rmsnorm" if x.rank == 3 else "rmsnorm")
    prologue = "gated_rmsnorm" if group else prologue
    if op is Op.LINEAR_GATED_NORM:  # its attrs are the epilogue norm's
        prologue, group = "none", at.head_dim
    epilogue = {Op.SWIGLU_LINEAR: "swiglu", Op.LINEAR_RESIDUAL: "residual",
                Op.LINEAR_HC_POST: "hc_post", Op.LINEAR_KDA_GATE: "kda_gate",
                Op.LINEAR_GATED_NORM: "gated_norm"}.get(op, "store")
    hc = int(node.types[0].shape[1]) if op is Op.LINEAR_HC_POST else 1
    gate = kda_gate_spec(node, types) if op is Op.LINEAR_KDA_GATE else None
    addend = addend_of(node) is not None
    return matmul.MatmulSpec(k=int(w.shape[1]), n=int(w.shape[0]), prologue=prologue,
                             eps=eps or 1e-6, streams=int(x.shape[1]) if x.rank == 3 else 1,
                             epilogue=epilogue, limit=getattr(at, "limit", None), hc=hc,
                             group=group, gate=gate, addend=addend)


def hc_pre_spec(node: Node, types: dict) -> hc_pre.HCPreSpec:
    at = node.attrs
    return hc_pre.HCPreSpec(at.n, int(node.types[0].shape[1]), at.norm_eps, at.hc_eps, at.iters,
                            at.out_eps, out_weight=len(node.args) == 5)


def hc_post_spec(node: Node, types: dict) -> hc_post.HCPostSpec:
    n, d = (int(s) for s in node.types[0].shape[1:])
    return hc_post.HCPostSpec(n, d)


def elementwise_spec(node: Node, types: dict) -> elementwise.ElementwiseSpec:
    out = node.types[0]
    width = 1
    for dim in out.shape[1:]:
        width *= int(dim)
    if node.op is Op.HC_HEAD_MEAN:
        return elementwise.ElementwiseSpec("head_mean", width, int(types[node.args[0]].shape[1]))
    if node.op is Op.CONCAT:
        return elementwise.ElementwiseSpec("concat", width,
                                           split=int(types[node.args[0]].shape[-1]))
    return elementwise.ElementwiseSpec("cast" if node.op is Op.CAST else "add", width)


def embedding_spec(node: Node, types: dict) -> embedding.EmbeddingSpec:
    streams = node.attrs.n if node.op is Op.EMBED_STREAMS else 1
    return embedding.EmbeddingSpec(int(node.types[0].shape[-1]), streams,
                                   node.op is Op.EMBED_STREAMS)


def attention_spec(node: Node, types: dict) -> AttentionSpec:
    at = node.attrs
    # ROPE_ATTENTION's KV cache is paged whenever the runtime pages (same knob, same value)
    return AttentionSpec(at.heads, at.kv_heads, at.head_dim, at.scale, rope=True,
                                   block_size=CONFIG.kv_block_size)


def kda_spec(node: Node, types: dict) -> kda.KDASpec:
    return kda.KDASpec(node.attrs.heads, node.attrs.head_dim)


def kda_conv_spec(node: Node, types: dict) -> kda_conv.ConvSpec:
    return kda_conv.ConvSpec(int(types[node.args[0]].shape[1]), node.attrs.kernel)


def kda_gate_spec(node: Node, types: dict) -> kda_gate.KDAGateSpec:
    at = node.attrs
    return kda_gate.KDAGateSpec(at.heads, at.head_dim, at.lower_bound)


def norm_spec(node: Node, types: dict) -> norm.NormSpec:
    x = node.types[0]
    width = 1
    for dim in x.shape[1:]:
        width *= int(dim)
    group = node.attrs.head_dim if node.op is Op.GATED_RMSNORM else int(x.shape[-1])
    return norm.NormSpec(node.op.value, width, group, node.attrs.eps)


def dsa_spec(node: Node, types: dict) -> DSASpec:
    at = node.attrs  # the key cache is paged whenever the runtime pages (as attention_spec)
    return DSASpec(at.heads, at.head_dim, at.topk, at.kpool, at.select_tail,
                       block_size=CONFIG.kv_block_size)


def mla_spec(node: Node, types: dict) -> mla.MLASpec:
    at = node.attrs
    if len(node.args) < 6:
        raise CodegenError(f"mla_attention without a DSA index has no kernel yet: {node.outs[0]}")
    return mla.MLASpec(at.heads, at.qk_head_dim, at.v_head_dim, at.kv_lora_rank, at.scale,
                       int(types[node.args[5]].shape[1]), block_size=CONFIG.kv_block_size,
                       head=at.index_topk)


def moe_router_spec(node: Node, types: dict) -> moe_router.RouterSpec:
    at, w = node.attrs, types[node.args[1]]
    return moe_router.RouterSpec(int(w.shape[-2]), int(w.shape[-1]), at.top_k, at.n_group,
                                 at.topk_group, at.norm_topk_prob, at.scaling, w.rank == 3)


def moe_experts_spec(node: Node, types: dict) -> moe_experts.ExpertsSpec:
    e, i, h = (int(s) for s in unpacked_shape(types[node.args[3]]))  # gate stack [E, I, H]
    return moe_experts.ExpertsSpec(e, h, i, int(types[node.args[2]].shape[1]), node.attrs.limit)
