# The split form's 64 index entries an iteration (32 committed): half the serial steps, [BH,
# 64] score tiles (the dense programs take their BN from the launch).
from variant import make

from hyperloom.codegen.emitters import mla

globals().update(make(host=mla, text=[("BN: tl.constexpr = 32,", "BN: tl.constexpr = 64,")]))
