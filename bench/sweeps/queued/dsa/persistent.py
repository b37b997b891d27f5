"""The score kernel as a persistent grid: NPROG programs (about what the H200 keeps resident:
5 a multiprocessor at 41 KB of shared memory), each walking an equal, contiguous share of the
step's (row, block of BP pools) items in one pipelined loop a row, so a program's start-up
(slot, query, the pipeline's first loads) is paid once, not once per 4 blocks, and the grid
never drains a last part-filled wave. `variant(nprog, dedup)` builds the module API;
dedup: hist_dedup.py's histogram too. The launch is the host's with the score kernel's grid
and its `rows` argument."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the sibling variant modules
import hist_dedup
from variant import make

from hyperloom.codegen.emitters import dsa
from hyperloom.codegen.emitters.ints import cdiv
from hyperloom.codegen.emitters.loops import runtime_loop

HEAD = """    r = tl.program_id(0).to(tl.int64)
    s = tl.load(slot_ptr + r).to(tl.int64)
    n = tl.minimum((tl.load(pos_ptr + r) + 1) // P, npools)  # visible pools
    if (s < 0) | (tl.program_id(1) * BP * IT >= n):
        return
"""
LOOP = """    for i in range(IT):
        j = (tl.program_id(1) * IT + i) * BP + tl.arange(0, BP)
"""
WALK = """    nblk = (npools + BP - 1) // BP
    total = rows * nblk
    item = (tl.program_id(0) * total) // tl.num_programs(0)
    hi = ((tl.program_id(0) + 1) * total) // tl.num_programs(0)
    while item < hi:
        r = (item // nblk).to(tl.int64)
        b0 = item - (item // nblk) * nblk
        b1 = tl.minimum(nblk, b0 + hi - item)
        item += b1 - b0
        s = tl.load(slot_ptr + r).to(tl.int64)
        n = tl.minimum((tl.load(pos_ptr + r) + 1) // P, npools)  # visible pools
        nb = tl.where(s < 0, 0, tl.minimum(b1, (n + BP - 1) // BP))
        if b0 < nb:
"""


def _persistent(source: str, name: str) -> str:
    """The score kernel's body as WALK: its row-start lines one level deeper, its block loop
    over the row's share of blocks."""
    start = source.index(HEAD)
    stop = source.index("\n\n", source.index("_count", start))
    head, tail = runtime_loop("b", "b0", "nb", "1", " " * 4)
    body = source[start + len(HEAD):stop].replace(LOOP, head
                                                  + "        j = b * BP + tl.arange(0, BP)\n")
    deeper = "".join("        " + line if line.strip() else line
                     for line in body.splitlines(keepends=True))
    sig = "ssc, npools, count,"
    return (source[:start].replace(sig, "ssc, npools, count, rows,", 1) + WALK + deeper
            + ("\n        " + tail.rstrip("\n") if tail else "") + source[stop:])


def variant(nprog: int, dedup: bool = False) -> dict:
    api = make(text=(hist_dedup.TEXT if dedup else []) + [_persistent], host=dsa)

    def launch(kernels, spec, *, qi, w, ki, gate, ape, slot, pos, keys, pooled, work, out,
               rows, block_table=None):
        capacity = dsa.check(spec, keys, pooled, block_table)
        table = dsa.paging.table_args(spec.block_size, block_table, keys)[0]
        if rows == 0:
            return
        pool, score, *top = kernels
        pools = pooled.shape[1]
        pool[(rows,)](ki, gate, ape, slot, pos, keys, pooled, ki.stride(0), gate.stride(0),
                      keys.stride(0), keys.stride(1), pooled.stride(0), pooled.stride(1),
                      capacity, *table, num_warps=dsa.WARPS)
        count = dsa.segments(pools) > 0
        score[(max(1, min(nprog, rows * cdiv(max(1, pools), dsa.BP))),)](
            qi, w, slot, pos, pooled, work.scores, work.hist, qi.stride(0), w.stride(0),
            pooled.stride(0), pooled.stride(1), work.scores.stride(0), pools, int(count), rows,
            num_warps=dsa.WARPS)
        dsa.select(top, spec, work=work, slot=slot, pos=pos, out=out, rows=rows, pools=pools,
                   counted=True)

    return api | {"launch": launch}
