"""The router's logits at prefill widths (>= WIDE_ROWS rows):
H split in eight (1280 programs)."""

from variant import make

from hyperloom.codegen.emitters import moe_router

_BASE = moe_router.tiles


def tiles(spec, rows):
    t = _BASE(spec, rows)
    return t if rows < moe_router.WIDE_ROWS else moe_router.Tiles(128, 64, t.bk, 8, 8, 4)


globals().update(make(consts={"tiles": tiles}, host=moe_router))
