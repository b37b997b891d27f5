# The split form's wide steps (the 8192-token prompt's rows past topk) at 32 heads a program
# (committed 64), as before: each row's latents gathered twice, mma.sync at M 32.
from variant import make

from hyperloom.codegen.emitters import mla

globals().update(make(host=mla, consts={"WIDE_BH": 32}))
