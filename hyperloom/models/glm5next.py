"""GLM-5.3 (transformers' `glm5_next`): mHC on every text layer, KDA or DSA mixers per
`layer_types`, dense clamped SwiGLU or routed MoE per `mlp_layer_types`, mean collapse, and the
MTP drafter layer (layer index num_hidden_layers in a checkpoint) as its own graph."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hyperloom.errors import SpecError
from hyperloom.ir import ops
from hyperloom.ir.builder import GraphBuilder, Residual
from hyperloom.ir.types import DType, T, TensorType
from hyperloom.models import blocks
from hyperloom.models.family import Family, Model, require

KDA, DSA = "linear_attention", "indexed_attention"


@dataclass(frozen=True)
class GlmConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    moe_intermediate_size: int
    num_hidden_layers: int
    layer_types: tuple[str, ...]
    mlp_layer_types: tuple[str, ...]
    indexer_types: tuple[str, ...]
    num_attention_heads: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    v_head_dim: int
    index_n_heads: int
    index_head_dim: int
    index_topk: int
    index_kpool: int
    linear_num_heads: int
    linear_head_dim: int
    n_routed_experts: int
    num_experts_per_tok: int
    linear_conv_kernel_dim: int = 4
    linear_lower_bound: float | None = -5.0
    index_kpool_always_select_tail: bool = True
    n_shared_experts: int = 1
    n_group: int = 1
    topk_group: int = 1
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 2.5
    swiglu_limit: float = 10.0
    rms_norm_eps: float = 1e-5
    hc_mult: int = 4
    hc_eps: float = 1e-6
    hc_sinkhorn_iters: int = 20
    tie_word_embeddings: bool = False
    num_nextn_predict_layers: int = 1
    mtp_layer_type: str = DSA
    mtp_mlp_layer_type: str = "sparse"


def validate(c: GlmConfig) -> None:
    n = c.num_hidden_layers
    for field in ("layer_types", "mlp_layer_types", "indexer_types"):
        require(len(getattr(c, field)) == n, field, f"has {len(getattr(c, field))} entries for "
                f"{n} layers (num_hidden_layers)")
    for i, t in enumerate(c.layer_types):
        require(t in (KDA, DSA), f"layer_types[{i}]", f"{t!r} is not {KDA!r} or {DSA!r}")
    for i, t in enumerate(c.mlp_layer_types):
        require(t in ("dense", "sparse"), f"mlp_layer_types[{i}]", f"{t!r} is not dense/sparse")
    require(c.index_topk % c.index_kpool == 0, "index_topk",
            f"{c.index_topk} is not a multiple of index_kpool {c.index_kpool}")
    require(c.n_routed_experts % c.n_group == 0, "n_group",
            f"{c.n_routed_experts} experts do not split into {c.n_group} groups")
    require(c.num_nextn_predict_layers in (0, 1), "num_nextn_predict_layers",
            f"{c.num_nextn_predict_layers}: at most one MTP layer is supported")
    full = False
    for i, (t, ix) in enumerate(zip(c.layer_types, c.indexer_types)):
        require(ix in ("full", "shared"), f"indexer_types[{i}]", f"{ix!r} is not full/shared")
        require(t != DSA or ix == "full" or full, f"indexer_types[{i}]",
                "a shared indexer layer needs an earlier full DSA layer")
        full = full or (t == DSA and ix == "full")


def _mla(c: GlmConfig, state: str) -> ops.MLAAttrs:
    return ops.MLAAttrs(c.num_attention_heads, c.qk_nope_head_dim, c.v_head_dim, c.kv_lora_rank,
                        c.qk_nope_head_dim ** -0.5, state=state, index_topk=c.index_topk)


def _index(c: GlmConfig, state: str) -> ops.DSAIndexAttrs:
    return ops.DSAIndexAttrs(c.index_n_heads, c.index_head_dim, c.index_topk, c.index_kpool,
                             c.index_kpool_always_select_tail, state=state)


class _Layers:
    """Emits mixers and MLPs; carries the last full indexer's selection for shared layers."""

    def __init__(self, b: GraphBuilder, c: GlmConfig, rows: tuple[str, str, str]):
        self.b, self.c, self.rows, self.selection = b, c, rows, ""

    def mixer(self, kind: str, p: str, x: str, shared_index: bool) -> str:
        b, c = self.b, self.c
        if kind == KDA:
            return blocks.kda_block(b, p, x, self.rows, c.linear_num_heads, c.linear_head_dim,
                                    c.linear_conv_kernel_dim, c.linear_lower_bound, c.rms_norm_eps)
        index = self.selection if shared_index else _index(c, p + "indexer")
        out, self.selection = blocks.mla_block(b, p, x, self.rows, _mla(c, p + "mla"),
                                               c.q_lora_rank, c.rms_norm_eps, index)
        return out

    def mlp(self, kind: str, p: str, x: str) -> str:
        b, c = self.b, self.c
        if kind == "dense":
            return blocks.swiglu_mlp(b, p, x, c.intermediate_size, c.swiglu_limit)
        router = ops.RouterAttrs(c.num_experts_per_tok, c.n_group, c.topk_group, c.norm_topk_prob,
                                 float(c.routed_scaling_factor))
        return blocks.moe_block(b, p, x, c.n_routed_experts, c.moe_intermediate_size,
                                c.moe_intermediate_size * c.n_shared_experts, router,
                                c.swiglu_limit)


