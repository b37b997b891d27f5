"""The DSA indexer's top-k selection over pool scores (`dsa` writes and scores the pools;
its `source` joins this module's kernels to its own, and the score kernel calls _count).

{name}, grid (rows,): selection -> index [rows, topk (+ P - 1)] int32. With more visible pools
than K = topk / P, a radix select (4 passes of 8-bit digit histograms over the ordered score
bits) finds the K-th largest score; pools above it are taken, ties at it lowest index first
(as the reference's stable top-k). Selected pools
expand to P token ids each, in pool order (the reference orders them by score; the set is
the same), then -1 up to column topk, then the visible tokens of the incomplete tail pool.

Caches of more than SMALL_POOLS pools select in segments of SEG pools, in two launches after a
histogram of each sparse row's top TOP key bits (counted by the score kernel as it writes the
scores, or by {name}_hist; rows with at most K pools visible take them all). {name}_cands, grid
(rows, segments): finds the bin of the K-th key, counts its segment's keys above that bin and
appends those in it (the candidates) to the row's list. {name}_write, grid (rows, segments):
every program finds the K-th key among its row's candidates (bit by bit over their keys in
registers; 3 more 8-bit passes past SEG of them) and places its segment's pools after those of
the earlier segments; the row's first clears the histogram for the next step. No program
waits for another's result within a launch (one chain: histogram, candidates, write).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hyperloom.codegen.emitters.dsa_spec import DSASpec
from hyperloom.codegen.emitters.ints import cdiv, next_power_of_2
from hyperloom.codegen.emitters.loops import runtime_loop
from hyperloom.codegen.emitters.text import pdl
from hyperloom.errors import require

# a cache of up to SMALL_POOLS pools selects in one program a row, SMALL_BLOCK scores an
# iteration (on the H200 8.4 us at 1024 pools); larger ones in segments of SEG pools, one
# program each (one program a row took 115.6 us at 32768 pools, 31.4 at 8192: BENCHMARKS)
SMALL_BLOCK, SMALL_POOLS, SEG = 1024, 2048, 1024
TOP = 12  # key bits of the segmented select's first histogram (one bin: 1/8 of an octave)
# copies of each row's histogram at `rows` rows (copies()): program g counts into copy g % CP,
# cands sums them. At one row the score kernel's atomics crowd a few dozen bins: 4 copies took
# the indexer at 128K from 23.6 to 20.2 us on an H100 (8: 22.2); at 16 rows the atomics of
# the rows interleave, and 4 copies cost 2.6 us (cands' loads; BENCHMARKS, thirtieth session)
MAX_COPIES = 4
GB = 32  # segments' counts summed per load
WARPS, SELECT_WARPS = 4, 8  # a segment's program; a row's selection in one program: more threads


def copies(rows: int) -> int:
    """Copies of each row's histogram in a step of `rows` rows (rows x copies >= MAX_COPIES)."""
    return max(1, MAX_COPIES // max(1, rows))


def segments(pools: int) -> int:
    """Segments of the selection over a cache of `pools` pools (0: one program a row)."""
    return cdiv(pools, SEG) if pools > SMALL_POOLS else 0


_KEYS = '''
@triton.jit
def _ordered(x):
    \"\"\"fp32 scores -> int64 keys in [0, 2^32) with the scores' order (x not NaN).\"\"\"
    b = x.to(tl.int32, bitcast=True)
    return (b ^ ((b >> 31) & 0x7FFFFFFF)).to(tl.int64) + 2147483648


@triton.jit
def _count(hist_row, x, m, NB: tl.constexpr):
    \"\"\"Adds the scores x[m], by their keys' top bits, into a row's histogram [NB] (an atomic
    each: a local tl.histogram of 4096 bins first was 17x slower on the H200).\"\"\"
    top = (_ordered(x) >> (32 - {top})).to(tl.int32)
    tl.atomic_add(hist_row + top, tl.full(top.shape, 1, tl.int32), mask=m, sem="relaxed")


@triton.jit
def _keys(row_ptr, idx_ptr, j, m, GATHER: tl.constexpr):
    \"\"\"Keys of row[j] (GATHER: of row[idx[j]]) where m.\"\"\"
    if GATHER:
        j = tl.load(idx_ptr + j, mask=m, other=0)
    return _ordered(tl.load(row_ptr + j, mask=m, other=0.0))


@triton.jit
def _histogram(row_ptr, idx_ptr, n, prefix, shift: tl.constexpr, BLOCK: tl.constexpr,
               GATHER: tl.constexpr):
    \"\"\"Counts of the 8-bit digit at `shift` of the n keys (see _keys) whose higher digits
    equal prefix's.\"\"\"
    hist = tl.zeros((256,), tl.int32)
{keys_head}        j = start + tl.arange(0, BLOCK)
        u = _keys(row_ptr, idx_ptr, j, j < n, GATHER)
        match = (j < n) & ((u >> (shift + 8)) == (prefix >> (shift + 8)))
        hist += tl.histogram(((u >> shift) & 255).to(tl.int32), 256, mask=match)
{keys_tail}    return hist


@triton.jit
def _pick(hist, prefix, need, shift: tl.constexpr):
    \"\"\"(prefix, need) with the digit at `shift` of the need-th largest key put in: hist counts
    that digit among the keys matching prefix above it.\"\"\"
    bins = tl.arange(0, 256)
    at_or_above = tl.sum(hist, axis=0) - tl.cumsum(hist, axis=0) + hist
    d = tl.max(tl.where(at_or_above >= need, bins, 0), axis=0)
    need -= tl.sum(tl.where(bins > d, hist, 0), axis=0)
    return prefix + (d.to(tl.int64) << shift), need


@triton.jit
def _kth_key(row_ptr, n, k, BLOCK: tl.constexpr):
    \"\"\"(key, take): the k-th largest key of row[:n] and how many keys equal to it the top k hold
    (radix select, most significant digit first).\"\"\"
    prefix = n.to(tl.int64) * 0
    need = k
    for i in tl.static_range(4):  # digits at bits 24, 16, 8, 0
        hist = _histogram(row_ptr, row_ptr, n, prefix, 24 - 8 * i, BLOCK, False)
        prefix, need = _pick(hist, prefix, need, 24 - 8 * i)
    return prefix, need


@triton.jit
def _before(row_ptr, cand_ptr, nc, thr, start, BLOCK: tl.constexpr):
    \"\"\"(above, at): the candidates among pools before `start` with keys above thr, at thr.\"\"\"
    above = nc * 0
    at = nc * 0
{cand_head}        j = c0 + tl.arange(0, BLOCK)
        m = j < nc
        i = tl.load(cand_ptr + j, mask=m, other=0)
        u = _ordered(tl.load(row_ptr + i, mask=m, other=0.0))
        early = m & (i < start)
        above += tl.sum((early & (u > thr)).to(tl.int32), axis=0)
        at += tl.sum((early & (u == thr)).to(tl.int32), axis=0)
{cand_tail}    return above, at


@triton.jit
def _cut(row_ptr, cand_ptr, nc, top, need, start, BLOCK: tl.constexpr):
    \"\"\"(thr, take, above, at): the K-th key and how many keys equal to it the top k hold,
    found among the nc candidates row[cand[:nc]] (the keys in bin `top` of the top-bits
    histogram, of which the need-th largest is the K-th key), and the candidates before pool
    `start` above it and at it. More than BLOCK candidates: 3 radix passes, then _before.\"\"\"
    if nc <= BLOCK:  # the usual case: the candidates' keys stay in registers, and the
        # K-th key is the largest t with need keys >= t, found bit by bit (32 - {top} sums)
        j = tl.arange(0, BLOCK)
        m = j < nc
        i = tl.load(cand_ptr + j, mask=m, other=0)
        u = tl.where(m, _ordered(tl.load(row_ptr + i, mask=m, other=0.0)), -1)
        thr = top.to(tl.int64) << (32 - {top})
        for b in tl.static_range(32 - {top}):
            t = thr + (1 << (31 - {top} - b))
            thr = tl.where(tl.sum((u >= t).to(tl.int32), axis=0) >= need, t, thr)
        early = m & (i < start)
        return (thr, need - tl.sum((u > thr).to(tl.int32), axis=0),
                tl.sum((early & (u > thr)).to(tl.int32), axis=0),
                tl.sum((early & (u == thr)).to(tl.int32), axis=0))
    prefix = (top >> ({top} - 8)).to(tl.int64) << 24  # the bin's bits below 24 return in pass 1
    for k in tl.static_range(3):  # digits at bits 16, 8, 0
        hist = _histogram(row_ptr, cand_ptr, nc, prefix, 16 - 8 * k, BLOCK, True)
        prefix, need = _pick(hist, prefix, need, 16 - 8 * k)
    above, at = _before(row_ptr, cand_ptr, nc, prefix, start, BLOCK)
    return prefix, need, above, at


@triton.jit
def _earlier(cnt_ptr, g, GB: tl.constexpr):
    \"\"\"The counts [segments] summed over the segments before g.\"\"\"
    total = g * 0
{early_head}        i = g0 + tl.arange(0, GB)
        total += tl.sum(tl.load(cnt_ptr + i, mask=i < g, other=0), axis=0)
{early_tail}    return total


@triton.jit
def _emit(row, out, start, stop, thr, take, done, ties, P: tl.constexpr, PP: tl.constexpr,
          BLOCK: tl.constexpr):
    \"\"\"The pools of row[start:stop] above key thr, and those at it while the ties before them
    number fewer than take, as P token ids each at out[done * P:] (done and ties: counted before
    start); returns done after them.\"\"\"
    t = tl.arange(0, PP)
{emit_head}        j = j0 + tl.arange(0, BLOCK)
        jm = j < stop
        u = _ordered(tl.load(row + j, mask=jm, other=0.0))
        eq = jm & (u == thr)
        sel = jm & ((u > thr) | (eq & (ties + tl.cumsum(eq.to(tl.int32), axis=0) <= take)))
        at = done + tl.cumsum(sel.to(tl.int32), axis=0) - 1
        tl.store(out + at[:, None] * P + t[None, :], (j[:, None] * P + t[None, :]).to(tl.int32),
                 mask=sel[:, None] & (t < P)[None, :])
        done += tl.sum(sel.to(tl.int32), axis=0)
        ties += tl.sum(eq.to(tl.int32), axis=0)
{emit_tail}    return done


@triton.jit
def _finish(out, done, s, p, P: tl.constexpr, PP: tl.constexpr, TOPK: tl.constexpr,
            TAIL: tl.constexpr, FILL: tl.constexpr):
    \"\"\"-1 after the done selected pools' tokens, then the incomplete pool's visible tokens.\"\"\"
    for c0 in tl.static_range(0, TOPK, FILL):
        col = c0 + tl.arange(0, FILL)
        tl.store(out + col, tl.full((FILL,), -1, tl.int32), mask=(col < TOPK) & (col >= done * P))
    if TAIL:
        t = tl.arange(0, PP)
        count = tl.where(s >= 0, (p + 1) % P, 0)
        tok = p + 1 - count + t
        tl.store(out + TOPK + t, tl.where(t < count, tok, -1).to(tl.int32), mask=t < P - 1)
'''


def keys_source() -> str:
    """The key helpers (_ordered, _count, the radix passes, _emit, _finish) as Triton source."""
    loops = {"keys": ("start", "0", "n", "BLOCK"), "cand": ("c0", "0", "nc", "BLOCK"),
             "early": ("g0", "0", "g", "GB"), "emit": ("j0", "start", "stop", "BLOCK")}
    parts = {"top": TOP}
    for key, (var, lo, hi, step) in loops.items():
        parts[f"{key}_head"], parts[f"{key}_tail"] = runtime_loop(var, lo, hi, step, " " * 4)
    return _KEYS.format(**parts)


def source(name: str, spec: DSASpec) -> str:
    """The selection kernels {name}, {name}_hist, {name}_cands and {name}_write."""
    p, pp = spec.kpool, next_power_of_2(spec.kpool)
    consts = (f"K: tl.constexpr = {spec.topk // p}, P: tl.constexpr = {p}, "
              f"PP: tl.constexpr = {pp}, TOPK: tl.constexpr = {spec.topk},\n        "
              f"TAIL: tl.constexpr = {spec.select_tail and p > 1}, "
              f"FILL: tl.constexpr = {min(1024, next_power_of_2(spec.topk))}, "
              f"SEG: tl.constexpr = {SEG}, TOP: tl.constexpr = {TOP}, "
              f"NB: tl.constexpr = {1 << TOP}")
    visible = pdl("    ") + '''    r = tl.program_id(0).to(tl.int64)
    s = tl.load(slot_ptr + r)
    p = tl.load(pos_ptr + r)
    n = tl.where(s >= 0, tl.minimum((p + 1) // P, npools), 0).to(tl.int32)  # visible pools
'''
    return f'''
@triton.jit
def {name}(sc_ptr, slot_ptr, pos_ptr, out_ptr, ssc, so, npools, BLOCK: tl.constexpr,
        {consts}):
{visible}    row = sc_ptr + r * ssc
    thr = n.to(tl.int64) * 0 - 1  # every key is above -1: a dense row takes all its pools
    take = n * 0
    if n > K:
        thr, take = _kth_key(row, n, K, BLOCK)
    done = _emit(row, out_ptr + r * so, 0, n, thr, take, n * 0, n * 0, P, PP, BLOCK)
    _finish(out_ptr + r * so, done, s, p, P, PP, TOPK, TAIL, FILL)


@triton.jit
def {name}_hist(sc_ptr, slot_ptr, pos_ptr, hist_ptr, cnt_ptr, ssc, npools, CP: tl.constexpr,
        {consts}):
{visible}    g = tl.program_id(1)
    j = g * SEG + tl.arange(0, SEG)
    if n > K:
        _count(hist_ptr + (r * CP + g % CP) * NB,
               tl.load(sc_ptr + r * ssc + j, mask=j < n, other=0.0), j < n, NB)
        if g == 0:
            tl.store(cnt_ptr + r, 0)  # the candidates' count: cands appends from 0


@triton.jit
def {name}_cands(sc_ptr, slot_ptr, pos_ptr, hist_ptr, state_ptr, sure_ptr, cnt_ptr, cand_ptr,
        ssc, scand, npools, segs_cap, CP: tl.constexpr, {consts}):
{visible}    g = tl.program_id(1)
    if (n > K) & (g * SEG < n):  # dense rows (n <= K) take every pool: nothing to find
        bins = tl.arange(0, NB)
        hist = tl.load(hist_ptr + r * CP * NB + bins)
        for c in tl.static_range(1, CP):
            hist += tl.load(hist_ptr + (r * CP + c) * NB + bins)
        at_or_above = tl.sum(hist, axis=0) - tl.cumsum(hist, axis=0) + hist
        top = tl.max(tl.where(at_or_above >= K, bins, 0), axis=0)  # the K-th key's bin
        if g == 0:  # its rank among the bin's keys
            tl.store(state_ptr + r * 2, top)
            tl.store(state_ptr + r * 2 + 1, K - tl.sum(tl.where(bins > top, hist, 0), axis=0))
        j = g * SEG + tl.arange(0, SEG)
        jm = j < n
        u = _ordered(tl.load(sc_ptr + r * ssc + j, mask=jm, other=0.0)) >> (32 - TOP)
        tl.store(sure_ptr + r * segs_cap + g, tl.sum((jm & (u > top)).to(tl.int32), axis=0))
        cand = (jm & (u == top)).to(tl.int32)
        count = tl.sum(cand, axis=0)
        if count > 0:
            at = tl.atomic_add(cnt_ptr + r, count, sem="relaxed") + tl.cumsum(cand, axis=0) - 1
            tl.store(cand_ptr + r * scand + at, j, mask=cand > 0)


@triton.jit
def {name}_write(sc_ptr, slot_ptr, pos_ptr, out_ptr, hist_ptr, state_ptr, sure_ptr, cnt_ptr,
        cand_ptr, ssc, so, scand, npools, segs_cap, GB: tl.constexpr, CP: tl.constexpr,
        {consts}):
{visible}    g = tl.program_id(1)
    segs = (n + SEG - 1) // SEG
    thr = n.to(tl.int64) * 0 - 1  # dense: every pool, those before this segment included
    take = n * 0
    done = g * SEG
    ties = n * 0
    if (n > K) & (g < segs):  # every program finds the K-th key among the row's candidates
        earlier = _earlier(sure_ptr + r * segs_cap, g, GB)  # loads issued before the search
        thr, take, above, ties = _cut(sc_ptr + r * ssc, cand_ptr + r * scand,
                                      tl.load(cnt_ptr + r), tl.load(state_ptr + r * 2),
                                      tl.load(state_ptr + r * 2 + 1), g * SEG, SEG)
        done = earlier + above + tl.minimum(ties, take)
        if g == 0:  # cands has read the histogram: cleared for the next step's count
            for c in tl.static_range(CP):
                tl.store(hist_ptr + (r * CP + c) * NB + tl.arange(0, NB),
                         tl.zeros((NB,), tl.int32))
    if g < segs:
        _emit(sc_ptr + r * ssc, out_ptr + r * so, g * SEG, tl.minimum(n, (g + 1) * SEG), thr,
              take, done, ties, P, PP, SEG)
    if g == 0:
        _finish(out_ptr + r * so, tl.minimum(n, K), s, p, P, PP, TOPK, TAIL, FILL)
'''


@dataclass(frozen=True)
class Work:
    """Scratch of up to max_rows rows: pool scores fp32 [rows, S // P]; for the segmented
    select (else one element each): the top-bits histograms int32 [max(rows, MAX_COPIES),
    2^TOP] (a step of m rows keeps copy c of row r at row r * copies(m) + c; zero between
    steps), the K-th key's bin and its rank among the bin's keys int32 [rows, 2], each
    segment's keys above that bin int32 [rows, segments], the candidates' counts int32 [rows]
    (zeroed by the kernel that counts the histogram) and the candidates (pool indices) int32
    [rows, S // P]."""
    scores: torch.Tensor
    hist: torch.Tensor
    state: torch.Tensor
    sure: torch.Tensor
    counts: torch.Tensor
    cands: torch.Tensor


def scratch(max_rows: int, pooled: torch.Tensor) -> Work:
    """Allocate once, outside captured launches; serves every indexer of this capacity."""
    pools, dev = max(1, pooled.shape[1]), pooled.device
    segs = segments(pools)
    rows = max_rows if segs else 1
    i32 = dict(dtype=torch.int32, device=dev)
    return Work(torch.empty((max_rows, pools), dtype=torch.float32, device=dev),
                torch.zeros((max(rows, MAX_COPIES) if segs else 1, 1 << TOP if segs else 1),
                            **i32),
                torch.empty((rows, 2), **i32), torch.empty((rows, max(1, segs)), **i32),
                torch.zeros((rows,), **i32),
                torch.empty((rows, pools if segs else 1), **i32))


def fits(spec: DSASpec, work: Work, out: torch.Tensor, rows: int, pools: int) -> None:
    """The index and the scratch take `rows` rows over `pools` pools: checked before any
    launch, as a score kernel that counted the histogram must be followed by the select that
    clears it."""
    require(out.dtype == torch.int32 and out.shape[1] == spec.width and out.stride(1) == 1
            and out.shape[0] >= rows,
            lambda: f"DSA index: int32 [>= {rows}, {spec.width}], got {out.dtype} "
                    f"{tuple(out.shape)}")
    sc, segs = work.scores, segments(pools)
    require(sc.shape[0] >= rows and sc.shape[1] >= pools and sc.stride(1) == 1,
            lambda: f"DSA score scratch {tuple(sc.shape)} does not fit {rows} rows x {pools} "
                    "pools")
    require(not segs or (work.hist.shape[1] == 1 << TOP
                         and work.hist.shape[0] >= rows * copies(rows)
                         and work.counts.shape == (work.sure.shape[0],)
                         and work.state.shape == (work.sure.shape[0], 2)
                         and work.sure.shape[0] >= rows and work.sure.shape[1] >= segs
                         and work.cands.shape[1] >= pools),
            lambda: f"DSA selection scratch does not fit {rows} rows x {pools} pools")


def select(kernels, spec: DSASpec, *, work: Work, slot: torch.Tensor, pos: torch.Tensor,
           out: torch.Tensor, rows: int, pools: int, counted: bool = False) -> None:
    """Top-k of work.scores[:rows, :visible pools] (at most `pools`) into out [rows, width];
    kernels: the four selection kernels of kernel_names, loaded; counted: the score kernel
    has filled work.hist already (else the hist kernel does)."""
    fits(spec, work, out, rows, pools)
    launch_select(kernels, work=work, slot=slot, pos=pos, out=out, rows=rows, pools=pools,
                  counted=counted)


def launch_select(kernels, *, work: Work, slot: torch.Tensor, pos: torch.Tensor,
                  out: torch.Tensor, rows: int, pools: int, counted: bool) -> None:
    """select's launches, once `fits` has passed (the indexer's launch checks it before its
    first kernel)."""
    sc = work.scores
    one, hist, cands, write = kernels
    segs = segments(pools)  # fixed by the cache capacity: a captured launch stays valid
    if not segs:
        one[(rows,)](sc, slot, pos, out, sc.stride(0), out.stride(0), pools,
                     BLOCK=SMALL_BLOCK, num_warps=SELECT_WARPS)
        return
    w, cap, cp = work, work.sure.shape[1], copies(rows)
    if not counted:
        hist[(rows, segs)](sc, slot, pos, w.hist, w.counts, sc.stride(0), pools, CP=cp,
                           num_warps=WARPS)
    cands[(rows, segs)](sc, slot, pos, w.hist, w.state, w.sure, w.counts, w.cands, sc.stride(0),
                        w.cands.stride(0), pools, cap, CP=cp, num_warps=WARPS)
    write[(rows, segs)](sc, slot, pos, out, w.hist, w.state, w.sure, w.counts, w.cands,
                        sc.stride(0), out.stride(0), w.cands.stride(0), pools, cap, GB=GB,
                        CP=cp, num_warps=WARPS)
