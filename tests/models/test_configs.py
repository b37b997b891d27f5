"""Every named config builds a verified graph, and the real-size configs agree with what
transformers builds from the same config (parameter names and shapes, at full size on `meta`)."""

from __future__ import annotations

import pytest
import torch

import hyperloom
from hyperloom.ir import StateKind, parse_graph, print_graph
from hyperloom.models import FAMILIES, family
from hyperloom.models.checkpoint import disk_name, expand
from hyperloom.models.glm5next import DSA, KDA, to_hf

NAMED = [(f, c) for f, fam in FAMILIES.items() for c in fam.configs]


@pytest.mark.parametrize("model, config", NAMED)
def test_every_named_config_builds_and_round_trips(model, config):
    spec = hyperloom.build(model, config)
    for g in spec.graphs:
        assert parse_graph(print_graph(g)) == g


@pytest.mark.parametrize("config", ["llama-3.2-1b", "llama-3-8b", "bench"])
def test_llama_params_match_transformers_at_full_size(config):
    import transformers

    fam = family("llama")
    cfg = fam.configs[config]
    with torch.device("meta"):
        hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**fam.to_hf(cfg)))
    want = {k: tuple(v.shape) for k, v in hf.state_dict().items()}
    if cfg.tie_word_embeddings:
        want.pop("lm_head.weight")
    spec = fam.build(cfg, hyperloom.ir.DType.BF16)
    got = {disk_name(rel, fam.decoder_prefix): shape
           for p in spec.params().values() for rel, shape in expand(p)}
    hc = {k for k in got if ".hc_" in k}
    assert bool(hc) == (cfg.hc_mult > 1)  # hyper-connection weights are hyperloom's own
    assert {k: v for k, v in got.items() if k not in hc} == want


def test_glm_flash_is_transformers_default_config():
    """transformers' Glm5NextTextConfig defaults are GLM-5.3-Flash; the one difference is
    index_kpool, which the public config (SPEC "Real sizes") sets to 4."""
    import transformers

    hf = transformers.Glm5NextTextConfig().to_dict()
    ours = to_hf(family("glm5next").configs["glm-5.3-flash"])["text_config"]
    differ = {k for k, v in ours.items() if k in hf and hf[k] != v}
    assert differ == {"index_kpool", "pad_token_id"}
    assert ours["index_kpool"] == 4


def test_glm_flash_first_four_layers():
    spec = hyperloom.build("glm5next", "glm-5.3-flash", layers=4)
    cfg = spec.config
    assert cfg.layer_types == (KDA, KDA, KDA, DSA)
    assert cfg.mlp_layer_types == ("dense", "dense", "dense", "sparse")
    states = {s.name: s for s in spec.main.states()}
    rec = states["layers.0.self_attn.kda.recurrent"]
    assert rec.kind is StateKind.FIXED
    nbytes = rec.type.dtype.torch.itemsize
    for n in rec.type.shape:
        nbytes *= int(n)
    assert nbytes == 4 << 20  # SPEC: KDA state is 4 MiB fp32 per sequence per layer
    assert len([s for s in states if s.endswith(".recurrent")]) == 3
