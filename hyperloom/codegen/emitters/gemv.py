"""The one-row GEMV's column split, shared by the projection GEMMs (`matmul_tiles`) and an mHC
site's parts, whose partials rows must match the programs of the GEMM that writes them
(`hc_pre`, `matmul`'s site_parts and site_in)."""

from __future__ import annotations

from hyperloom.codegen.emitters.ints import cdiv
from hyperloom.config import CONFIG


def weight_rows(n: int) -> int:
    """Weight rows a GEMV program reads of n: 32 while that is one wave of programs, else 64."""
    return 32 if cdiv(n, 32) <= CONFIG.sms else 64


def site_block(d: int) -> int:
    """Columns a program of a one-row GEMV with the hc_post epilogue over a site's d columns."""
    return weight_rows(d)


def site_programs(d: int) -> int:
    """Those programs: the rows of partials the GEMV that forms the site sums."""
    return cdiv(d, site_block(d))
