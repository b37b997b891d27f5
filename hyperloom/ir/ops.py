"""The ops of the layer IR and their typed attribute records.

Ops are UPPER_SNAKE in the enum and lower_snake in IR text. Every op has its own frozen attrs
record; stateful ops carry `state`, the name under which the runtime keeps their per-sequence
state. The fused ops at the end are introduced by the passes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Op(enum.Enum):
    EMBEDDING = "embedding"
    CAST = "cast"
    RMSNORM = "rmsnorm"
    GATED_RMSNORM = "gated_rmsnorm"
    LAYERNORM = "layernorm"
    LINEAR = "linear"
    ROPE = "rope"
    ATTENTION = "attention"
    MLA_ATTENTION = "mla_attention"
    DSA_INDEX = "dsa_index"
    KDA_CONV = "kda_conv"
    KDA_GATE = "kda_gate"
    KDA = "kda"
    SWIGLU = "swiglu"
    MOE_ROUTER = "moe_router"
    MOE_EXPERTS = "moe_experts"
    ADD = "add"
    CONCAT = "concat"
    RESIDUAL_ADD = "residual_add"
    HC_EXPAND = "hc_expand"
    HC_PRE = "hc_pre"
    HC_POST = "hc_post"
    HC_HEAD_MEAN = "hc_head_mean"
    LM_HEAD = "lm_head"
    # fused ops, introduced by the passes
    NORM_LINEAR = "norm_linear"
    SWIGLU_LINEAR = "swiglu_linear"
    LINEAR_RESIDUAL = "linear_residual"
    LINEAR_KDA_GATE = "linear_kda_gate"
    LINEAR_GATED_NORM = "linear_gated_norm"
    LINEAR_HC_POST = "linear_hc_post"
    ROPE_ATTENTION = "rope_attention"
    EMBED_STREAMS = "embed_streams"


@dataclass(frozen=True, slots=True)
class NoAttrs:
    pass


@dataclass(frozen=True, slots=True)
class CastAttrs:
    dtype: str


@dataclass(frozen=True, slots=True)
class NormAttrs:
    eps: float


@dataclass(frozen=True, slots=True)
class GatedNormAttrs:
    eps: float
    head_dim: int


@dataclass(frozen=True, slots=True)
class RopeAttrs:
    """Rotate-half RoPE over each head; kind 'llama3' applies Llama-3 frequency scaling."""

    head_dim: int
    theta: float
    kind: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192


@dataclass(frozen=True, slots=True)
class AttentionAttrs:
    """Causal GQA over the sequence's KV cache; k and v of this step are written first."""

    heads: int
    kv_heads: int
    head_dim: int
    scale: float
    state: str


@dataclass(frozen=True, slots=True)
class MLAAttrs:
    """MLA without RoPE over a latent cache; with an index input, only the selected tokens."""

    heads: int
    qk_head_dim: int
    v_head_dim: int
    kv_lora_rank: int
    scale: float
    state: str
    # the index's columns before the DSA tail (its topk): a row's entries there are its chosen
    # tokens first, then -1, so at most pos + 1 of them count; 0 promises no such layout
    index_topk: int = 0


@dataclass(frozen=True, slots=True)
class DSAIndexAttrs:
    """Lightning indexer: pooled keys, top-k pools, plus the visible tail of the incomplete pool."""

    heads: int
    head_dim: int
    topk: int
    kpool: int
    select_tail: bool
    state: str

    @property
    def width(self) -> int:
        return self.topk + (self.kpool - 1 if self.select_tail else 0)


@dataclass(frozen=True, slots=True)
class KDAConvAttrs:
    """Causal depthwise conv + SiLU over q|k|v channels; keeps the last kernel-1 inputs."""

    kernel: int
    state: str


@dataclass(frozen=True, slots=True)
class KDAGateAttrs:
    heads: int
    head_dim: int
    lower_bound: float | None


@dataclass(frozen=True, slots=True)
class KDAAttrs:
    heads: int
    head_dim: int
    state: str


@dataclass(frozen=True, slots=True)
class SwiGLUAttrs:
    limit: float | None


@dataclass(frozen=True, slots=True)
class RouterAttrs:
    top_k: int
    n_group: int
    topk_group: int
    norm_topk_prob: bool
    scaling: float


@dataclass(frozen=True, slots=True)
class ExpertsAttrs:
    limit: float | None


@dataclass(frozen=True, slots=True)
class HCExpandAttrs:
    n: int


@dataclass(frozen=True, slots=True)
class HCPreAttrs:
    """Stream norm eps (rms_norm_eps), the floor hc_eps, and the Sinkhorn iteration count.
    out_eps: the site's RMSNorm applied to y (its weight folded into the projections that read
    y, or hc_pre's fifth argument), stored in out_dtype ('' keeps the streams' fp32); None: y is
    the plain weighted stream sum."""

    n: int
    norm_eps: float
    hc_eps: float
    iters: int
    out_eps: float | None = None
    out_dtype: str = ""


