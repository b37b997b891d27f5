"""Llama-3 style decoder: pre-norm GQA attention with RoPE (optional llama3 scaling) and SwiGLU.
`hc_mult > 1` runs the same stack on mHC hyper-connections (random-weight configs only)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hyperloom.ir import ops
from hyperloom.ir.builder import GraphBuilder, Residual
from hyperloom.ir.types import DType
from hyperloom.models import blocks
from hyperloom.models.family import Family, Model, require


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    rope_scaling: tuple[float, float, float, int] | None = None  # factor, low, high, original max
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 8192
    hc_mult: int = 1
    hc_eps: float = 1e-6
    hc_sinkhorn_iters: int = 20

    def rope(self) -> ops.RopeAttrs:
        if self.rope_scaling is None:
            return ops.RopeAttrs(self.head_dim, float(self.rope_theta))
        f, lo, hi, orig = self.rope_scaling
        return ops.RopeAttrs(self.head_dim, float(self.rope_theta), "llama3", float(f), float(lo),
                             float(hi), int(orig))


def validate(c: LlamaConfig) -> None:
    require(c.num_attention_heads % c.num_key_value_heads == 0, "num_key_value_heads",
            f"{c.num_attention_heads} heads not divisible by {c.num_key_value_heads} kv heads")
    require(c.head_dim % 2 == 0, "head_dim", f"{c.head_dim} must be even for RoPE")
    require(c.hc_mult >= 1, "hc_mult", f"{c.hc_mult} must be >= 1")


def build(c: LlamaConfig, dtype: DType) -> Model:
    validate(c)
    b = GraphBuilder(f"llama_{c.num_hidden_layers}l", dtype)
    rows = b.rows()
    embed = b.param("embed_tokens.weight", c.vocab_size, c.hidden_size)
    res = Residual(b, c.hc_mult, c.rms_norm_eps, c.hc_eps, c.hc_sinkhorn_iters)
    res.start(b.one(ops.Op.EMBEDDING, rows[0], embed))
    for i in range(c.num_hidden_layers):
        p = f"layers.{i}."
        attn = ops.AttentionAttrs(c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                                  c.head_dim ** -0.5, state=p + "self_attn")
        res.site(p + "hc_attn", p + "input_layernorm.weight",
                 lambda x, p=p, a=attn: blocks.gqa_attention(b, p + "self_attn.", x, rows, a,
                                                              c.rope()))
        res.site(p + "hc_ffn", p + "post_attention_layernorm.weight",
                 lambda x, p=p: blocks.swiglu_mlp(b, p + "mlp.", x, c.intermediate_size, None))
    head = "embed_tokens.weight" if c.tie_word_embeddings else "lm_head.weight"
    logits, _ = blocks.lm_head(b, res.finish(), "norm.weight", head, c.vocab_size, c.rms_norm_eps)
    return Model("llama", c, b.finish(logits=logits), None, c.vocab_size)


def from_hf(d: dict) -> LlamaConfig:
    heads = d["num_attention_heads"]
    rope = d.get("rope_parameters") or {}
    scaling = d.get("rope_scaling") or rope
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    require(kind in ("default", "llama3"), "rope_parameters.rope_type",
            f"{kind!r} is not supported (supported: default, llama3)")
    scale = None
    if kind == "llama3":
        scale = (scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"],
                 scaling["original_max_position_embeddings"])
    return LlamaConfig(
        vocab_size=d["vocab_size"], hidden_size=d["hidden_size"],
        intermediate_size=d["intermediate_size"], num_hidden_layers=d["num_hidden_layers"],
        num_attention_heads=heads, num_key_value_heads=d.get("num_key_value_heads") or heads,
        head_dim=d.get("head_dim") or d["hidden_size"] // heads,
        rms_norm_eps=d.get("rms_norm_eps", 1e-6),
        rope_theta=rope.get("rope_theta", d.get("rope_theta", 10000.0)), rope_scaling=scale,
        tie_word_embeddings=d.get("tie_word_embeddings", False),
        max_position_embeddings=d.get("max_position_embeddings", 8192),
        hc_mult=d.get("hc_mult", 1),
    )


def to_hf(c: LlamaConfig) -> dict:
    rope = {"rope_type": "default", "rope_theta": c.rope_theta}
    if c.rope_scaling:
        f, lo, hi, orig = c.rope_scaling
        rope = {"rope_type": "llama3", "rope_theta": c.rope_theta, "factor": f,
                "low_freq_factor": lo, "high_freq_factor": hi,
                "original_max_position_embeddings": orig}
    d = {f.name: getattr(c, f.name) for f in dataclasses.fields(c)
         if f.name not in ("rope_theta", "rope_scaling", "hc_eps", "hc_sinkhorn_iters", "hc_mult")}
    if c.hc_mult > 1:
        d |= {"hc_mult": c.hc_mult, "hc_eps": c.hc_eps, "hc_sinkhorn_iters": c.hc_sinkhorn_iters}
    return d | {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                "rope_parameters": rope, "hidden_act": "silu", "attention_bias": False,
                "mlp_bias": False}


_TINY = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=16, rope_theta=10000.0,
                    rope_scaling=(8.0, 1.0, 4.0, 64), max_position_embeddings=1024)
CONFIGS = {
    "tiny": _TINY,
    "tiny-hc": dataclasses.replace(_TINY, hc_mult=4),
    "bench": LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=12288,
                         num_hidden_layers=4, num_attention_heads=32, num_key_value_heads=8,
                         head_dim=128, hc_mult=4),
    "llama-3.2-1b": LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                                num_hidden_layers=16, num_attention_heads=32,
                                num_key_value_heads=8, head_dim=64,
                                rope_scaling=(32.0, 1.0, 4.0, 8192), tie_word_embeddings=True,
                                max_position_embeddings=131072),
    "llama-3-8b": LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                              num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                              head_dim=128),
}

FAMILY = Family("llama", ("llama",), CONFIGS, from_hf, to_hf, build, decoder_prefix="model.")
