"""The DSA lightning indexer with k-pool compression (`hyperloom.ir.semantics.dsa`, SPEC "DSA"):
six kernels in one module (`kernel_names`); the selection's four are `dsa_select`'s.

{name}_pool, grid (rows,): row r writes [kI | gate] into keys [slots, S, 2d] at (slot, pos); the
row that completes a pool (pos % P == P - 1) computes the pool's key once, sum_t softmax_t(gate_t
+ ape_t) * kI_t per channel, into pooled [slots, S // P, d]. Its pool's earlier tokens come from
this step's rows when they are in it (another program writes them to the cache in this launch),
else from the cache. Padding rows (slot < 0) and positions past the capacity write nothing.

{name}_score, grid (rows, cdiv(S // P, BP * IT)): scores [rows, S // P] fp32 of the row's visible
pools (those whose last token is <= pos): sum_h w_h h^-1/2 relu(qI_h . key d^-1/2), IT blocks of
BP pools a program (score_blocks). Programs past the row's pools exit, so the grid depends on the
rows and the capacity only (a captured launch stays valid). Above dsa_select.SMALL_POOLS pools
it also counts each sparse row's top-bits histogram for the segmented select (and zeroes
the row's count of candidates).

Paged (spec.block_size = B > 0): keys is a block pool [num_blocks, B, 2d] behind a block table
(`paging`); the pooled keys (one row per pool, 1/(2P) of the keys) stay one block per slot.
"""

from __future__ import annotations

import torch

from hyperloom.codegen.emitters import dsa_select, paging
from hyperloom.codegen.emitters.dsa_select import Work
from hyperloom.codegen.emitters.dsa_spec import DSASpec
from hyperloom.codegen.emitters.ints import cdiv, next_power_of_2
from hyperloom.codegen.emitters.text import comment, pdl
from hyperloom.config import CONFIG
from hyperloom.errors import require

BP = 64  # pools per block of a score program; IT blocks a program (score_blocks)
SCORE_PROGRAMS, MAX_IT = 2048, 8  # a launch's programs, once rows x blocks exceed them
WARPS = 4  # the pool and score programs


def kernel_names(name: str) -> tuple[str, ...]:
    """(cache write + pool keys, pool scores, top-k selection in one program a row, and the
    segmented selection's histogram, candidates and write) defined by source(name, ...)."""
    return (f"{name}_pool", f"{name}_score", name, f"{name}_hist", f"{name}_cands",
            f"{name}_write")


def launches(pools: int) -> int:
    """Kernel launches of an indexer step over a cache of `pools` pools: pool, score (+ the
    histogram), then cands + write or the one-program select."""
    return 4 if dsa_select.segments(pools) else 3


