"""The score kernel's histogram with one atomic per distinct bin of a block, not one per score:
each of the block's BP bins counts its equals ([BP, BP] compare), and only the first of each
adds the count. The atomics cost the indexer 6 us at 128K, batch 16 (BENCHMARKS); scores of a
row fall into a few dozen bins, so most adds of a block contend for the same addresses."""
from variant import make

from hyperloom.codegen.emitters import dsa

DEDUP = '''
@triton.jit
def _count_dedup(hist_row, x, m, NB: tl.constexpr, BP: tl.constexpr):
    """_count with the equal bins of x (BP scores) added once, by their first lane."""
    top = tl.where(m, (_ordered(x) >> (32 - 12)).to(tl.int32), -1)
    lane = tl.arange(0, BP)
    eq = top[:, None] == top[None, :]
    cnt = tl.sum(eq.to(tl.int32), axis=1)
    first = tl.min(tl.where(eq, lane[None, :], BP), axis=1)
    tl.atomic_add(hist_row + top, cnt, mask=m & (first == lane), sem="relaxed")


@triton.jit
def _keys('''

TEXT = [("\n@triton.jit\ndef _keys(", DEDUP),
        ("_count(hist_ptr + r * NB, sc, jm, NB)",
         "_count_dedup(hist_ptr + r * NB, sc, jm, NB, BP)")]
globals().update(make(text=TEXT, host=dsa))
