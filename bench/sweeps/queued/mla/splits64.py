"""MLA variant: up to 64 index chunks a row (128 attention programs for one sequence), with the
vectorized merge over 64 splits (16-deep steps, 8 warps)."""

import functools

from variant import make

from hyperloom.codegen.emitters import mla
from queued.mla.vec_merge import merge_patch

api = make(text=[merge_patch(64, 16)], consts={"MAX_SPLITS": 64}, opts={2: {"num_warps": 8}},
           host=mla)
api["launch"] = functools.partial(api["launch"], max_splits=64)
globals().update(api)
