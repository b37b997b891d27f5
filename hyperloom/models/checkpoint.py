"""Hugging Face checkpoint directories: config.json + safetensors shards, read lazily.

Graph parameters carry decoder-relative checkpoint names (`layers.0.self_attn.q_proj.weight`);
on disk they sit under the decoder prefix (`model.`, `model.language_model.`, or none), found
from where `embed_tokens.weight` lives. `lm_head.weight` is at the root. A name with `*` is a
stack of per-index tensors (MoE experts). Vision tensors are skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tqdm import tqdm

from hyperloom.errors import CheckpointError
from hyperloom.ir.graph import Param
from hyperloom.models.family import Family, Model

SKIP = re.compile(r"^(model\.)?(visual|vision_tower|vision_model)\.")
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
PROGRESS_BYTES = 1 << 30


def read_config(path: Path) -> dict:
    f = path / "config.json"
    if not f.is_file():
        raise CheckpointError(f"{path} has no config.json")
    try:
        return json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{f} is not valid JSON: {e}") from e


class Shards:
    """Name -> shard index over every *.safetensors file of a directory, opened lazily."""

    def __init__(self, path: Path, stack: ExitStack):
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise CheckpointError(f"{path} has no *.safetensors files")
        self.handles = [stack.enter_context(safe_open(str(f), "pt")) for f in files]
        self.where = {k: h for h in self.handles for k in h.keys()}

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.where[name].get_slice(name).get_shape())

    def get(self, name: str) -> torch.Tensor:
        return self.where[name].get_tensor(name)


def decoder_prefix(names: Iterator[str]) -> str:
    roots = [n[: -len("embed_tokens.weight")] for n in names
             if n.endswith("embed_tokens.weight") and not _LAYER.search(n)]
    if not roots:
        raise CheckpointError("missing tensor embed_tokens.weight (no decoder found)")
    return min(roots, key=len)


def disk_name(param: str, prefix: str) -> str:
    return param if param.startswith("lm_head.") else prefix + param


def expand(p: Param) -> list[tuple[str, tuple[int, ...]]]:
    """(param-relative name, shape) of each on-disk tensor behind `p`."""
    shape = tuple(int(s) for s in p.type.shape)
    if not p.stacked:
        return [(p.name, shape)]
    return [(p.name.replace("*", str(e)), shape[1:]) for e in range(shape[0])]


def _load_one(sh: Shards, p: Param, prefix: str, fallback: str | None) -> torch.Tensor:
    parts = []
    for rel, want in expand(p):
        name = disk_name(rel, prefix)
        if name not in sh.where:
            if fallback is not None:
                return _load_one(sh, Param(fallback, p.type), prefix, None)
            raise CheckpointError(f"missing tensor {name} (expected shape {list(want)})")
        got = sh.shape(name)
        if got != want:
            raise CheckpointError(f"tensor {name} has shape {list(got)}, the spec expects "
                                  f"{list(want)}")
        parts.append(sh.get(name))
    return torch.stack(parts) if p.stacked else parts[0]


def _unexpected(sh: Shards, used: set[str], prefix: str, layers: int) -> list[str]:
    out = []
    for name in sh.where:
        if name in used or SKIP.match(name):
            continue
        m = _LAYER.search(name)
        if name.startswith(prefix) and m and int(m.group(1)) >= layers:
            continue  # layers past the model (--layers, or an MTP layer the model does not run)
        out.append(name)
    return sorted(out)


def load_weights(path: Path, model: Model) -> dict[str, torch.Tensor]:
    """Read every parameter of `model` from the shards under `path`, checking names and shapes."""
    fallbacks = dict(model.fallbacks)
    with ExitStack() as stack:
        sh = Shards(path, stack)
        prefix = decoder_prefix(iter(sh.where))
        params = list(model.params().values())
        total = sum(p.type.nbytes() for p in params)
        bar = tqdm(params, desc="loading", unit="tensor", disable=total < PROGRESS_BYTES)
        out = {p.name: _load_one(sh, p, prefix, fallbacks.get(p.name)) for p in bar}
        used = {disk_name(rel, prefix) for p in params for rel, _ in expand(p)}
        used |= {disk_name(f, prefix) for f in fallbacks.values()}
        if getattr(model.config, "tie_word_embeddings", False):
            used.add("lm_head.weight")  # tied checkpoints may still carry a copy
        extra = _unexpected(sh, used, prefix, _layers_run(model))
    if extra:
        more = f" (+{len(extra) - 3} more)" if len(extra) > 3 else ""
        raise CheckpointError(f"unexpected tensor {', '.join(extra[:3])}{more} in {path}")
    return out


def _layers_run(model: Model) -> int:
    n = model.config.num_hidden_layers
    return n + (1 if model.mtp is not None else 0)


def save_checkpoint(path: Path, family: Family, model: Model,
                    weights: dict[str, torch.Tensor]) -> None:
    """Write config.json and model.safetensors in the layout save_pretrained writes."""
    path.mkdir(parents=True, exist_ok=True)
    cfg = family.to_hf(model.config)
    (path / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    tensors = {}
    for p in model.params().values():
        w = weights[p.name]
        for i, (rel, _) in enumerate(expand(p)):
            tensors[disk_name(rel, family.decoder_prefix)] = (w[i] if p.stacked else w).contiguous()
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
