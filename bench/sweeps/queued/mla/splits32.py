"""MLA variant: up to 32 index chunks a row (MAX_SPLITS 16 committed: a decode step of one
sequence runs 2 head blocks x 16 = 32 attention programs on 132 SMs), with the vectorized merge
over 32 splits (16-deep steps, 8 warps)."""

import functools

from variant import make

from hyperloom.codegen.emitters import mla
from queued.mla.vec_merge import merge_patch

# sm_90 (ptxas): the merge 186 registers, no spills at 8 warps
api = make(text=[merge_patch(32, 16)], consts={"MAX_SPLITS": 32}, opts={2: {"num_warps": 8}},
           host=mla)
api["launch"] = functools.partial(api["launch"], max_splits=32)
globals().update(api)
