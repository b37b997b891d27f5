# Dense programs walk 64 tokens an iteration (committed 32; ptxas for sm_90: 255 registers and
# 132 bytes of spills).
from variant import make

from hyperloom.codegen.emitters import mla

globals().update(make(host=mla, consts={"DENSE_BN": 64}))
