"""The user-facing entry points: build a model spec, make an engine on seeded random weights or
on a Hugging Face checkpoint directory."""

from __future__ import annotations

from pathlib import Path

import torch

from hyperloom.config import CONFIG
from hyperloom.errors import InputError, SpecError
from hyperloom.ir.engine import Engine, ReferenceEngine
from hyperloom.runtime.engine import CompiledEngine
from hyperloom.ir.types import DType
from hyperloom.models import Model, family, family_of_model_type
from hyperloom.models.checkpoint import load_weights, read_config
from hyperloom.models.random_weights import random_weights

BACKENDS = ("compiled", "reference")


def build(model: str, config: str = "tiny", layers: int | None = None,
          dtype: torch.dtype = torch.bfloat16) -> Model:
    """The IR graphs of a named model config (parameters declared in `dtype`)."""
    fam = family(model)
    return fam.build(fam.config(config, layers), DType.of(dtype))


def engine(model: Model, weights: dict[str, torch.Tensor], device: str | torch.device = "cpu",
           dtype: torch.dtype = torch.float32, backend: str = "compiled",
           max_seq_len: int | None = None, max_sequences: int | None = None,
           prefill_chunk: int | None = None) -> Engine:
    """An engine for `model` on `weights`: compiled Triton kernels, or the reference."""
    if backend not in BACKENDS:
        raise InputError(f"unknown backend {backend!r}; backends: {', '.join(BACKENDS)}")
    max_seq_len, max_sequences = max_seq_len or CONFIG.max_seq_len, \
        max_sequences or CONFIG.max_sequences
    if backend == "compiled":
        if dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise InputError(f"the compiled backend runs in bfloat16, float16 or float32, "
                             f"not {dtype}")
        graphs = {"main": model.main} | ({"mtp": model.mtp} if model.mtp else {})
        return CompiledEngine(graphs, weights, model.vocab_size, device=device,
                              max_seq_len=max_seq_len, max_sequences=max_sequences,
                              prefill_chunk=prefill_chunk or CONFIG.prefill_chunk, model=model)
    if dtype not in (torch.float32, torch.float64):
        raise InputError(f"the reference backend computes in float32 or float64, not {dtype}")
    return ReferenceEngine(model.main, weights, model.vocab_size, mtp=model.mtp, device=device,
                           dtype=dtype, max_seq_len=max_seq_len, max_sequences=max_sequences,
                           model=model)


def compile(model: Model, weights: dict[str, torch.Tensor],  # noqa: A001 - the verb users want
            device: str | torch.device = "cpu", dtype: torch.dtype = torch.bfloat16,
            **kw: int) -> Engine:
    """The compiled engine (generated Triton kernels) for a built model on `weights`."""
    return engine(model, weights, device, dtype, "compiled", **kw)


def load(model: str, config: str = "tiny", *, layers: int | None = None, seed: int = 0,
         device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
         backend: str = "compiled", **kw: int) -> Engine:
    """An engine on seeded random weights for a named config."""
    spec = build(model, config, layers, dtype)
    size = sum(p.type.nbytes() for p in spec.params().values())
    if size > CONFIG.max_random_bytes:
        raise SpecError(f"{model} --config {config}: random weights need {size / 2**30:.1f} GiB "
                        f"(limit max_random_bytes = {CONFIG.max_random_bytes / 2**30:.0f} GiB); "
                        "use --layers N")
    return engine(spec, random_weights(spec, seed), device, dtype, backend, **kw)


def from_pretrained(path: str | Path, device: str | torch.device = "cpu",
                    dtype: torch.dtype = torch.float32, backend: str = "compiled",
                    **kw: int) -> Engine:
    """An engine on a Hugging Face checkpoint directory (config.json + safetensors)."""
    path = Path(path)
    hf = read_config(path)
    fam = family_of_model_type(str(hf.get("model_type")))
    spec = fam.build(fam.from_hf(hf), DType.of(dtype))
    return engine(spec, load_weights(path, spec), device, dtype, backend, **kw)