def _pool_source(name: str, spec: DSASpec) -> str:
    bs = spec.block_size
    table, page = paging.params(bs)
    return f'''
@triton.jit
def _pool_rows(cur_ptr, sc_, kc_row, t, here, cached):
    """[PP, DP] values of a pool's tokens: this step's row where the token is in the step (cast
    as the cache stores it), else the cache's."""
    x = tl.load(cur_ptr + t * sc_, mask=here, other=0.0).to(kc_row.dtype.element_ty)
    return x.to(tl.float32) + tl.load(kc_row, mask=cached, other=0.0).to(tl.float32)


@triton.jit
def {name}(ki_ptr, g_ptr, ape_ptr, slot_ptr, pos_ptr, kc_ptr, pc_ptr, ski, sg, kc_s0, kc_s1,
        pc_s0, pc_s1, capacity,{table} D: tl.constexpr = {spec.head_dim},
        DP: tl.constexpr = {next_power_of_2(spec.head_dim)},
        P: tl.constexpr = {spec.kpool},
        PP: tl.constexpr = {next_power_of_2(spec.kpool)}{page}):
{pdl("    ")}    r = tl.program_id(0).to(tl.int64)
    s = tl.load(slot_ptr + r).to(tl.int64)
    p = tl.load(pos_ptr + r).to(tl.int64)
    if (s < 0) | (p < 0) | (p >= capacity):  # padding: no state
        return
    c = tl.arange(0, DP)
    cm = c < D
    row = kc_ptr + {paging.row(bs, "kc", "s", "p")}
    kt = kc_ptr.dtype.element_ty
    tl.store(row + c, tl.load(ki_ptr + r * ski + c, mask=cm).to(kt), mask=cm)
    tl.store(row + D + c, tl.load(g_ptr + r * sg + c, mask=cm).to(kt), mask=cm)
    if p % P == P - 1:
        t = tl.arange(0, PP)
        tm = t < P
        rr = r - (P - 1) + t  # the step row that holds token tp, if the step holds it
        tp = p - (P - 1) + t
        here = tm & (rr >= 0)
        here = here & (tl.load(slot_ptr + rr, mask=here, other=-1) == s)
        here = here & (tl.load(pos_ptr + rr, mask=here, other=-1) == tp)
        ins = here[:, None] & cm[None, :]
        cached = (tm & ~here)[:, None] & cm[None, :]
        tp = tp[:, None]
        toks = kc_ptr + {paging.row(bs, "kc", "s", "tp", "tm[:, None]")} + c[None, :]
        k = _pool_rows(ki_ptr + c[None, :], ski, toks, rr[:, None], ins, cached)
        g = _pool_rows(g_ptr + c[None, :], sg, toks + D, rr[:, None], ins, cached)
        g += tl.load(ape_ptr + t[:, None] * D + c[None, :], mask=tm[:, None] & cm[None, :],
                     other=0.0).to(tl.float32)
        g = tl.where(tm[:, None], g, float("-inf"))
        e = tl.exp(g - tl.max(g, axis=0)[None, :])
        key = tl.sum(e * k, axis=0) / tl.sum(e, axis=0)
        tl.store(pc_ptr + s * pc_s0 + (p // P) * pc_s1 + c, key.to(pc_ptr.dtype.element_ty),
                 mask=cm)
'''


def _p2(n: int) -> int:
    """A tl.dot dimension: a power of two, at least 16."""
    return max(16, next_power_of_2(n))


def _score_source(name: str, spec: DSASpec) -> str:
    up = ".to(tl.float32)" if CONFIG.interpret else ""  # the interpreter's low-precision dots
    return f'''
@triton.jit
def {name}(qi_ptr, w_ptr, slot_ptr, pos_ptr, pc_ptr, sc_ptr, hist_ptr, cnt_ptr, sq, sw, pc_s0,
        pc_s1, ssc, npools, count, H: tl.constexpr = {spec.heads},
        HP: tl.constexpr = {_p2(spec.heads)},
        D: tl.constexpr = {spec.head_dim}, DP: tl.constexpr = {_p2(spec.head_dim)},
        P: tl.constexpr = {spec.kpool}, BP: tl.constexpr = {BP}, IT: tl.constexpr = 1,
        SCALE: tl.constexpr = {spec.head_dim ** -0.5!r},
        WSCALE: tl.constexpr = {spec.heads ** -0.5!r}, NB: tl.constexpr = {1 << dsa_select.TOP},
        CP: tl.constexpr = 1,
        K: tl.constexpr = {spec.topk // spec.kpool}):
{pdl("    ")}    r = tl.program_id(0).to(tl.int64)
    s = tl.load(slot_ptr + r).to(tl.int64)
    n = tl.minimum((tl.load(pos_ptr + r) + 1) // P, npools)  # visible pools
    if (s < 0) | (tl.program_id(1) * BP * IT >= n):
        return
    h = tl.arange(0, HP)
    c = tl.arange(0, DP)
    hm = h < H
    cm = c < D
    q = tl.load(qi_ptr + r * sq + h[:, None] * D + c[None, :], mask=hm[:, None] & cm[None, :],
                other=0.0)
    w = tl.load(w_ptr + r * sw + h, mask=hm, other=0.0).to(tl.float32) * WSCALE
    counted = (count != 0) & (n > K)  # the segmented select's histogram: sparse rows only
    if counted & (tl.program_id(1) == 0):
        tl.store(cnt_ptr + r, 0)  # the candidates' count: the select appends from 0
    for i in range(IT):
        j = (tl.program_id(1) * IT + i) * BP + tl.arange(0, BP)
        jm = j < n
        k = tl.load(pc_ptr + s * pc_s0 + j[:, None] * pc_s1 + c[None, :],
                    mask=jm[:, None] & cm[None, :], other=0.0)
        logits = tl.dot(q.to(k.dtype){up}, tl.trans(k{up}))  # [HP, BP]
        sc = tl.sum(w[:, None] * tl.maximum(logits * SCALE, 0.0), axis=0)
        sc = tl.where(sc == 0.0, 0.0, sc)  # -0.0 ties +0.0, as in torch.topk
        tl.store(sc_ptr + r * ssc + j, sc, mask=jm)
        if counted:
            _count(hist_ptr + (r * CP + tl.program_id(1) % CP) * NB, sc, jm, NB)
'''


