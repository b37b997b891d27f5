"""Generated Triton source -> a loaded kernel. Sources are written to the kernel cache directory
under a name that hashes (source, Triton version, device capability), then imported, so Triton
can read the source it compiles and a changed source never reuses a stale module."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

import torch
import triton

from hyperloom.config import CONFIG

_LOADED: dict[str, object] = {}


def device_key(device: torch.device | str) -> str:
    device = torch.device(device)
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"sm{major}{minor}"
    return "interp" if CONFIG.interpret else device.type


def source_hash(source: str, device: torch.device | str) -> str:
    key = f"{triton.__version__}\n{device_key(device)}\n{source}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def load(source: str, name: str, device: torch.device | str) -> object:
    """The `@triton.jit` function `name` defined by `source`."""
    digest = source_hash(source, device)
    mod_name = f"hyperloom_k_{name}_{digest}"
    if mod_name in _LOADED:
        return _LOADED[mod_name]
    folder = Path(CONFIG.kernel_cache_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{mod_name}.py"
    if not path.exists() or path.read_text() != source:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(source)
        tmp.replace(path)
    spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)
    _LOADED[mod_name] = getattr(module, name)
    return _LOADED[mod_name]
