"""The DSA select's `write` at 8 warps (committed: dsa_select.WARPS, 4)."""

from variant import make

from hyperloom.codegen.emitters import dsa

globals().update(make(opts={5: {"num_warps": 8}}, host=dsa))
