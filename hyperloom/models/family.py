"""What every model family provides: named configs, HF config.json <-> config, and the build of
its graphs. A built `Model` is the main decoder graph plus the optional MTP drafter graph."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hyperloom.errors import SpecError
from hyperloom.ir.graph import Graph, Param
from hyperloom.ir.types import DType


@dataclass(frozen=True)
class Model:
    family: str
    config: Any
    main: Graph
    mtp: Graph | None
    vocab_size: int
    # parameter -> the parameter it falls back to when a checkpoint lacks it
    fallbacks: tuple[tuple[str, str], ...] = ()

    @property
    def graphs(self) -> tuple[Graph, ...]:
        return (self.main,) + ((self.mtp,) if self.mtp else ())

    def params(self) -> dict[str, Param]:
        return {p.name: p for g in self.graphs for p in g.params}


@dataclass(frozen=True)
class Family:
    name: str
    model_types: tuple[str, ...]
    configs: dict[str, Any]
    from_hf: Callable[[dict], Any]
    to_hf: Callable[[Any], dict]
    build: Callable[[Any, DType], Model]
    decoder_prefix: str  # where save_pretrained puts the decoder (`model.`, ...)

    def config(self, name: str, layers: int | None = None) -> Any:
        if name not in self.configs:
            raise SpecError(f"{self.name} has no config {name!r}; "
                            f"configs: {', '.join(self.configs)}")
        cfg = self.configs[name]
        return truncate(cfg, layers) if layers is not None else cfg


def truncate(cfg: Any, layers: int) -> Any:
    """Keep the first `layers` decoder layers (per-layer lists are cut to match)."""
    total = cfg.num_hidden_layers
    if not 1 <= layers <= total:
        raise SpecError(f"--layers {layers}: wants 1 to {total}, the config's layers "
                        "(num_hidden_layers)")
    cut = {f.name: getattr(cfg, f.name)[:layers] for f in dataclasses.fields(cfg)
           if isinstance(getattr(cfg, f.name), tuple) and len(getattr(cfg, f.name)) == total}
    return dataclasses.replace(cfg, num_hidden_layers=layers, **cut)


def require(cond: bool, field: str, msg: str) -> None:
    if not cond:
        raise SpecError(f"config field {field}: {msg}")
