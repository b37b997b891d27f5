# A wide step's absorb and merge on 128-column blocks (committed 256): the partials read twice,
# but two merge programs a multiprocessor (ptxas for sm_90: 124 registers, 80 KB of shared
# memory, against 155 and 128 KB).
from variant import make

from hyperloom.codegen.emitters import mla

globals().update(make(host=mla, consts={"WIDE_COLS": 128}))
