"""Prefill tiles (128 rows) with 128 deep K steps, 2 stages (96 KB each)."""

import dataclasses

from variant import make

from hyperloom.codegen.emitters import moe_experts

_BASE = moe_experts.tiles


def tiles(spec, rows, gemv=None, x_bytes=2, w_bytes=2):
    t = _BASE(spec, rows, gemv, x_bytes, w_bytes)
    return t if t.bm != 128 else dataclasses.replace(t, bk=128, stages=2)


globals().update(make(consts={"tiles": tiles}, host=moe_experts))
