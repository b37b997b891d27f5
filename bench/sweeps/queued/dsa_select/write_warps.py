"""The DSA select's `write` at 2 warps (committed: dsa_select.WARPS, 4); 8 in write_warps8.py."""

from variant import make

from hyperloom.codegen.emitters import dsa

globals().update(make(opts={5: {"num_warps": 2}}, host=dsa))
