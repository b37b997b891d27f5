# The attention at 4 warps (8 committed): two programs a multiprocessor by registers.
from variant import make

from hyperloom.codegen.emitters import mla

globals().update(make(host=mla, consts={"ATTEND_WARPS": 4}))
