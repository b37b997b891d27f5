"""Routed experts (`hyperloom.ir.semantics.moe.moe_experts`, SPEC "MLP") as grouped GEMMs over
the experts the step chose, five kernels in launch order:

`{name}_count`, `{name}_route` (a program per chunk of up to 1024 pairs; count only for steps
  of several chunks): the (row, choice) pairs p = t * k + c grouped by expert: histograms,
  prefix sums (each expert's first sorted position and, for row tiles of BM, its tile ends) and
  a stable scatter of p into `order` (a chunk's pairs sorted by (expert, p), placed after the
  pairs of earlier chunks). Rows whose `skip` is negative (padding) and ids out of range go to
  a bin past the last expert and are never computed.
`{name}_gate_up`: program (tile, column block): a tile is BM sorted pairs of one expert (an
  expert's part-filled last tile computes only BM / 2 or BM / 4 rows when they hold it); h[pos]
  = silu(min(g, L)) * clamp(u, -L, L) of x[t] @ wg[e]^T, wu[e]^T (h [pairs, I], x's dtype).
  The stacks come packed (`ir.derive.pack_k`: [E, K / R, N, R]), so a K step of a column block
  reads contiguous runs of R * BN values, not BN rows of BK values a row apart.
`{name}_down`: part[p] = weight[p] * (h[pos] @ wd[e]^T) (part [pairs, H], x's dtype).
`{name}`: out[t] = sum over c of part[t * k + c], in choice order (deterministic, no atomics).

Each tile reads its expert's weight columns once, so experts chosen by up to BM rows are read
once per step whatever the row count. Few rows per expert (decode, verify): BM = 16 and narrow
column blocks (GEMV tiling); many (prefill): tensor-core tiles. Grids are upper bounds set by
`rows` alone (no host sync, capturable): tiles past the step's last exit at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hyperloom.codegen.emitters.ints import cdiv, next_power_of_2
from hyperloom.codegen.emitters.matmul_tiles import SMEM_BYTES, fit_smem
from hyperloom.codegen.emitters.text import comment, pdl
from hyperloom.config import CONFIG
from hyperloom.errors import require
from hyperloom.ir.derive import pack_run
from hyperloom.passes.kernel_plan import MOE_ROUTE_PAIRS

GEMV_ROWS = 16  # at most this many rows per expert on average: GEMV tiling
# steps of at most FEW_ROWS rows read 256-deep K chunks: on the H200 at GLM-5.3-Flash's size,
# batch 1 gate_up + down 69.4 + 41.4 us at 128 deep (4 stages) -> 65.7 + 35.5 at 256 (3 stages);
# at batch 64 it is 1760 + 885 against 1773 + 884 (bench/results sweep notes: BENCHMARKS)
FEW_ROWS = 4
COMBINE_BLOCK = 1024
# prefill's 128-row tiles stream expert weights (~114 rows an expert at 4096 tokens: bandwidth
# bound), so they keep a 4th 48 KB stage in flight: on the H200 at GLM-5.3-Flash's size, 4096
# tokens, gate_up + down 2824 + 1516 us at 3 stages (144 KB) -> 2719 + 1371 at 4 (BENCHMARKS);
# 16-bit operands only (fp32 tiles keep SMEM_BYTES: their epilogue scratch is twice as large)
PREFILL_SMEM = 192 * 1024
SUB_ROWS = 32  # the fewest rows a part-filled tensor-core tile computes (BM / 2, BM / 4)
ROUTE_BLOCKS = (128, MOE_ROUTE_PAIRS)  # pairs the route kernel sorts at a time: fewest, most


@dataclass(frozen=True)
class ExpertsSpec:
    experts: int
    hidden: int
    inter: int
    top_k: int
    limit: float | None

    @property
    def bins(self) -> int:
        """Histogram bins: the experts and one for pairs that are not computed."""
        return next_power_of_2(self.experts + 1)


def kernel_names(name: str) -> tuple[str, ...]:
    return f"{name}_count", f"{name}_route", f"{name}_gate_up", f"{name}_down", name


def _dot(a: str, b: str, acc: str) -> str:
    if CONFIG.interpret:  # the interpreter mis-computes low-precision dots: upcast both
        return f"tl.dot({a}.to(tl.float32), {b}.to(tl.float32), {acc})"
    return f"tl.dot({a}.to({b}.dtype), {b}, {acc})"


_HELPERS = '''
@triton.jit
def _expert_of(ids_ptr, skip_ptr, p, pairs, si, ss, K: tl.constexpr, E: tl.constexpr,
               HAS_SKIP: tl.constexpr):
    """The expert of pairs p; E (the spare bin) past the end, for skipped rows, bad ids."""
    ok = p < pairs
    t = p // K
    e = tl.load(ids_ptr + t * si + p % K, mask=ok, other=E)
    if HAS_SKIP:
        ok = ok & (tl.load(skip_ptr + t * ss, mask=ok, other=-1) >= 0)
    return tl.where(ok & (e >= 0) & (e < E), e, E)


@triton.jit
def _tile_live(meta_ptr, e, pid_m, BM: tl.constexpr, EB: tl.constexpr):
    """(rows of expert e before row tile pid_m, rows of the expert)."""
    count = tl.load(meta_ptr + e)
    first = tl.load(meta_ptr + 2 * EB + e) - (count + BM - 1) // BM
    return (pid_m - first) * BM, count


@triton.jit
def _tile_rows(meta_ptr, order_ptr, e, r0, count, BMX: tl.constexpr, EB: tl.constexpr):
    """Sorted positions, their mask and pair ids of BMX rows from the expert's row r0."""
    r = r0 + tl.arange(0, BMX)
    ok = r < count
    pos = tl.load(meta_ptr + EB + e) + r
    pair = tl.load(order_ptr + pos, mask=ok, other=0)
    return pos.to(tl.int64), ok, pair