def build_main(c: GlmConfig, dtype: DType) -> GraphBuilder:
    b = GraphBuilder(f"glm5next_{c.num_hidden_layers}l", dtype)
    rows = b.rows()
    layers = _Layers(b, c, rows)
    res = Residual(b, c.hc_mult, c.rms_norm_eps, c.hc_eps, c.hc_sinkhorn_iters)
    res.start(b.one(ops.Op.EMBEDDING, rows[0], b.param("embed_tokens.weight", c.vocab_size,
                                                       c.hidden_size)))
    for i in range(c.num_hidden_layers):
        p = f"layers.{i}."
        shared = c.indexer_types[i] == "shared"
        res.site(p + "hc_attn", p + "input_layernorm.weight",
                 lambda x, p=p, i=i: layers.mixer(c.layer_types[i], p + "self_attn.", x, shared))
        res.site(p + "hc_ffn", p + "post_attention_layernorm.weight",
                 lambda x, p=p, i=i: layers.mlp(c.mlp_layer_types[i], p + "mlp.", x))
    head = "embed_tokens.weight" if c.tie_word_embeddings else "lm_head.weight"
    logits, hidden = blocks.lm_head(b, res.finish(), "norm.weight", head, c.vocab_size,
                                    c.rms_norm_eps)
    b.outputs = {"logits": logits, "hidden": hidden}
    return b


def build_mtp(c: GlmConfig, dtype: DType) -> GraphBuilder:
    """u = eh_proj([enorm(embed(x_{t+1})) | hnorm(h_t)]), a plain pre-norm block, shared head."""
    p = f"layers.{c.num_hidden_layers}."
    b = GraphBuilder(f"glm5next_mtp{c.num_hidden_layers}", dtype)
    rows = b.rows()
    h = b.input("hidden", TensorType.make(dtype, T, c.hidden_size))
    e = b.one(ops.Op.EMBEDDING, rows[0], b.param("embed_tokens.weight", c.vocab_size,
                                                 c.hidden_size))
    cat = b.one(ops.Op.CONCAT, b.rmsnorm(e, p + "enorm.weight", c.rms_norm_eps),
                b.rmsnorm(h, p + "hnorm.weight", c.rms_norm_eps))
    layers = _Layers(b, c, rows)
    res = Residual(b, 1, c.rms_norm_eps)
    res.start(b.linear(cat, p + "eh_proj.weight", c.hidden_size))
    res.site("", p + "input_layernorm.weight",
             lambda x: layers.mixer(c.mtp_layer_type, p + "self_attn.", x, False))
    res.site("", p + "post_attention_layernorm.weight",
             lambda x: layers.mlp(c.mtp_mlp_layer_type, p + "mlp.", x))
    logits, hidden = blocks.lm_head(b, res.finish(), p + "shared_head.norm.weight",
                                    p + "shared_head.head.weight", c.vocab_size, c.rms_norm_eps)
    b.outputs = {"logits": logits, "hidden": hidden}
    return b


