"""The DSA select's `write` search in digits: up to 256 candidates take their K-th key's low 20
bits in 5 passes of 4-bit digits ([256, 16] counts a pass, int32), instead of 20 dependent
sums; more fall back to the committed bit-by-bit search. 72 registers on sm_90, no spill."""

from variant import make

from hyperloom.codegen.emitters import dsa
from hyperloom.codegen.emitters.dsa_select import TOP

BIT_SEARCH = "    if nc <= BLOCK:  # the usual case"
DIGITS = """    if nc <= 256:
        j = tl.arange(0, 256)
        m = j < nc
        i = tl.load(cand_ptr + j, mask=m, other=0)
        u = tl.where(m, _ordered(tl.load(row_ptr + i, mask=m, other=0.0)), -1)
        lo = tl.where(m, (u & 0xFFFFF).to(tl.int32), -1)
        dg = tl.arange(0, 16)
        low = need * 0
        for b in tl.static_range(5):
            t = low + (dg << (16 - 4 * b))
            cnt = tl.sum((lo[:, None] >= t[None, :]).to(tl.int32), axis=0)
            low += tl.max(tl.where(cnt >= need, dg, 0), axis=0) << (16 - 4 * b)
        thr = (top.to(tl.int64) << 20) + low.to(tl.int64)
        early = m & (i < start)
        return (thr, need - tl.sum((u > thr).to(tl.int32), axis=0),
                tl.sum((early & (u > thr)).to(tl.int32), axis=0),
                tl.sum((early & (u == thr)).to(tl.int32), axis=0))
"""
assert TOP == 12  # 20 low bits below the top bin

globals().update(make(text=[(BIT_SEARCH, DIGITS + BIT_SEARCH)], host=dsa))
