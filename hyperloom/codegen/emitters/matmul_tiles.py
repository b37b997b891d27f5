"""Block sizes of the projection GEMMs (`emitters.matmul`): the GEMV tiling up to GEMV_ROWS
rows, tensor-core tiles above, fitted to shared memory."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hyperloom.codegen.emitters.gemv import weight_rows
from hyperloom.codegen.emitters.ints import next_power_of_2
from hyperloom.config import CONFIG
from hyperloom.passes.kernel_plan import GEMV_ROWS

if TYPE_CHECKING:
    from hyperloom.codegen.emitters.matmul_spec import MatmulSpec

SMEM_BYTES = 160 * 1024  # pipelined operand tiles (Hopper: 227 KB a block, the rest scratch)


@dataclass(frozen=True)
class Tiles:
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int
    gemv: bool = False  # the GEMV tiling: every row in one block (GEMV constexpr of the kernel)


def tiles(spec: MatmulSpec, rows: int, x_bytes: int = 2, w_bytes: int = 2) -> Tiles:
    """Block sizes for `rows` rows of `x_bytes`-wide x and `w_bytes`-wide w."""
    return _tiles(spec, rows, x_bytes, w_bytes, CONFIG.sms)


@functools.lru_cache(maxsize=4096)  # every launch asks: memoized, as launch cost is host time
def _tiles(spec: MatmulSpec, rows: int, x_bytes: int, w_bytes: int, sms: int) -> Tiles:
    """tiles(...) under the `sms` knob's value (a memo key, as the GEMV tiling reads it)."""
    k_max = max(16, next_power_of_2(spec.k))
    if rows <= GEMV_ROWS:
        # GEMV: one 16-row block (the smallest tensor-core M) holds every row, so each weight
        # element is read once, K steps deep. A program reads 32 weight rows while that is one
        # wave of programs, else 64 (gate and up: 32 of each); about 64 KB of them in flight.
        # H200 sweep, one row, weights cold in L2 (us): qkv 6144x4096 15.1 at 64 rows and 6
        # stages (32 rows: 15.9; 16 rows, 384 programs filling 97% of three waves: 18.5), o
        # 4096x4096 12.3 at 32 rows and 8 stages (6: 12.5; 64 rows: 13.7), gate_up
        # 2x12288x4096 50.5 at 32+32 rows and 4 stages (6: 53.9), down 4096x12288 28.6 at 32
        # rows and 8 stages (6: 29.6), LM head 32000x4096 64.0 at 64 rows and 6 stages (32
        # rows: 66.4)
        w_rows = weight_rows(spec.n)
        swiglu = spec.epilogue == "swiglu"
        stages = 8 if w_rows == 32 else 4 if swiglu else 6
        t = Tiles(16, w_rows // 2 if swiglu else w_rows, min(128, k_max), 1, 4, stages,
                  gemv=True)
    elif rows <= 64:
        t = Tiles(64, 64, min(128, k_max), 8, 4, 4)
    else:
        # swiglu has two accumulators; hc_post holds a column chunk of hc stream tiles beside
        # its accumulator (170 registers at 128 x 128, spills at 128 x 256); `launch` runs a
        # step this wide with hc_post apart, so those tiles serve direct launch_gemm calls only
        # (H200 sweep at 2048 rows: of 13 tilings these were best; GROUP_M 16 beat 8 by 0-1.4%)
        t = Tiles(128, 256, min(64, k_max), 16, 8, 3)
        if spec.epilogue in ("swiglu", "hc_post"):
            t = Tiles(128, 128, min(64, k_max), 16, 8, 3)
    if spec.epilogue == "gated_norm":  # a column block is one norm group
        t = dataclasses.replace(t, block_n=spec.group)
    return _fit_smem(spec, t, x_bytes, w_bytes)


def _fit_smem(spec: MatmulSpec, t: Tiles, x_bytes: int, w_bytes: int) -> Tiles:
    w_tiles = 2 if spec.epilogue == "swiglu" else 1
    stages, bk = fit_smem(t.num_stages, t.block_k, t.block_m * x_bytes
                          + t.block_n * w_tiles * w_bytes)
    return dataclasses.replace(t, block_k=bk, num_stages=stages)


def fit_smem(stages: int, bk: int, k_bytes: int, budget: int = SMEM_BYTES,
             least_bk: int = 16) -> tuple[int, int]:
    """(stages, K step): fewer stages, then shallower K steps (down to least_bk), until the
    pipelined operand tiles, k_bytes a K column of them, fit in `budget` bytes of shared memory."""
    while stages * bk * k_bytes > budget:
        if stages > 2:
            stages -= 1
        elif bk > least_bk:
            bk //= 2
        else:
            break
    return stages, bk