def build(c: GlmConfig, dtype: DType) -> Model:
    validate(c)
    main = build_main(c, dtype)
    mtp = build_mtp(c, dtype) if c.num_nextn_predict_layers else None
    head = f"layers.{c.num_hidden_layers}.shared_head.head.weight"
    fallback = "embed_tokens.weight" if c.tie_word_embeddings else "lm_head.weight"
    return Model("glm5next", c, main.finish(**main.outputs),
                 mtp.finish(**mtp.outputs) if mtp else None, c.vocab_size,
                 fallbacks=((head, fallback),) if mtp else ())


_FIELDS = {f.name for f in dataclasses.fields(GlmConfig)}


def from_hf(d: dict) -> GlmConfig:
    text = dict(d.get("text_config") or d)
    n = text["num_hidden_layers"]
    text.setdefault("layer_types", [DSA if i % 4 == 3 else KDA for i in range(n)])
    text.setdefault("mlp_layer_types", ["dense"] * min(3, n) + ["sparse"] * (n - 3))
    text.setdefault("indexer_types", ["full"] * n)
    text.setdefault("num_nextn_predict_layers", 0)
    text["layer_types"] = [DSA if t == "full_attention" else t for t in text["layer_types"]]
    if text.get("qk_rope_head_dim", 0):
        require(False, "qk_rope_head_dim",
                f"{text['qk_rope_head_dim']}: only NoPE MLA is supported")
    kw = {k: tuple(v) if isinstance(v, list) else v for k, v in text.items() if k in _FIELDS}
    try:
        return GlmConfig(**kw)
    except TypeError as e:
        raise SpecError(f"glm5_next config.json: {e}") from e


def to_hf(c: GlmConfig) -> dict:
    text = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(c).items()}
    text |= {"model_type": "glm5_next_text", "num_key_value_heads": c.num_attention_heads,
             "qk_rope_head_dim": 0, "hidden_act": "silu", "pad_token_id": None}
    return {"model_type": "glm5_next", "architectures": ["Glm5NextForConditionalGeneration"],
            "text_config": text, "tie_word_embeddings": c.tie_word_embeddings}


def _layout(n: int, dense: int) -> dict:
    return {"num_hidden_layers": n,
            "layer_types": tuple(DSA if i % 4 == 3 else KDA for i in range(n)),
            "mlp_layer_types": tuple("dense" if i < dense else "sparse" for i in range(n)),
            "indexer_types": ("full",) * n}


TINY = GlmConfig(vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                 num_attention_heads=4, q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16,
                 v_head_dim=16, index_n_heads=4, index_head_dim=16, index_topk=8, index_kpool=4,
                 linear_num_heads=4, linear_head_dim=16, n_routed_experts=8,
                 num_experts_per_tok=2, n_group=2, topk_group=1, **_layout(4, 2))
FLASH = GlmConfig(vocab_size=154880, hidden_size=4096, intermediate_size=12288,
                  moe_intermediate_size=2048, num_attention_heads=64, q_lora_rank=1536,
                  kv_lora_rank=512, qk_nope_head_dim=256, v_head_dim=256, index_n_heads=32,
                  index_head_dim=128, index_topk=2048, index_kpool=4, linear_num_heads=64,
                  linear_head_dim=128, n_routed_experts=288, num_experts_per_tok=8,
                  **_layout(45, 3))
CONFIGS = {"tiny": TINY, "glm-5.3-flash": FLASH}

FAMILY = Family("glm5next", ("glm5_next", "glm5_next_text"), CONFIGS, from_hf, to_hf, build,
                decoder_prefix="model.language_model.")
