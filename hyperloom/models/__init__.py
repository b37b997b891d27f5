"""Model specs: config dataclasses -> IR graphs, and the checkpoint layout of each family."""

from __future__ import annotations

from hyperloom.errors import SpecError
from hyperloom.models import glm5next, llama
from hyperloom.models.family import Family, Model

FAMILIES: dict[str, Family] = {"llama": llama.FAMILY, "glm5next": glm5next.FAMILY}


def family(name: str) -> Family:
    if name not in FAMILIES:
        raise SpecError(f"unknown model {name!r}; models: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def family_of_model_type(model_type: str) -> Family:
    for fam in FAMILIES.values():
        if model_type in fam.model_types:
            return fam
    known = ", ".join(t for f in FAMILIES.values() for t in f.model_types)
    raise SpecError(f"unsupported model_type {model_type!r}; supported: {known}")


__all__ = ["FAMILIES", "Family", "Model", "family", "family_of_model_type"]