def source(name: str, spec: DSASpec, header: str = "") -> str:
    pool, score, select = kernel_names(name)[:3]
    return (f"{comment(header)}import triton\nimport triton.language as tl\n\n"
            f"{_pool_source(pool, spec)}\n{_score_source(score, spec)}\n"
            f"{dsa_select.keys_source()}\n{dsa_select.source(select, spec)}")


def score_blocks(rows: int, pools: int) -> int:
    """Blocks of BP pools a score program: one while rows x blocks give at most SCORE_PROGRAMS
    programs, else the power of two (at most MAX_IT) that brings them near it (the row's query
    is loaded once a program, the blocks' keys stream through a pipelined loop)."""
    it = 1
    while it < MAX_IT and rows * cdiv(pools, BP * it * 2) >= SCORE_PROGRAMS:
        it *= 2
    return it


def check(spec: DSASpec, keys: torch.Tensor, pooled: torch.Tensor,
          table: torch.Tensor | None = None) -> int:
    """Caches: keys [slots, S, 2d] (paged: a pool [blocks, PAGE, 2d] behind `table`) and pooled
    [slots, S // P, d], rows contiguous; returns S."""
    d = spec.head_dim
    require(keys.dim() == 3 and keys.shape[2] == 2 * d and keys.stride(2) == 1,
            lambda: f"DSA key cache: [slots, S, {2 * d}], got {tuple(keys.shape)}")
    capacity = paging.table_args(spec.block_size, table, keys)[1]
    require(pooled.dim() == 3 and pooled.shape[1:] == (capacity // spec.kpool, d)
            and pooled.stride(2) == 1,
            lambda: f"DSA pooled keys: [slots, {capacity} // {spec.kpool}, {d}], got "
                    f"{tuple(pooled.shape)}")
    return capacity


def launch(kernels, spec: DSASpec, *, qi: torch.Tensor, w: torch.Tensor, ki: torch.Tensor,
           gate: torch.Tensor, ape: torch.Tensor, slot: torch.Tensor, pos: torch.Tensor,
           keys: torch.Tensor, pooled: torch.Tensor, work: Work, out: torch.Tensor,
           rows: int, block_table: torch.Tensor | None = None) -> None:
    """Write, pool, score, select the first `rows` rows; kernels = kernel_names' six, loaded;
    work = scratch(>= rows, pooled); block_table int32 [slots, max_blocks] when paged. Grids
    depend on rows and the capacity only."""
    capacity = check(spec, keys, pooled, block_table)
    table = paging.table_args(spec.block_size, block_table, keys)[0]
    require(tuple(ape.shape) == (spec.kpool, spec.head_dim) and ape.is_contiguous(),
            lambda: f"DSA ape: contiguous [{spec.kpool}, {spec.head_dim}]")
    if rows == 0:
        return
    dsa_select.fits(spec, work, out, rows, pooled.shape[1])
    pool, score, *top = kernels
    pools = pooled.shape[1]
    pool[(rows,)](ki, gate, ape, slot, pos, keys, pooled, ki.stride(0), gate.stride(0),
                  keys.stride(0), keys.stride(1), pooled.stride(0), pooled.stride(1), capacity,
                  *table, num_warps=WARPS)
    count = dsa_select.segments(pools) > 0  # the segmented select's histogram, with the scores
    it = score_blocks(rows, pools)
    score[(rows, cdiv(max(1, pools), BP * it))](
        qi, w, slot, pos, pooled, work.scores, work.hist, work.counts, qi.stride(0), w.stride(0),
        pooled.stride(0), pooled.stride(1), work.scores.stride(0), pools, int(count), IT=it,
        CP=dsa_select.copies(rows), num_warps=WARPS)
    try:
        dsa_select.launch_select(top, work=work, slot=slot, pos=pos, out=out, rows=rows,
                                 pools=pools, counted=True)
    except BaseException:  # a launch that failed (say, its first compile) clears after it
        work.hist.zero_()
        raise
