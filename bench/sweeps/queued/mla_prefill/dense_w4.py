# Dense programs at 4 warps (committed 8).
from variant import make

from hyperloom.codegen.emitters import mla

globals().update(make(host=mla, consts={"DENSE_WARPS": 4}))