@dataclass(frozen=True, slots=True)
class NormLinearAttrs:
    """Optional RMSNorm prologue (weight folded into W; eps None: none), one GEMM whose output
    columns are split into `splits` results; a [T, n, K] input is first averaged over streams.
    out_dtype '' keeps the weight dtype."""

    eps: float | None
    splits: tuple[int, ...]
    out_dtype: str = ""


@dataclass(frozen=True, slots=True)
class SwiGLULinearAttrs:
    """Optional RMSNorm prologue, the gate|up GEMM (W = [gate; up]) and the SwiGLU epilogue."""

    eps: float | None
    limit: float | None


@dataclass(frozen=True, slots=True)
class EpilogueLinearAttrs:
    """A projection with an optional RMSNorm prologue (eps None: none) and a fused epilogue.
    group > 0: the prologue is instead a gated RMSNorm over each `group` columns (KDA's o_norm:
    `gated_rmsnorm`), its gate and norm weight the op's last two operands. An addend, a [T, N]
    value (a MoE block's routed output) added to the projection first, is operand ADDEND_AT of
    linear_residual (its 4th) or linear_hc_post (its 6th)."""

    eps: float | None = None
    group: int = 0


# the operand index of a fused projection's addend, present when the op has one more operand
ADDEND_AT = {Op.LINEAR_RESIDUAL: 3, Op.LINEAR_HC_POST: 5}


def addend_of(node) -> str | None:
    """The addend operand of a linear_residual / linear_hc_post node, or None."""
    at = ADDEND_AT.get(node.op)
    return node.args[at] if at is not None and len(node.args) == at + 1 else None


@dataclass(frozen=True, slots=True)
class RopeAttentionAttrs:
    """RoPE on q and k, the KV-cache write, and causal GQA attention over the cache."""

    heads: int
    kv_heads: int
    head_dim: int
    scale: float
    state: str
    theta: float
    kind: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192

    def attention(self) -> AttentionAttrs:
        return AttentionAttrs(self.heads, self.kv_heads, self.head_dim, self.scale, self.state)

    def rope(self) -> RopeAttrs:
        return RopeAttrs(self.head_dim, self.theta, self.kind, self.factor, self.low_freq_factor,
                         self.high_freq_factor, self.original_max_position)

    @staticmethod
    def of(attn: AttentionAttrs, rope: RopeAttrs) -> RopeAttentionAttrs:
        return RopeAttentionAttrs(attn.heads, attn.kv_heads, attn.head_dim, attn.scale,
                                  attn.state, rope.theta, rope.kind, rope.factor,
                                  rope.low_freq_factor, rope.high_freq_factor,
                                  rope.original_max_position)


ATTRS: dict[Op, type] = {
    Op.EMBEDDING: NoAttrs, Op.CAST: CastAttrs, Op.RMSNORM: NormAttrs,
    Op.GATED_RMSNORM: GatedNormAttrs, Op.LAYERNORM: NormAttrs, Op.LINEAR: NoAttrs,
    Op.ROPE: RopeAttrs, Op.ATTENTION: AttentionAttrs, Op.MLA_ATTENTION: MLAAttrs,
    Op.DSA_INDEX: DSAIndexAttrs, Op.KDA_CONV: KDAConvAttrs, Op.KDA_GATE: KDAGateAttrs,
    Op.KDA: KDAAttrs, Op.SWIGLU: SwiGLUAttrs, Op.MOE_ROUTER: RouterAttrs,
    Op.MOE_EXPERTS: ExpertsAttrs, Op.ADD: NoAttrs, Op.CONCAT: NoAttrs, Op.RESIDUAL_ADD: NoAttrs,
    Op.HC_EXPAND: HCExpandAttrs, Op.HC_PRE: HCPreAttrs, Op.HC_POST: NoAttrs,
    Op.HC_HEAD_MEAN: NoAttrs, Op.LM_HEAD: NoAttrs, Op.NORM_LINEAR: NormLinearAttrs,
    Op.SWIGLU_LINEAR: SwiGLULinearAttrs, Op.LINEAR_RESIDUAL: EpilogueLinearAttrs,
    Op.LINEAR_HC_POST: EpilogueLinearAttrs, Op.LINEAR_KDA_GATE: KDAGateAttrs,
    Op.LINEAR_GATED_NORM: GatedNormAttrs,
    Op.ROPE_ATTENTION: RopeAttentionAttrs, Op.EMBED_STREAMS: HCExpandAttrs,
}
