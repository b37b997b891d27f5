"""KDA recurrence in chunked (WY / UT) form for prefill: the same contract and result as
`emitters.kda` (`semantics.kda.kda`), with the work of C tokens done by matrix products.

Inputs q, k, v, g [rows, heads*d] (act dtype or fp32; g the per-channel log decay, <= 0), b
[rows, heads] (beta logits), slot int64 [rows] (a sequence's rows contiguous and in position
order, one run per slot, padding rows slot < 0); state fp32 [slots, heads, d, d] (each head's
S stored transposed, dv x dk, as `emitters.kda` keeps it) read and written in place; out
[rows, heads*d]. Scratch (`scratch`, allocated once) holds the int32 chunk plan and the fp32
in-chunk products between the kernels (`kernel_names`, launch order):

{name}_plan, grid (1,): scans slot and splits every run into chunks of C rows counted from the
run's first row (the tail chunk shorter): the chunk table (first row of each chunk), each run's
first chunk, and the counts. Computed on the device, so a launch never syncs with the host; the
other grids are sized by bounds (runs <= min(rows, slots)) and spare programs exit.

{name}_intra, {name}_solve (`kda_chunk_intra`): beta A, Aqk and T = (I + A)^-1 of every chunk
and head. {name}_rows, {name}, {name}_out (`kda_chunk_walk`): the row products, the walk over
each run's chunks (the only serial kernel) and every chunk's output.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hyperloom.codegen.emitters import kda_chunk_intra as intra
from hyperloom.codegen.emitters import kda_chunk_walk as walk
from hyperloom.codegen.emitters.kda_chunk_intra import SUB
from hyperloom.codegen.emitters.loops import runtime_loop
from hyperloom.codegen.emitters.text import comment

CHUNK = 64  # rows per chunk: the products' tile height
BV = 64  # state columns (dv) per program of the chunk walk: a [d, BV] fp32 tile
OUT_BV = 128  # output columns per program: q e^G and Aqk read once a (chunk, head) at d 128
BK = BV  # channels per program of the row products: [C, BK] tiles beside T (U's scale blocks
# are the walk's column blocks)
# Launch shapes: the fastest of H200 sweeps at 64 heads x 128, 8192 bf16 rows (BENCHMARKS.md has
# the others): in-chunk 2 warps (4 warps under 128 or 96 registers 1.2x, 1 warp 1.8x slower;
# its grid with the row blocks fastest 1.6x), solve 2 (capped at 168 registers 1.2x),
# rows 4 (8: 1.4x), walk 8 with 3 stages over fp16 products (0.39 ms with its decay loaded
# first and no load between chunks; 0.51 at 2 stages, the chunk table and slots read per
# chunk; fp32 products fit 1 stage in 227 KiB), output 8 over 128 columns (0.236 ms; 64 columns
# at 4 warps 0.259, at 2 1.06x of that).
INTRA_WARPS, SOLVE_WARPS, ROWS_WARPS, WALK_WARPS, OUT_WARPS = 2, 2, 4, 8, 8
# the in-chunk kernel capped at 168 registers a thread (253 uncapped): 6 programs a
# multiprocessor, not 4 (in-chunk 798 -> 715 us; 128: 752, 152: 722-727, 160: 721, 176: 810,
# 184: 800, 96: 870)
INTRA_MAXNREG = 168
WALK_STAGES = 3  # over fp16 products (fp32 ones take 1)
PLAN_ROWS = 1024  # rows per step of the plan's scan


@dataclass(frozen=True)
class KDAChunkSpec:
    heads: int
    head_dim: int
    chunk: int = CHUNK

    def __post_init__(self) -> None:
        d, c = self.head_dim, self.chunk
        assert d >= 16 and d & (d - 1) == 0, "head_dim: a power of two >= 16"
        assert c >= SUB and c & (c - 1) == 0, f"chunk: a power of two >= {SUB}"


@dataclass(frozen=True)
class KDAChunkScratch:
    """Buffers for launches of up to `rows` rows over `slots` state slots."""

    count: torch.Tensor  # int32 [2]: chunks, runs
    runs: torch.Tensor  # int32 [run bound + 1]: each run's first chunk, then the chunk count
    chunks: torch.Tensor  # int32 [chunk bound]: each chunk's first row
    w: torch.Tensor  # narrow [rows, heads, d]: T (beta k exp(G))
    u: torch.Tensor  # narrow [rows, heads, d]: T (beta v) / usc, then V' = U - W S (the walk)
    usc: torch.Tensor  # fp32 [chunk bound, heads, d / BV]: u's scale, a power of two
    kd: torch.Tensor  # narrow [rows, heads, d]: K' = k exp(G_last - G)
    qe: torch.Tensor  # narrow [rows, heads, d]: q exp(G)
    decay: torch.Tensor  # fp32 [chunk bound, heads, d]: exp(G_last)
    tp: torch.Tensor  # fp32 [chunk bound, heads, 2, C, C]: beta A (T_ii on the diagonal), Aqk
    t: torch.Tensor  # narrow [chunk bound, heads, C, C]: T / tsc (lower blocks only)
    tsc: torch.Tensor  # fp32 [chunk bound, heads]: t's scale, a power of two
    hs: torch.Tensor  # narrow [chunk bound, heads, d, d]: the state each chunk starts from / hsc
    hsc: torch.Tensor  # fp32 [chunk bound, heads, d / BV]: hs's scale, a power of two
    coef: torch.Tensor  # fp32 [rows, heads, 4]: 1 / |k|, scale / |q|, beta, unused


def bounds(spec: KDAChunkSpec, rows: int, slots: int) -> tuple[int, int]:
    """(runs, chunks) at most in a launch of `rows` rows: runs of n_r rows take ceil(n_r / C)
    chunks, so sum_r ceil(n_r / C) <= (rows + runs (C - 1)) / C."""
    runs = min(rows, slots)
    return runs, (rows + runs * (spec.chunk - 1)) // spec.chunk


def narrow_dtype(act: torch.dtype) -> torch.dtype:
    """Storage of the row products, V' and the starting states for activations of dtype `act`:
    fp16 under 16-bit activations (10 mantissa bits, as the TF32 products; W, K' and q exp(G)
    are unit-norm rows times decays <= 1, U, V' and S are scaled into range), fp32 otherwise."""
    return torch.float16 if act.itemsize == 2 else torch.float32


def scratch(spec: KDAChunkSpec, rows: int, slots: int, device,
            act: torch.dtype = torch.float32) -> KDAChunkScratch:
    """Allocate once (outside a captured launch) for the largest step of activations of dtype
    `act`: 4 d row products a row and head, a [d, d] state and T [C, C] a chunk and head in
    narrow_dtype(act), the [2, C, C] products fp32; at 64 heads x 128 and 8192 rows of one
    sequence 1.9 GiB in fp32, 1.1 GiB with fp16."""
    narrow = narrow_dtype(act)
    runs, chunks = bounds(spec, rows, slots)
    h, d, c = spec.heads, spec.head_dim, spec.chunk
    i32, f32 = dict(dtype=torch.int32, device=device), dict(dtype=torch.float32, device=device)
    n = max(chunks, 1)
    w, u, kd, qe = (torch.empty((rows, h, d), dtype=narrow, device=device) for _ in range(4))
    blocks = (n, h, d // min(BV, d))
    return KDAChunkScratch(
        torch.zeros(2, **i32), torch.zeros(runs + 1, **i32), torch.zeros(n, **i32),
        w, u, torch.empty(blocks, **f32), kd, qe, torch.empty((n, h, d), **f32),
        torch.empty((n, h, 2, c, c), **f32), torch.empty((n, h, c, c), dtype=narrow, device=device),
        torch.empty((n, h), **f32), torch.empty((n, h, d, d), dtype=narrow, device=device),
        torch.empty(blocks, **f32), torch.empty((rows, h, 4), **f32))


def kernel_names(name: str) -> tuple[str, ...]:
    """(plan, in-chunk products, solve, row products, chunk walk, output) defined by
    source(name, ...), in launch order."""
    return f"{name}_plan", f"{name}_intra", f"{name}_solve", f"{name}_rows", name, f"{name}_out"


# ---------------------------------------------------------------- source

_PLAN_HELPERS = '''
@triton.jit
def _max(a, b):
    return tl.maximum(a, b)
'''


def _plan(name: str) -> str:
    head, tail = runtime_loop("base", "0", "rows", "BR", " " * 4)
    return f'''
@triton.jit
def {name}_plan(slot_ptr, rows, chunk_ptr, run_ptr, count_ptr, C: tl.constexpr,
        BR: tl.constexpr = {PLAN_ROWS}):
    n_chunks = 0
    n_runs = 0
    run_start = -1  # first row of the latest run seen
{head}        r = base + tl.arange(0, BR)
        s = tl.load(slot_ptr + r, mask=r < rows, other=-1)
        prev = tl.load(slot_ptr + r - 1, mask=(r < rows) & (r > 0), other=-1)
        first = (s >= 0) & (s != prev)  # a run's first row
        start = tl.maximum(tl.associative_scan(tl.where(first, r, -1), 0, _max), run_start)
        lead = (s >= 0) & ((r - start) % C == 0)  # a chunk's first row
        chunk = n_chunks + tl.cumsum(lead.to(tl.int32), 0) - 1
        tl.store(chunk_ptr + chunk, r, mask=lead)
        tl.store(run_ptr + n_runs + tl.cumsum(first.to(tl.int32), 0) - 1, chunk, mask=first)
        n_chunks += tl.sum(lead.to(tl.int32), 0)
        n_runs += tl.sum(first.to(tl.int32), 0)
        run_start = tl.max(start, 0)
{tail}    tl.store(run_ptr + n_runs, n_chunks)
    tl.store(count_ptr, n_chunks)
    tl.store(count_ptr + 1, n_runs)
'''


def source(name: str, spec: KDAChunkSpec, header: str = "") -> str:
    c, d = spec.chunk, spec.head_dim
    return f'''{comment(header)}import triton
import triton.language as tl

{_PLAN_HELPERS}{intra.HELPERS}{walk.HELPERS}
{_plan(name)}
{intra.intra_source(name, c, d)}
{intra.solve_source(name, c)}
{walk.rows_source(name)}
{walk.walk_source(name)}
{walk.out_source(name)}'''


# ---------------------------------------------------------------- launch


def check_operands(h: int, d: int, q, k, v, g, b, state, out, rows: int) -> None:
    """The KDA kernels' operand contract (this module's and `emitters.kda`'s)."""
    if tuple(state.shape[1:]) != (h, d, d) or state.dtype != torch.float32 \
            or not state.is_contiguous():
        raise ValueError(f"KDA state: contiguous fp32 [slots, {h}, {d}, {d}], got "
                         f"{state.dtype} {tuple(state.shape)}")
    for name, t, width in (("q", q, h * d), ("k", k, h * d), ("v", v, h * d), ("g", g, h * d),
                           ("b", b, h), ("out", out, h * d)):
        if t.shape[-1] != width or t.stride(-1) != 1 or t.shape[0] < rows:
            raise ValueError(f"KDA {name}: [>= {rows}, {width}] with the last dim contiguous, "
                             f"got {tuple(t.shape)}")


def _check(spec: KDAChunkSpec, q, k, v, g, b, state, out, work, rows) -> None:
    h, d = spec.heads, spec.head_dim
    check_operands(h, d, q, k, v, g, b, state, out, rows)
    runs, chunks = bounds(spec, rows, state.shape[0])
    c = spec.chunk
    want = {**{n: (rows, h, d) for n in ("w", "u", "kd", "qe")}, "decay": (chunks, h, d),
            "tp": (chunks, h, 2, c, c), "t": (chunks, h, c, c), "tsc": (chunks, h),
            "hs": (chunks, h, d, d),
            "hsc": (chunks, h, d // min(BV, d)), "usc": (chunks, h, d // min(BV, d)),
            "coef": (rows, h, 4), "runs": (runs + 1,),
            "chunks": (chunks,)}
    for name, shape in want.items():
        t = getattr(work, name)
        if t.dim() != len(shape) or any(a < b for a, b in zip(t.shape, shape)) \
                or tuple(t.shape[1:]) != shape[1:] or not t.is_contiguous():
            raise ValueError(f"KDA chunk scratch {name}: contiguous, at least {shape}, got "
                             f"{tuple(t.shape)} (allocate with kda_chunk.scratch)")
    narrow = work.w.dtype if work.w.dtype in (torch.float16, torch.float32) else None
    kinds = {n: getattr(work, n).dtype for n in ("w", "u", "kd", "qe", "hs", "t")}
    if set(kinds.values()) != {narrow}:
        raise ValueError(f"KDA chunk scratch dtypes: w, u, kd, qe, hs and t all fp16 or all fp32, "
                         f"got {kinds} (allocate with kda_chunk.scratch)")


def launch(kernels, spec: KDAChunkSpec, *, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           g: torch.Tensor, b: torch.Tensor, slot: torch.Tensor, state: torch.Tensor,
           out: torch.Tensor, rows: int, work: KDAChunkScratch | None = None) -> None:
    """The first `rows` rows, as emitters.kda.launch; `work` from `scratch` (allocated here if
    None: convenient for tests, not for a captured or hot loop)."""
    if rows == 0:
        return
    if work is None:
        work = scratch(spec, rows, state.shape[0], q.device, q.dtype)
    _check(spec, q, k, v, g, b, state, out, work, rows)
    plan, intra, solve, rows_k, walk, out_k = kernels
    h, d, c = spec.heads, spec.head_dim, spec.chunk
    runs, chunks = bounds(spec, rows, state.shape[0])
    tables = (work.chunks, work.count)
    products = (work.w, work.u, work.usc, work.kd, work.decay)
    starts = (work.hs, work.hsc)
    plan[(1,)](slot, rows, work.chunks, work.runs, work.count, C=c, num_warps=4)
    intra[(chunks, h, c // SUB)](q, k, g, b, slot, rows, q.stride(0), k.stride(0), g.stride(0),
                                 b.stride(0), *tables, work.tp, work.coef, H=h, D=d, C=c,
                                 num_warps=INTRA_WARPS, maxnreg=INTRA_MAXNREG)
    solve[(chunks, h)](work.tp, work.t, work.tsc, work.count, H=h, C=c, num_warps=SOLVE_WARPS)
    bk = min(BK, d)
    rows_k[(chunks, h, d // bk)](q, k, v, g, slot, rows, q.stride(0), k.stride(0), v.stride(0),
                                 g.stride(0), *tables, *products, work.qe, work.t, work.tsc,
                                 work.coef, H=h, D=d, C=c, BK=bk, num_warps=ROWS_WARPS)
    bv = min(BV, d)
    walk[(d // bv, h, runs)](slot, state, rows, state.stride(0), state.stride(1), work.chunks,
                             work.runs, work.count, *products, *starts, H=h, D=d, C=c, BV=bv,
                             num_warps=WALK_WARPS,
                             num_stages=WALK_STAGES if work.w.element_size() == 2 else 1)
    bvo = min(OUT_BV, d)
    out_k[(chunks, h, d // bvo)](slot, out, rows, out.stride(0), *tables, work.u, work.usc, work.qe,
                                work.tp, *starts, H=h, D=d, C=c, BV=bv, BVO=bvo,
                                num_warps=OUT_WARPS)
