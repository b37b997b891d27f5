"""What the kernel scenarios (bench.moe, bench.dsa) share: the specs of the model's layer they
time, seeded random tensors on the device, and emitters' kernels loaded from their sources."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import torch

from hyperloom.codegen.cache import load
from hyperloom.ir.ops import Op
from hyperloom.models import Model


def randn(gen: torch.Generator, device: torch.device, dtype: torch.dtype, *shape: int,
          scale: float = 1.0) -> torch.Tensor:
    return torch.randn(shape, generator=gen, device=device, dtype=dtype).mul_(scale)


def load_emitters(device: torch.device, *entries: tuple[ModuleType, object, str]) -> tuple:
    """Per (emitter module, spec, name): the kernels its `source` defines, in `kernel_names`
    order, loaded on the device."""
    out = []
    for mod, spec, name in entries:
        src = mod.source(name, spec, header=f"bench: {spec}")
        out.append(tuple(load(src, n, device, name) for n in mod.kernel_names(name)))
    return tuple(out)


def first_layer(model: Model, first: tuple[Op, Callable],
                then: tuple[Op, Callable]) -> tuple | None:
    """(spec of the model's first `first` op, spec of the first `then` op after it), each made
    by its (op, spec builder) pair from the node and the graph's types; None without them."""
    types, spec = model.main.value_types(), None
    for node in model.main.nodes:
        if node.op is first[0]:
            spec = first[1](node, types)
        elif node.op is then[0] and spec is not None:
            return spec, then[1](node, types)
    return None
