"""Generated Triton source -> a loaded kernel. Sources are written to the kernel cache directory
under a name that hashes (source, Triton version, device capability), then imported, so Triton
can read the source it compiles and a changed source never reuses a stale module.

Plan entries of the same spec (one per layer of a stack) differ only in their header comment and
their plan name (`k08_hc_pre_l1_hc_attn_fn`); `load` strips both (the name keeps its kind and
leaf: `hc_pre_hc_attn_fn`), so they share one module and Triton compiles each kernel once."""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import torch
import triton

from hyperloom.codegen.emitters.text import PDL_WAIT
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


_PLAN_NAME = re.compile(r"k\d+_(\w+?)_l\d+_(\w+)")


def shared_name(entry_name: str) -> str:
    """A plan entry's name without its position and layer (unchanged if not a plan name)."""
    m = _PLAN_NAME.fullmatch(entry_name)
    return f"{m[1]}_{m[2]}" if m else entry_name


def canonical(source: str, base: str) -> str:
    """`source` without its leading comment lines, the entry name `base` made layer-free."""
    lines = source.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    return "".join(lines[start:]).replace(base, shared_name(base))


def load(source: str, name: str, device: torch.device | str, base: str | None = None) -> object:
    """The `@triton.jit` function `name` defined by `source`; `base` is the plan entry's name
    when `name` is one of several kernels the entry's source defines (`{base}_rope_kv`)."""
    base = base or name
    source, name = canonical(source, base), name.replace(base, shared_name(base), 1)
    digest = source_hash(source, device)
    mod_name = f"hyperloom_k_{name}_{digest}"
    if mod_name in _LOADED:
        return _LOADED[mod_name]
    folder = Path(CONFIG.kernel_cache_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{mod_name}.py"
    if not path.exists() or path.read_text() != source:
        # a temporary of this process's own, so processes sharing the cache never import a
        # file another one is half way through writing
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        tmp.replace(path)
    spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)
    kernel = getattr(module, name)
    _LOADED[mod_name] = Loaded(kernel, PDL_WAIT in _body(source, name))
    return _LOADED[mod_name]


def _body(source: str, name: str) -> str:
    """The text of function `name` in `source`, up to the next decorated function."""
    start = source.index(f"def {name}(")
    end = source.find("\n@", start)
    return source[start:] if end < 0 else source[start:end]


class Loaded:
    """A loaded kernel. `pdl`: its body waits for its predecessor grid (`text.pdl`), so every
    launch carries the programmatic-dependent-launch attribute and starts while that grid still
    runs (only a kernel that waits may: on one that does not the attribute would race). Inside
    `compile_ahead` a launch compiles the kernel for its arguments and runs nothing."""

    def __init__(self, kernel, pdl: bool) -> None:
        self.kernel, self.pdl = kernel, pdl
        self._extra = {"launch_pdl": True} if pdl else {}  # every launch's added keywords

    def __getitem__(self, grid):
        extra = self._extra
        if _AHEAD.get():
            return lambda *args, **kwargs: self.kernel.warmup(*args, grid=grid, **extra,
                                                              **kwargs)
        run, record = self.kernel[grid], _RECORD.get()
        if record is None:
            return lambda *args, **kwargs: run(*args, **extra, **kwargs)

        def launch(*args, **kwargs) -> None:
            token = _LAUNCHING.set(True)
            try:
                run(*args, **extra, **kwargs)
            finally:
                _LAUNCHING.reset(token)
            record.append(self.replay(grid, args, kwargs | extra))
        return launch

    def replay(self, grid, args: tuple, kwargs: dict):
        """A thunk that repeats this launch: the compiled kernel on the same argument values,
        past Triton's binding and cache lookup. None without a compiled kernel (the
        interpreter)."""
        warmup = getattr(self.kernel, "warmup", None)
        if CONFIG.interpret or warmup is None:
            return None
        compiled = warmup(*args, grid=grid, **kwargs)
        values = bound_values(self.kernel.fn, args, kwargs)
        launch = compiled[tuple(grid) + (1,) * (3 - len(grid))]
        return lambda: launch(*values)

    def __getattr__(self, name: str):
        return getattr(self.kernel, name)


def bound_values(fn, args: tuple, kwargs: dict) -> tuple:
    """Every parameter's value of a call fn(*args, **kwargs), defaults filled, in signature
    order (a compiled kernel's launcher takes them so); keywords that are launch options
    (num_warps, ...) are not parameters and are left out."""
    sig = inspect.signature(fn)
    bound = sig.bind(*args, **{k: v for k, v in kwargs.items() if k in sig.parameters})
    bound.apply_defaults()
    return tuple(bound.arguments.values())


_AHEAD: ContextVar[bool] = ContextVar("hyperloom_compile_ahead", default=False)
_RECORD: ContextVar[list | None] = ContextVar("hyperloom_record", default=None)
_LAUNCHING: ContextVar[bool] = ContextVar("hyperloom_launching", default=False)


def launching() -> bool:
    """Whether a recorded kernel launch is under way (the interpreter runs torch ops inside
    one; they are the kernel's, which a replay repeats)."""
    return _LAUNCHING.get()


@contextmanager
def compile_ahead(threads: int) -> Iterator[None]:
    """Launches of loaded kernels inside compile them on `threads` threads (Triton's
    AsyncCompileMode) and run nothing; on exit every compile has finished, into the kernels'
    own caches, so the real launches that follow find them."""
    with ThreadPoolExecutor(threads) as pool, triton.AsyncCompileMode(pool):
        token = _AHEAD.set(True)
        try:
            yield
        finally:
            _AHEAD.reset(token)


@contextmanager
def recording() -> Iterator[list]:
    """Launches of loaded kernels inside run as usual, and each adds to the yielded list its
    replay thunk (`Loaded.replay`: None where it has none)."""
    out: list = []
    token = _RECORD.set(out)
    try:
        yield out
    finally:
        _RECORD.reset(token)
