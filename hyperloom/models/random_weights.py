"""Seeded random weights for any model, scaled so every op does real work: norms near 1,
projections ~1/sqrt(fan_in), mHC mixing and DSA pooling far from their trivial init."""

from __future__ import annotations

import torch

from hyperloom.ir.graph import Param
from hyperloom.models.family import Model

_NORM_SUFFIXES = ("norm.weight", "layernorm.weight")


def _init(p: Param, shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    name, device = p.name, g.device

    def randn(std: float, mean: float = 0.0) -> torch.Tensor:
        return torch.randn(shape, generator=g, dtype=torch.float32, device=device) * std + mean

    if name.endswith(_NORM_SUFFIXES):
        return randn(0.1, 1.0)
    if name.endswith("_scale"):  # mHC scale: positive, around 1
        return torch.rand(shape, generator=g, device=device) + 0.5
    if name.endswith(("_base", "A_log", "dt_bias")):
        return randn(0.5)
    if name.endswith("bias"):  # LayerNorm bias, router score correction
        return randn(0.1)
    if name.endswith("_fn"):
        return randn(0.05)
    if name.endswith("conv1d.weight"):
        return randn(0.4)
    if name.endswith("index_kpool_compress_ape"):
        return randn(0.5)
    if name == "embed_tokens.weight":
        return randn(1.0)
    return randn(shape[-1] ** -0.5)  # every projection: [.., out, in]


def random_weights(model: Model, seed: int = 0, device: str | torch.device = "cpu",
                   expert_spread: float | None = None) -> dict[str, torch.Tensor]:
    """One tensor per parameter in its declared dtype, reproducible from `seed` (graph order) on
    `device` (a device's generator: values differ from the CPU's; real-width models made there
    skip the host copy). With `expert_spread`, each routed expert is expert 0's draw plus that
    fraction of its own, so a routing choice that rounding flips moves a row by about that
    fraction, not wholesale (real-width checks of bf16 against fp32)."""
    g = torch.Generator(device).manual_seed(seed)
    out = {}
    for p in model.params().values():
        shape = tuple(int(s) for s in p.type.shape)
        w = _init(p, shape, g)
        if p.stacked and expert_spread is not None:
            w = w[:1] + expert_spread * w
        out[p.name] = w.to(p.type.dtype.torch)
    return out
