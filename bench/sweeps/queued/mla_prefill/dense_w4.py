# Dense programs at 4 warps (committed 8; ptxas for sm_90: 255 registers and 408 bytes of
# spills, but two programs a multiprocessor).
from variant import make

from hyperloom.codegen.emitters import mla

globals().update(make(host=mla, consts={"DENSE_WARPS": 4}))
