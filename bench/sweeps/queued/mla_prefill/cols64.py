# A wide step's absorb and merge on 64-column blocks (committed 256), as before: the merge reads
# a head's fp32 partials once a block (4 times at dv 256), the absorb its q 8 times.
from variant import make

from hyperloom.codegen.emitters import mla

globals().update(make(host=mla, consts={"WIDE_COLS": 64}))
