# Dense programs of 16 rows x 4 heads (M 64, committed 8 x 4): wgmma instead of mma.sync, each
# latent tile serving twice the lanes; ptxas for sm_90: 255 registers and 196 bytes of spills
# (committed: 252, none).
from variant import make

from hyperloom.codegen.emitters import mla

globals().update(make(host=mla, consts={"DENSE_BM": 16}))
