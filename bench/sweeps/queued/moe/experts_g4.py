"""Prefill tiles (128 rows) with row tiles in groups of 4 (8 committed)."""

import dataclasses

from variant import make

from hyperloom.codegen.emitters import moe_experts

_BASE = moe_experts.tiles


def tiles(spec, rows, gemv=None, x_bytes=2, w_bytes=2):
    t = _BASE(spec, rows, gemv, x_bytes, w_bytes)
    return t if t.bm != 128 else dataclasses.replace(t, group_m=4)


globals().update(make(consts={"tiles": tiles}, host=moe_experts))