@triton.jit
def _tile_of(pid, tiles_ub, num_n, GROUP_M: tl.constexpr):
    """(row tile, column block) of program pid: GROUP_M row tiles share column blocks in L2."""
    group = GROUP_M * num_n
    first_m = (pid // group) * GROUP_M
    size_m = tl.minimum(tiles_ub - first_m, GROUP_M)
    return first_m + (pid % group) % size_m, (pid % group) // size_m


@triton.jit
def _expert_at(meta_ptr, pid_m, EB: tl.constexpr):
    """The expert of row tile pid_m: how many experts' tiles all end at or before it (E or more
    when pid_m is past the last tile)."""
    ends = tl.load(meta_ptr + 2 * EB + tl.arange(0, EB))
    return tl.sum((ends <= pid_m).to(tl.int32), 0)
'''


def _route(name: str, spec: ExpertsSpec) -> str:
    """`{name}_count` (program c: the expert histogram of pairs [c BLOCK, (c + 1) BLOCK)), run
    only when a step has several chunks, and `{name}_route` (program c: chunk c's pairs sorted
    by (expert, p) and placed after the same experts' pairs of earlier chunks)."""
    consts = (f"E: tl.constexpr = {spec.experts}, EB: tl.constexpr = {spec.bins}, "
              f"K: tl.constexpr = {spec.top_k}")
    return f'''
@triton.jit(do_not_specialize=["pairs"])
def {name}_count(ids_ptr, skip_ptr, counts_ptr, pairs, si, ss, BLOCK: tl.constexpr,
        HAS_SKIP: tl.constexpr, {consts}):
{pdl("    ")}    c = tl.program_id(0)
    e = _expert_of(ids_ptr, skip_ptr, c * BLOCK + tl.arange(0, BLOCK), pairs, si, ss, K, E,
                   HAS_SKIP)
    tl.store(counts_ptr + c * EB + tl.arange(0, EB), tl.histogram(e, EB))


@triton.jit(do_not_specialize=["pairs", "chunks"])
def {name}_route(ids_ptr, skip_ptr, counts_ptr, order_ptr, meta_ptr, pairs, chunks, si, ss,
        BM: tl.constexpr, BLOCK: tl.constexpr, HAS_SKIP: tl.constexpr, {consts}):
{pdl("    ")}    c = tl.program_id(0)
    eb = tl.arange(0, EB)
    lane = tl.arange(0, BLOCK)
    e = _expert_of(ids_ptr, skip_ptr, c * BLOCK + lane, pairs, si, ss, K, E, HAS_SKIP)
    hist = tl.histogram(e, EB)
    total = hist
    before = tl.zeros([EB], dtype=tl.int32)  # pairs of each expert in earlier chunks
    other = 0
    while other < chunks:  # the other chunks' histograms (from {name}_count)
        row = tl.load(counts_ptr + other * EB + eb, mask=(eb < EB) & (other != c), other=0)
        total += row
        before += tl.where(other < c, row, 0)
        other += 1
    total = tl.where(eb < E, total, 0)
    start = tl.cumsum(total, 0) - total  # each expert's first sorted position
    if c == 0:
        tl.store(meta_ptr + eb, total)
        tl.store(meta_ptr + EB + eb, start)
        tl.store(meta_ptr + 2 * EB + eb, tl.cumsum((total + BM - 1) // BM, 0))  # tile ends
    # the n-th pair of expert e in this chunk's (expert, p) order lands at stage[e] + its
    # sorted index (n + the chunk's pairs of experts below e)
    stage = meta_ptr + (3 + c) * EB
    tl.store(stage + eb, start + before - (tl.cumsum(hist, 0) - hist))
    tl.debug_barrier()
    key = tl.sort(e * BLOCK + lane)
    es = key // BLOCK
    dest = tl.load(stage + es, mask=es < E, other=0) + lane
    tl.store(order_ptr + dest, c * BLOCK + key % BLOCK, mask=es < E)
'''


def _grouped(name: str, spec: ExpertsSpec, kind: str) -> str:
    """The grouped GEMM of gate_up (x rows -> h rows, swiglu) or down (h rows -> part rows):
    `_{kind}_rows` computes BMX rows of a tile; the kernel picks BMX, the fewest of BM,
    BM / 2, BM / 4 (at least SUB_ROWS) that hold the tile's live rows, so an expert's last,
    part-filled tile does not pay a whole tile's products."""
    up = kind == "gate_up"
    n, k = (spec.inter, spec.hidden) if up else (spec.hidden, spec.inter)
    params = "x_ptr, wg_ptr, wu_ptr, h_ptr" if up else "h_ptr, wd_ptr, wt_ptr, part_ptr"
    stride = "sx" if up else "sw"
    a_rows = "x_ptr + (pair // K).to(tl.int64)[:, None] * sx" if up \
        else f"h_ptr + pos[:, None] * {k}"
    weights = [("acc_g", "wg_ptr"), ("acc_u", "wu_ptr")] if up else [("acc", "wd_ptr")]
    loads = "".join(f"        b{i} = tl.load({w} + w_off + k0 * N, mask=b_ok, other=0.0)\n"
                    f"        {acc} = {_dot('a', f'b{i}', acc)}\n"
                    for i, (acc, w) in enumerate(weights))
    zeros = "".join(f"    {acc} = tl.zeros([BMX, BN], dtype=tl.float32)\n" for acc, _ in weights)
    consts = (f"E: tl.constexpr = {spec.experts}, EB: tl.constexpr = {spec.bins}, "
              f"K: tl.constexpr = {spec.top_k}, N: tl.constexpr = {n}, KD: tl.constexpr = {k}, "
              f"R: tl.constexpr = {pack_run(k)}")
    call = f"_{kind}_rows({params}, order_ptr, meta_ptr, e, r0, count, pid_n, {stride}"
    return f'''
@triton.jit
def _{kind}_rows({params}, order_ptr, meta_ptr, e, r0, count, pid_n, {stride},
        BMX: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, {consts}):
    pos, m_ok, pair = _tile_rows(meta_ptr, order_ptr, e, r0, count, BMX, EB)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    n_ok = rn < N
    a_rows = {a_rows}
    # packed [E, KD / R, N, R]: K step k0 of column n at e N KD + k0 N + n R (+ its run)
    w_off = e.to(tl.int64) * N * KD + rn.to(tl.int64)[None, :] * R + (rk // R * (N * R)
                                                                       + rk % R)[:, None]
{zeros}    for k0 in range(0, KD, BK):
        kk = k0 + rk
        k_ok = kk < KD
        b_ok = k_ok[:, None] & n_ok[None, :]
        a = tl.load(a_rows + kk[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
{loads}    o_ok = m_ok[:, None] & n_ok[None, :]
{_gate_up_epilogue(spec) if up else _down_epilogue()}

@triton.jit(do_not_specialize=["tiles_ub"])
def {name}_{kind}({params}, order_ptr, meta_ptr, tiles_ub, {stride}, BM: tl.constexpr,
        BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
        SUB: tl.constexpr = {SUB_ROWS}, {consts}):
{pdl("    ")}    pid_m, pid_n = _tile_of(tl.program_id(0), tiles_ub, tl.cdiv(N, BN), GROUP_M)
    e = _expert_at(meta_ptr, pid_m, EB)
    if e >= E:  # past the step's last tile
        return
    r0, count = _tile_live(meta_ptr, e, pid_m, BM, EB)
    live = count - r0
    if BM // 4 >= SUB:
        if live <= BM // 4:
            {call}, BM // 4, BN, BK)
        elif live <= BM // 2:
            {call}, BM // 2, BN, BK)
        else:
            {call}, BM, BN, BK)
    elif BM // 2 >= SUB:
        if live <= BM // 2:
            {call}, BM // 2, BN, BK)
        else:
            {call}, BM, BN, BK)
    else:
        {call}, BM, BN, BK)
'''


def _gate_up_epilogue(spec: ExpertsSpec) -> str:
    lim = spec.limit
    clamp = "" if lim is None else (
        f"    acc_g = tl.minimum(acc_g, {float(lim)!r})\n"
        f"    acc_u = tl.minimum(tl.maximum(acc_u, {-float(lim)!r}), {float(lim)!r})\n")
    return (f"{clamp}    h = acc_g * tl.sigmoid(acc_g) * acc_u\n"
            "    tl.store(h_ptr + pos[:, None] * N + rn[None, :], "
            "h.to(h_ptr.dtype.element_ty), mask=o_ok)\n")


def _down_epilogue() -> str:
    return ("    wt = tl.load(wt_ptr + (pair // K) * sw + pair % K, mask=m_ok, other=0.0)\n"
            "    out = part_ptr + pair.to(tl.int64)[:, None] * N + rn[None, :]\n"
            "    tl.store(out, (acc * wt[:, None]).to(part_ptr.dtype.element_ty), mask=o_ok)\n")


def _combine(name: str, spec: ExpertsSpec) -> str:
    return f'''
@triton.jit
def {name}(part_ptr, ids_ptr, skip_ptr, out_ptr, si, ss, so, BH: tl.constexpr,
        HAS_SKIP: tl.constexpr, E: tl.constexpr = {spec.experts},
        H: tl.constexpr = {spec.hidden}, K: tl.constexpr = {spec.top_k}):
{pdl("    ")}    t = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BH + tl.arange(0, BH)
    ok = c < H
    if HAS_SKIP:
        ok = ok & (tl.load(skip_ptr + t * ss) >= 0)
    acc = tl.zeros([BH], dtype=tl.float32)
    for j in tl.static_range(K):
        e = tl.load(ids_ptr + t * si + j)
        use = ok & (e >= 0) & (e < E)
        acc += tl.load(part_ptr + (t * K + j) * H + c, mask=use, other=0.0).to(tl.float32)
    tl.store(out_ptr + t * so + c, acc.to(out_ptr.dtype.element_ty), mask=c < H)
'''


def source(name: str, spec: ExpertsSpec, header: str = "") -> str:
    return (f"{comment(header)}import triton\nimport triton.language as tl\n\n{_HELPERS}\n"
            f"{_route(name, spec)}\n{_grouped(name, spec, 'gate_up')}\n"
            f"{_grouped(name, spec, 'down')}\n{_combine(name, spec)}")


# ---------------------------------------------------------------- launch


@dataclass(frozen=True)
class Tiles:
    bm: int
    bn: int  # gate_up's column block (two accumulators); down's is bn_down
    bn_down: int
    bk: int
    group_m: int
    warps: int
    stages: int


def tiles(spec: ExpertsSpec, rows: int, gemv: bool | None = None, x_bytes: int = 2,
          w_bytes: int = 2) -> Tiles:
    """GEMV tiling when experts average at most GEMV_ROWS rows (or `gemv`), else tensor-core
    tiles (64 rows when experts average at most 64, else 128)."""
    per_expert = rows * spec.top_k / spec.experts
    if gemv is None:
        gemv = rows <= GEMV_ROWS or per_expert <= GEMV_ROWS
    if gemv and rows <= FEW_ROWS:  # few experts, few programs: longer K chunks in flight
        t = Tiles(16, 32, 32, 256, 1, 4, 3)
    elif gemv:  # one 16-row tile per expert; ~2 programs a multiprocessor at decode
        t = Tiles(16, 32, 32, 128, 1, 4, 4)
    elif per_expert <= 64:
        t = Tiles(64, 64, 128, 64, 8, 4, 3)  # gate_up: two 64 x 64 accumulators, 128 registers
    elif max(x_bytes, w_bytes) <= 2:
        t = Tiles(128, 128, 256, 64, 8, 8, 4)
    else:  # 32-bit operands: half the columns, so 64-deep K steps fit twice
        t = Tiles(128, 64, 128, 64, 8, 8, 4)
    run = max(pack_run(spec.hidden), pack_run(spec.inter))  # K steps hold whole packed runs
    bk = min(t.bk, max(16, run, next_power_of_2(min(spec.hidden, spec.inter))))
    stages, bk = fit_smem(t.stages, bk, t.bm * x_bytes + max(2 * t.bn, t.bn_down) * w_bytes,
                          smem_budget(t.bm, x_bytes, w_bytes), least_bk=run)
    return Tiles(t.bm, t.bn, t.bn_down, bk, t.group_m, t.warps, stages)


def smem_budget(bm: int, x_bytes: int, w_bytes: int) -> int:
    """Shared memory for a tiling's pipelined operand tiles: PREFILL_SMEM for the 128-row tiles
    of 16-bit operands (as measured), else the GEMMs' SMEM_BYTES."""
    return PREFILL_SMEM if bm == 128 and x_bytes == w_bytes == 2 else SMEM_BYTES


@dataclass(frozen=True)
class Work:
    """Scratch of up to `rows` rows: sorted pair ids; per-chunk histograms [chunks, bins];
    expert counts, first positions and tile ends, then a staging row per chunk [3 + chunks,
    bins]; h [pairs, I] and the per-pair outputs [pairs, H], both in x's dtype."""
    order: torch.Tensor
    counts: torch.Tensor
    meta: torch.Tensor
    h: torch.Tensor
    part: torch.Tensor


def _route_block(pairs: int) -> int:
    lo, hi = ROUTE_BLOCKS
    return max(lo, min(hi, next_power_of_2(pairs)))


def _chunks(pairs: int) -> int:
    return cdiv(pairs, _route_block(pairs))


def scratch(spec: ExpertsSpec, rows: int, dtype: torch.dtype, device) -> Work:
    """Allocate once, outside any captured launch; serves every layer of this spec."""
    pairs, i32 = rows * spec.top_k, dict(dtype=torch.int32, device=device)
    chunks = _chunks(pairs)  # the most of any step of up to `rows` rows
    return Work(torch.empty(pairs, **i32), torch.zeros((chunks, spec.bins), **i32),
                torch.zeros((3 + chunks, spec.bins), **i32),
                torch.empty((pairs, spec.inter), dtype=dtype, device=device),
                torch.empty((pairs, spec.hidden), dtype=dtype, device=device))


def _check(spec: ExpertsSpec, x, weights, ids, wg, wu, wd, out, rows: int, work: Work) -> None:
    e, h, i, k = spec.experts, spec.hidden, spec.inter, spec.top_k
    for name, t in (("x", x), ("out", out)):
        require(t.dim() == 2 and t.shape[1] == h and t.shape[0] >= rows and t.stride(1) == 1,
                lambda: f"experts {name}: [>= {rows}, {h}], got {tuple(t.shape)}")
    for name, t, dt in (("weights", weights, torch.float32), ("ids", ids, torch.int32)):
        require(t.dim() == 2 and t.shape[1] == k and t.shape[0] >= rows and t.stride(1) == 1
                and t.dtype == dt,
                lambda: f"experts {name}: {dt} [>= {rows}, {k}], got {t.dtype} {tuple(t.shape)}")
    for name, t, (n, kd) in (("wg", wg, (i, h)), ("wu", wu, (i, h)), ("wd", wd, (h, i))):
        shape = (e, kd // pack_run(kd), n, pack_run(kd))
        require(tuple(t.shape) == shape and t.is_contiguous(),
                lambda: f"experts {name}: contiguous {list(shape)} (ir.derive.pack_k of "
                        f"[{e}, {n}, {kd}]), got {tuple(t.shape)}")
    require(work.order.numel() >= rows * k and work.h.shape[1] == i
            and work.counts.shape[0] >= _chunks(rows * k),
            lambda: f"experts scratch for {rows} rows: scratch(spec, >= {rows}, ...) allocates it")


def launch(kernels, spec: ExpertsSpec, *, x: torch.Tensor, weights: torch.Tensor,
           ids: torch.Tensor, wg: torch.Tensor, wu: torch.Tensor, wd: torch.Tensor,
           out: torch.Tensor, rows: int, work: Work, skip: torch.Tensor | None = None,
           gemv: bool | None = None) -> None:
    """out[:rows] = the routed experts of the first `rows` rows; rows with skip < 0 get zeros.
    wg, wu, wd: the stacks packed by `ir.derive.pack_k`. `gemv` forces a tiling (None: by rows
    per expert)."""
    _check(spec, x, weights, ids, wg, wu, wd, out, rows, work)
    if rows <= 0:
        return
    count, route, gate_up, down, combine = kernels
    t = tiles(spec, rows, gemv, x.element_size(), wg.element_size())
    pairs, has_skip = rows * spec.top_k, skip is not None
    skip = ids if skip is None else skip
    block, chunks = _route_block(pairs), _chunks(pairs)
    rmeta = dict(BLOCK=block, HAS_SKIP=has_skip, num_warps=8 if block > 256 else 4)
    if chunks > 1:  # a lone chunk's route program counts its own pairs
        count[(chunks,)](ids, skip, work.counts, pairs, ids.stride(0), skip.stride(0), **rmeta)
    route[(chunks,)](ids, skip, work.counts, work.order, work.meta, pairs, chunks,
                     ids.stride(0), skip.stride(0), BM=t.bm, **rmeta)
    # each expert holds at most `rows` pairs: tiles <= cdiv(pairs, BM) + one partial per expert
    ub = min(cdiv(pairs, t.bm) + min(spec.experts, pairs),
             spec.experts * cdiv(rows, t.bm))
    meta = dict(BM=t.bm, BK=t.bk, GROUP_M=t.group_m, num_warps=t.warps, num_stages=t.stages)
    gate_up[(ub * cdiv(spec.inter, t.bn),)](
        x, wg, wu, work.h, work.order, work.meta, ub, x.stride(0), BN=t.bn, **meta)
    down[(ub * cdiv(spec.hidden, t.bn_down),)](
        work.h, wd, weights, work.part, work.order, work.meta, ub, weights.stride(0),
        BN=t.bn_down, **meta)
    block = COMBINE_BLOCK // 4 if rows <= GEMV_ROWS else COMBINE_BLOCK  # more programs
    bh = min(block, next_power_of_2(spec.hidden))
    combine[(rows, cdiv(spec.hidden, bh))](
        work.part, ids, skip, out, ids.stride(0), skip.stride(0), out.stride(0), BH=bh,
        HAS_SKIP=has_skip, num_warps=4)
