"""MLA variant: up to 64 index chunks a row (128 attention programs for one sequence), with the
vectorized merge over 64 splits (16-deep steps, 16 warps)."""

import functools

from variant import make

from hyperloom.codegen.emitters import mla
from queued.mla.vec_merge import merge_patch

# sm_90 (ptxas): the merge 128 registers and 16 bytes of spills at 16 warps (620 at 8)
api = make(text=[merge_patch(64, 16)], consts={"MAX_SPLITS": 64}, opts={2: {"num_warps": 16}},
           host=mla)
api["launch"] = functools.partial(api["launch"], max_splits=64)
globals().update(api)
