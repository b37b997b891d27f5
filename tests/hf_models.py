"""Tiny random transformers models for the comparison tests, built from hyperloom's own tiny
configs (so both sides agree on every size) and saved with `save_pretrained`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from hyperloom.models import family

TINY_VISION = dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=32, out_hidden_size=64,
                   projection_intermediate_size=64)


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Replace every parameter with seeded values far from transformers' trivial init."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "visual" in name:
                continue
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                r = 1 + 0.1 * r
            elif name.endswith("hc.scale"):
                r = torch.rand(p.shape, generator=g) + 0.5
            elif name.endswith(("hc.base", "A_log", "dt_bias", "compress_ape")):
                r = 0.5 * r
            elif name.endswith("hc.fn"):
                r = 0.05 * r
            elif name.endswith("conv1d.weight"):
                r = 0.4 * r
            elif name.endswith("bias"):
                r = 0.1 * r
            elif not name.endswith("embed_tokens.weight"):
                r = r * p.shape[-1] ** -0.5
            p.copy_(r)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g))


def hf_config(name: str, base: object = None, **overrides: object):
    """(transformers config, ours) of `base` (default: the family's tiny) with `overrides`."""
    import transformers

    fam = family(name)
    if name == "glm5next":
        overrides.setdefault("num_nextn_predict_layers", 0)  # transformers has no MTP layer
    cfg = dataclasses.replace(base or fam.configs["tiny"], **overrides)
    d = fam.to_hf(cfg)
    if name == "llama":
        return transformers.LlamaConfig(**d), cfg
    vision = TINY_VISION | {"out_hidden_size": cfg.hidden_size}
    return transformers.Glm5NextConfig(text_config=d["text_config"], vision_config=vision), cfg


def save_tiny(name: str, path: Path, seed: int = 0, **overrides: object):
    """Build, randomize and save_pretrained a tiny transformers model; return it (eval, fp32)."""
    import transformers

    config, _ = hf_config(name, **overrides)
    cls = (transformers.LlamaForCausalLM if name == "llama"
           else transformers.Glm5NextForConditionalGeneration)
    torch.manual_seed(seed)
    model = cls(config).float().eval()
    randomize(model, seed)
    model.save_pretrained(path)
    return model
