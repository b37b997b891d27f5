"""KDA recurrence in chunked (WY / UT) form for prefill: the same contract and result as
`emitters.kda` (`semantics.kda.kda`), with the work of C tokens done by matrix products.

Inputs q, k, v, g [rows, heads*d] (act dtype or fp32; g the per-channel log decay, <= 0), b
[rows, heads] (beta logits), slot int64 [rows] (a sequence's rows contiguous and in position
order, one run per slot, padding rows slot < 0); state fp32 [slots, heads, d, d] (dk x dv) read
and written in place; out [rows, heads*d]. Scratch (`scratch`, allocated once) holds the int32
chunk plan and the fp32 in-chunk products between the kernels (`kernel_names`, launch order):

{name}_plan, grid (1,): scans slot and splits every run into chunks of C rows counted from the
run's first row (the tail chunk shorter): the chunk table (first row of each chunk), each run's
first chunk, and the counts. Computed on the device, so a launch never syncs with the host; the
other grids are sized by bounds (runs <= min(rows, slots)) and spare programs exit.

{name}_intra, grid (chunk bound, heads, C / 16): one 16-row block i of one chunk and head, over
the head's whole width (every product is d deep). With G the cumulative log decay from the
chunk's start, A[i, j] = beta_i sum_c k_i k_j exp(G_i - G_j) (j < i) and Aqk the same with q_i
(j <= i), block row i: each block left of the diagonal a tl.dot of both sides decayed to the
boundary between them (every exponent a sum of g over a span of rows, never positive: g <= 0);
the diagonal block a tl.dot of k exp(G) and k exp(-G) where the block's decay keeps both within
fp32 (STEEP), else a masked [DK, 16, 16] product of exponents <= 0, a channel tile at a time.
Nothing overflows however steep the decay. Stores beta A's blocks, with T_ii = (I + A_ii)^-1 (a
product of four factors) in place of the diagonal one, Aqk's blocks, and each row's (1 / |k|,
scale / |q|, beta).

{name}_solve, grid (chunk bound, heads): T = (I + A)^-1 from those blocks, T_ij = -T_ii
sum_{j <= l < i} A_il T_lj, stored in place of A ([C, C], lower blocks).

{name}_rows, grid (chunk bound, heads, d / BK): one chunk, head and BK channels, with chunk-wide
products: per row W = T (beta k exp(G)), U = T (beta v), q exp(G), K' = k exp(G_last - G), and
exp(G_last) per chunk. Products on tensor cores (fp16 operands under 16-bit activations,
else TF32), as the in-chunk kernel's products of A and Aqk in TF32; T_ii's factors and the
solve's products stay full fp32.

{name}, grid (d / BV, heads, run bound): walks its run's chunks in order with S[:, BV columns]
in registers (fp32), loaded once from state[slot] and stored once; chunk i's rows lie C (i -
first) rows past the run's first, so no load sits between chunks; per chunk it stores S (the
chunk's starting state), then V' = U - W S over U, then S = exp(G_last) S + K'^T V'.

{name}_out, grid (chunk bound, heads, d / OUT_BV): every chunk in parallel,
o = (q exp(G)) S + Aqk V' (the chunk's starting state and its deltas).

Under 16-bit activations every row product, V' and the starting states are stored in fp16
(`narrow_dtype`: 10 mantissa bits, as TF32) and the row products', the walk's and the
output's products take fp16 operands. T, v, U, V' and S are divided by a power of two that
brings the largest entry of each (chunk, head[, column block]) to 2^14 (`_scale`): fp16's range
never clips them. On the H200 at 64 heads x 128 and 8192 bf16 rows: out 1.9e-3 from the fp32
reference, state 3.7e-4 (TF32 row products: 2.0e-3, 5.1e-4; fp32 U and V' and TF32 walk
products: 2.5e-3, 8.0e-4).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hyperloom.codegen.emitters.loops import runtime_loop
from hyperloom.codegen.emitters.text import comment, wrap

CHUNK = 64  # rows per chunk: the products' tile height
SUB = 16  # rows per block of the in-chunk matrices (the smallest tl.dot tile)
DK = 16  # channels per step of a steep diagonal block's exact [DK, 16, 16] product
BV = 64  # state columns (dv) per program of the chunk walk: a [d, BV] fp32 tile
OUT_BV = 128  # output columns per program: q e^G and Aqk read once a (chunk, head) at d 128
BK = BV  # channels per program of the row products: [C, BK] tiles beside T (U's scale blocks
# are the walk's column blocks)
# Launch shapes: the fastest of H200 sweeps at 64 heads x 128, 8192 bf16 rows (BENCHMARKS.md has
# the others): in-chunk 2 warps (TF32 products; 4 warps 1.65x, 1 warp 1.5x slower), solve 2,
# rows 4 (8: 1.4x), walk 8 with 3 stages over fp16 products (0.39 ms with its decay loaded
# first and no load between chunks; 0.51 at 2 stages, the chunk table and slots read per
# chunk; fp32 products fit 1 stage in 227 KiB), output 8 over 128 columns (0.236 ms; 64 columns
# at 4 warps 0.259, at 2 1.06x of that).
INTRA_WARPS, SOLVE_WARPS, ROWS_WARPS, WALK_WARPS, OUT_WARPS = 2, 2, 4, 8, 8
WALK_STAGES = 3  # over fp16 products (fp32 ones take 1)
# a diagonal block whose log decay stays above -STEEP in every channel is one product of
# k exp(G) and k exp(-G): factors within [e^-64, e^64], products and their sums finite, nothing
# below fp32's normal range; a steeper block takes the exact [DK, 16, 16] form
STEEP = 64
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
    tp: torch.Tensor  # fp32 [chunk bound, heads, 2, C, C]: T, Aqk (lower blocks only)
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
    `act`: 4 d row products a row and head and a [d, d] state a chunk and head in
    narrow_dtype(act), the [2, C, C] products fp32; at 64 heads x 128 and 8192 rows of one
    sequence 1.8 GiB in fp32, 1.0 GiB with fp16."""
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
        torch.empty((n, h, 2, c, c), **f32), torch.empty((n, h, d, d), dtype=narrow, device=device),
        torch.empty(blocks, **f32), torch.empty((rows, h, 4), **f32))


def kernel_names(name: str) -> tuple[str, ...]:
    """(plan, in-chunk products, solve, row products, chunk walk, output) defined by
    source(name, ...), in launch order."""
    return f"{name}_plan", f"{name}_intra", f"{name}_solve", f"{name}_rows", name, f"{name}_out"


# ---------------------------------------------------------------- source

HELPERS = '''
@triton.jit
def _max(a, b):
    return tl.maximum(a, b)


@triton.jit
def _mm(a, b):
    """The solve's products and T_ii's factors in full fp32 (the solve amplifies the rounding
    of what it reads)."""
    return tl.dot(a, b, input_precision="ieee")


@triton.jit
def _tc(a, b):
    """The in-chunk products of A and Aqk and the row products on tensor cores (tf32, as the
    chunk walk's: the note on the row products)."""
    return tl.dot(a, b, input_precision="tf32")


@triton.jit
def _scale(x):
    """A power of two sc with max |x| / sc in (2^13, 2^14] (1 where x is all 0): x / sc fits
    fp16 whatever x's range, the largest entry 2^14 below fp16's largest and 2^28 above its
    smallest normal."""
    a = tl.max(tl.max(tl.abs(x), 1), 0)
    return tl.where(a > 0, tl.exp2(tl.ceil(tl.log2(a)) - 14.0), 1.0)


@triton.jit
def _sums(g, after: tl.constexpr, exact16: tl.constexpr):
    """Each column's sum of g [R, n] over the rows <= r (after: > r), as one product with a
    triangle of ones on tensor cores; g of 16-bit inputs is exact in TF32 (exact16), fp32 g
    takes full-precision products. A sum over the rows after r, not a difference of prefixes,
    so no exponent carries the rounding of a larger one."""
    i = tl.arange(0, g.shape[0])
    if after:
        tri = tl.where(i[:, None] < i[None, :], 1.0, 0.0)
    else:
        tri = tl.where(i[:, None] >= i[None, :], 1.0, 0.0)
    if exact16:
        return tl.dot(tri, g, input_precision="tf32")
    return tl.dot(tri, g, input_precision="ieee")


@triton.jit
def _tile(x_ptr, r, m, sx, col):
    """Rows r (live where m) of x at columns col, fp32; dead rows read 0."""
    x = tl.load(x_ptr + r[:, None].to(tl.int64) * sx + col[None, :], mask=m[:, None], other=0.)
    return x.to(tl.float32)


@triton.jit
def _put(p, x, m):
    """Store a row product in its scratch's dtype."""
    tl.store(p, x.to(p.dtype.element_ty), mask=m)


@triton.jit
def _get(p, m):
    """Load a row product as fp32; dead rows read 0."""
    return tl.load(p, mask=m, other=0.).to(tl.float32)


@triton.jit
def _rnorm(x):
    """1 / sqrt(|x|^2 + 1e-6) of each row of a head's [rows, D] tile (semantics.kda.l2norm)."""
    return 1.0 / tl.sqrt(tl.sum(x * x, axis=1) + 1e-6)


@triton.jit
def _diag(k, q, gl, BC: tl.constexpr):
    """A diagonal block over one channel tile, exactly: (sum_c k_i k_j e, sum_c q_i k_j e) with
    e = exp(gl_i - gl_j), for j < i and j <= i; gl is cumulative, so masked exponents are <= 0.
    Channels lead the [DK, BC, BC] product so that its sums stay within a thread."""
    kt = tl.trans(k)
    gt = tl.trans(gl)
    i = tl.arange(0, BC)
    low = i[:, None] >= i[None, :]
    e = tl.exp(tl.where(low[None, :, :], gt[:, :, None] - gt[:, None, :], float("-inf")))
    kj = kt[:, None, :] * e  # [DK, BC, BC]
    a = tl.where(i[:, None] > i[None, :], tl.sum(kt[:, :, None] * kj, axis=0), 0.)
    return a, tl.sum(tl.trans(q)[:, :, None] * kj, axis=0)


@triton.jit
def _unit_lower_inv(a, BC: tl.constexpr):
    """(I + a)^-1 for a strictly lower [BC, BC] (nilpotent: a^16 = 0) as the product
    (I - a)(I + a^2)(I + a^4)(I + a^8) = sum_{n < 16} (-a)^n."""
    tl.static_assert(BC == 16, "four factors cover a 16-row block")
    i = tl.arange(0, BC)
    eye = tl.where(i[:, None] == i[None, :], 1., 0.)
    t = eye - a
    p = _mm(a, a)
    t = _mm(t, eye + p)
    p = _mm(p, p)
    t = _mm(t, eye + p)
    p = _mm(p, p)
    return _mm(t, eye + p)
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


def _block(b: str, at: str, pad: str = " " * 4) -> str:
    """Rows r{b} of block `at` of the chunk and their live mask m{b}."""
    return (f"{pad}r{b} = row0 + {at} * BC + j\n"
            f"{pad}m{b} = (r{b} < rows) & (tl.load(slot_ptr + r{b}, mask=r{b} < rows, other=-1)"
            " == s)\n")


_OWN_BLOCK = """    k = _tile(k_ptr, ri, mi, sk, cols)  # [BC, D]: the head's whole width
    q = _tile(q_ptr, ri, mi, sq, cols)
    gi = _tile(g_ptr, ri, mi, sg, cols)  # loaded with k and q: their latencies overlap
    bi = tl.load(b_ptr + ri.to(tl.int64) * sb + h, mask=mi, other=0.)
    nki = _rnorm(k)
    nqi = _rnorm(q) * Q_SCALE
    bi = tl.where(mi, tl.sigmoid(bi.to(tl.float32)), 0.)
    cf = coef_ptr + (ri.to(tl.int64) * H + h) * 4  # for the row products
    tl.store(cf, nki, mask=mi)
    tl.store(cf + 1, nqi, mask=mi)
    tl.store(cf + 2, bi, mask=mi)
    k *= nki[:, None]
    q *= nqi[:, None]
    gl = _sums(gi, False, G16)  # log decay from the block's start
    ki = k * tl.exp(gl)
    qi = q * tl.exp(gl)
"""

# the diagonal block: one product of k exp(G) and k exp(-G) while every channel's decay in the
# block stays above -STEEP, else the exact form a channel tile at a time (rereading the tile)
_DIAGONAL = """    if tl.min(gl) >= -STEEP:
        kn = tl.trans(k * tl.exp(-gl))
        ad = _tc(ki, kn)  # masked when stored
        pd = _tc(qi, kn)
    else:
        ad = tl.zeros([BC, BC], dtype=tl.float32)
        pd = tl.zeros([BC, BC], dtype=tl.float32)
        for c0 in range(0, D, DK):
            col = h * D + c0 + tl.arange(0, DK)
            glt = tl.cumsum(_tile(g_ptr, ri, mi, sg, col), 0)
            da, dq = _diag(_tile(k_ptr, ri, mi, sk, col) * nki[:, None],
                           _tile(q_ptr, ri, mi, sq, col) * nqi[:, None], glt, BC)
            ad += da
            pd += dq
"""


def _left_blocks(nc: int) -> str:
    """Blocks a{J}, p{J} left of the diagonal (J < ib), each one product over the head's width
    of both sides decayed to the boundary between the blocks; J descends so that `span` sums g
    over the blocks between J and ib (every exponent a sum of g <= 0)."""
    out = ["".join(f"    a{x} = tl.zeros([BC, BC], dtype=tl.float32)\n"
                   f"    p{x} = tl.zeros([BC, BC], dtype=tl.float32)\n" for x in range(nc - 1)),
           "    span = tl.zeros([1, D], dtype=tl.float32)\n"]
    for x in range(nc - 2, -1, -1):
        out.append(f"    if {x} < ib:\n" + _block(str(x), str(x), " " * 8) +
                   f"        gj = _tile(g_ptr, r{x}, m{x}, sg, cols)\n"
                   "        gt = tl.sum(gj, 0)[None, :]\n"
                   f"        kj = _tile(k_ptr, r{x}, m{x}, sk, cols)\n"
                   "        kj *= _rnorm(kj)[:, None] * tl.exp(_sums(gj, True, G16) + span)\n"
                   f"        a{x} = _tc(ki, tl.trans(kj))\n"
                   f"        p{x} = _tc(qi, tl.trans(kj))\n"
                   "        span += gt\n")
    return "".join(out)


def _store_block(nc: int) -> str:
    """beta A, T_ii = (I + A_ii)^-1 in A's diagonal block (the solve reads no other use of
    it), and Aqk: row block ib of the chunk's [2, C, C] pair."""
    out = ["    ad = tl.where(j[:, None] > j[None, :], ad, 0.) * bi[:, None]\n",
           "    pd = tl.where(j[:, None] >= j[None, :], pd, 0.)\n",
           "    tp = tp_ptr + (i * H + h).to(tl.int64) * 2 * C * C + (ib * BC + j)[:, None] * C "
           "+ j[None, :]\n",
           "    tl.store(tp + ib * BC, _unit_lower_inv(ad, BC))\n",
           "    tl.store(tp + C * C + ib * BC, pd)\n"]
    for x in range(nc - 1):
        out.append(f"    if {x} < ib:\n"
                   f"        tl.store(tp + {x * SUB}, a{x} * bi[:, None])\n"
                   f"        tl.store(tp + C * C + {x * SUB}, p{x})\n")
    return "".join(out)


def _pairs(nc: int) -> list[tuple[int, int]]:
    return [(i, j) for i in range(nc) for j in range(i + 1)]


def _solve_body(nc: int) -> str:
    """T from its diagonal blocks (the in-chunk kernel's) and beta A's lower blocks: for j < i
    T_ij = -T_ii sum_{j <= l < i} A_il T_lj, stored in place of A (its lower blocks: the row
    products read the others as zeros)."""
    out = ["    tp = tp_ptr + (i * H + h).to(tl.int64) * 2 * C * C + j[:, None] * C "
           "+ j[None, :]\n"]
    for i, j in _pairs(nc):
        name = f"{'t' if i == j else 'a'}{i}_{j}"
        out.append(f"    {name} = tl.load(tp + {i * SUB} * C + {j * SUB})\n")
    for i in range(nc):
        for j in range(i - 1, -1, -1):
            terms = " + ".join(f"_mm(a{i}_{x}, t{x}_{j})" for x in range(j, i))
            out.append(f"    t{i}_{j} = -_mm(t{i}_{i}, {terms})\n"
                       f"    tl.store(tp + {i * SUB} * C + {j * SUB}, t{i}_{j})\n")
    return "".join(out)


_PRODUCTS = ["w_ptr", "u_ptr", "usc_ptr", "kd_ptr", "decay_ptr"]
_STARTS = ["hs_ptr", "hsc_ptr"]
_INTRA_ARGS = ["q_ptr", "k_ptr", "g_ptr", "b_ptr", "slot_ptr", "rows", "sq", "sk", "sg", "sb",
               "chunk_ptr", "count_ptr", "tp_ptr", "coef_ptr", "H: tl.constexpr",
               "D: tl.constexpr", "C: tl.constexpr"]
_ROWS_ARGS = ["q_ptr", "k_ptr", "v_ptr", "g_ptr", "slot_ptr", "rows", "sq", "sk", "sv", "sg",
              "chunk_ptr", "count_ptr", *_PRODUCTS, "qe_ptr", "tp_ptr", "coef_ptr",
              "H: tl.constexpr", "D: tl.constexpr", "C: tl.constexpr", "BK: tl.constexpr"]
_WALK_ARGS = ["slot_ptr", "state_ptr", "rows", "st_slot", "st_head", "chunk_ptr", "run_ptr",
              "count_ptr", *_PRODUCTS, *_STARTS, "H: tl.constexpr", "D: tl.constexpr",
              "C: tl.constexpr", "BV: tl.constexpr"]
_OUT_ARGS = ["slot_ptr", "o_ptr", "rows", "so", "chunk_ptr", "count_ptr", "u_ptr", "usc_ptr",
             "qe_ptr", "tp_ptr", *_STARTS, "H: tl.constexpr", "D: tl.constexpr",
             "C: tl.constexpr", "BV: tl.constexpr", "BVO: tl.constexpr"]


# the first lines of a (chunk, head) program: chunk i's first row and slot
_CHUNK_HEAD = """    i = tl.program_id(0)
    h = tl.program_id(1)
    if i >= tl.load(count_ptr):  # past the step's chunks
        return
    row0 = tl.load(chunk_ptr + i)
    s = tl.load(slot_ptr + row0)
"""
# then the chunk's rows r (live where m) and their offsets at [C, 1] in a [rows, H] layout
_CHUNK_ROWS = """    t = tl.arange(0, C)
    r = row0 + t
    m = (r < rows) & (tl.load(slot_ptr + r, mask=r < rows, other=-1) == s)
    live = m[:, None]
    at = r[:, None].to(tl.int64) * H + h
"""


def _pair(at: str) -> str:
    """The chunk's [C, C] pair (T, Aqk) at tp and its stored (lower) blocks, low."""
    return (f"    low = (t[:, None] // {SUB}) >= (t[None, :] // {SUB})\n"
            f"    tp = tp_ptr + {at} * 2 * C * C + t[:, None] * C + t[None, :]\n")


def _intra(name: str, spec: KDAChunkSpec) -> str:
    nc = spec.chunk // SUB
    return f'''
@triton.jit
{wrap(f"def {name}_intra(", _INTRA_ARGS + [f"BC: tl.constexpr = {SUB}",
      f"DK: tl.constexpr = {min(DK, spec.head_dim)}",
      f"Q_SCALE: tl.constexpr = {spec.head_dim ** -0.5!r}",
      f"STEEP: tl.constexpr = {STEEP}"], "):", 8)}
{_CHUNK_HEAD}    ib = tl.program_id(2)  # this program's row block
    G16: tl.constexpr = g_ptr.dtype.element_ty != tl.float32
    j = tl.arange(0, BC)
    cols = h * D + tl.arange(0, D)
{_block("i", "ib")}{_OWN_BLOCK}{_DIAGONAL}{_left_blocks(nc)}{_store_block(nc)}'''


def _solve(name: str, spec: KDAChunkSpec) -> str:
    return f'''
@triton.jit
def {name}_solve(tp_ptr, count_ptr, H: tl.constexpr, C: tl.constexpr, BC: tl.constexpr = {SUB}):
    i = tl.program_id(0)
    h = tl.program_id(1)
    if i >= tl.load(count_ptr):  # past the step's chunks
        return
    j = tl.arange(0, BC)
{_solve_body(spec.chunk // SUB)}'''


def _rows(name: str) -> str:
    return f'''
@triton.jit
{wrap(f"def {name}_rows(", _ROWS_ARGS, "):", 8)}
{_CHUNK_HEAD}{_CHUNK_ROWS}    nk = tl.load(coef_ptr + at * 4, mask=m[:, None], other=0.)  # [C, 1]
    nq = tl.load(coef_ptr + at * 4 + 1, mask=m[:, None], other=0.)
    beta = tl.load(coef_ptr + at * 4 + 2, mask=m[:, None], other=0.)
    c = tl.program_id(2) * BK + tl.arange(0, BK)  # this program's channels
    col = h * D + c
    g = _tile(g_ptr, r, m, sg, col)  # every load first: their latencies overlap
    k = _tile(k_ptr, r, m, sk, col) * nk
    y = _tile(v_ptr, r, m, sv, col) * beta
    qn = _tile(q_ptr, r, m, sq, col) * nq
{_pair("(i * H + h).to(tl.int64)")}    tt = tl.load(tp, mask=low, other=0.)
    gl = tl.cumsum(g, 0)  # G from the chunk's start
    e = tl.exp(gl)
    x = k * beta * e
    ofs = at * D + c[None, :]
    if w_ptr.dtype.element_ty == tl.float16:  # fp16 operands, T and v scaled into range:
        # rows 610 -> 531 us on the H200 (8192 rows; bf16 operands unscaled 480 us, state 1.7e-3)
        st = _scale(tt)
        tn = (tt / st).to(tl.float16)
        _put(w_ptr + ofs, tl.dot(tn, x.to(tl.float16)) * st, live)  # |x| <= 1
        sy = _scale(y)
        u = tl.dot(tn, (y / sy).to(tl.float16)) * st  # T v / sy
    else:
        _put(w_ptr + ofs, _tc(tt, x), live)
        sy = 1.0
        u = _tc(tt, y)
    su = _scale(u)  # U scales with v: stored / a power of two, into fp16's range
    _put(u_ptr + ofs, u / su, live)
    tl.store(usc_ptr + (i * H + h) * (D // BK) + tl.program_id(2), su * sy)
    _put(qe_ptr + ofs, qn * e, live)
    total = tl.sum(g, 0)  # G_last (dead rows' g reads 0)
    _put(kd_ptr + ofs, k * tl.exp(total[None, :] - gl), live)
    tl.store(decay_ptr + (i * H + h) * D + c, tl.exp(total))
'''


def _walk(name: str) -> str:
    head, tail = runtime_loop("i", "first", "last", "1", " " * 4)
    return f'''
@triton.jit
{wrap(f"def {name}(", _WALK_ARGS, "):", 8)}
    h = tl.program_id(1)
    p = tl.program_id(2)
    if p >= tl.load(count_ptr + 1):  # past the step's runs
        return
    first = tl.load(run_ptr + p)
    last = tl.load(run_ptr + p + 1)
    row0 = tl.load(chunk_ptr + first)  # the run's rows are contiguous: chunk i starts C rows on
    s = tl.load(slot_ptr + row0)
    t = tl.arange(0, C)
    tail = tl.load(chunk_ptr + last - 1)  # the run ends inside its last chunk
    live = (tail + t < rows) & (tl.load(slot_ptr + tail + t, mask=tail + t < rows, other=-1) == s)
    end = tail + tl.sum(live.to(tl.int32), 0)
    c = tl.program_id(0) * BV + tl.arange(0, BV)  # this program's state columns (dv)
    kk = tl.arange(0, D)  # state rows (dk)
    NB: tl.constexpr = D // BV
    st = state_ptr + s * st_slot + h * st_head + kk[:, None] * D + c[None, :]
    S = tl.load(st)  # [D, BV] fp32
{head}        r = row0 + (i - first) * C + t  # no load on the chain from one chunk to the next
        m = (r < end)[:, None]
        at = r[:, None].to(tl.int64) * H + h
        decay = tl.load(decay_ptr + (i * H + h) * D + kk)  # first: its latency under the products
        sc = _scale(S)
        sn = (S / sc).to(w_ptr.dtype.element_ty)  # the products' operand, in the narrow dtype
        at_i = (i * H + h).to(tl.int64)
        tl.store(hs_ptr + at_i * D * D + kk[:, None] * D + c[None, :], sn)  # chunk i's start
        tl.store(hsc_ptr + at_i * NB + tl.program_id(0), sc)
        w = tl.load(w_ptr + at * D + kk[None, :], mask=m, other=0.)
        un = u_ptr + at * D + c[None, :]
        usc = usc_ptr + at_i * NB + tl.program_id(0)
        vn = _get(un, m) * tl.load(usc) - _tc(w, sn) * sc  # [C, BV]: V' = U - W S
        sv = _scale(vn)
        vn = (vn / sv).to(u_ptr.dtype.element_ty)
        tl.store(un, vn, mask=m)  # in place of U (and its scale), for the output kernel
        tl.store(usc, sv)
        kd = tl.load(kd_ptr + at * D + kk[None, :], mask=m, other=0.)
        S = decay[:, None] * S + _tc(tl.trans(kd), vn) * sv
{tail}    tl.store(st, S)
'''


def _out(name: str) -> str:
    return f'''
@triton.jit
{wrap(f"def {name}_out(", _OUT_ARGS, "):", 8)}
{_CHUNK_HEAD}{_CHUNK_ROWS}    kk = tl.arange(0, D)
    c = tl.program_id(2) * BVO + tl.arange(0, BVO)  # this program's output columns (dv)
    at_i = (i * H + h).to(tl.int64)
    hs = tl.load(hs_ptr + at_i * D * D + kk[:, None] * D + c[None, :])  # [D, BVO] / sc
    qe = tl.load(qe_ptr + at * D + kk[None, :], mask=live, other=0.)
    vn = tl.load(u_ptr + at * D + c[None, :], mask=live, other=0.)  # V' / sv
{_pair("at_i")}    aqk = tl.load(tp + C * C, mask=low, other=0.)
    sc = tl.load(hsc_ptr + at_i * (D // BV) + c // BV)[None, :]  # a scale per BV columns
    sv = tl.load(usc_ptr + at_i * (D // BV) + c // BV)[None, :]
    o = _tc(qe, hs) * sc + _tc(aqk.to(vn.dtype), vn) * sv  # (q e^G) S + Aqk V'
    tl.store(o_ptr + r[:, None].to(tl.int64) * so + h * D + c[None, :],
             o.to(o_ptr.dtype.element_ty), mask=live)
'''


def source(name: str, spec: KDAChunkSpec, header: str = "") -> str:
    return f'''{comment(header)}import triton
import triton.language as tl

{HELPERS}
{_plan(name)}
{_intra(name, spec)}
{_solve(name, spec)}
{_rows(name)}
{_walk(name)}
{_out(name)}'''


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
            "tp": (chunks, h, 2, c, c), "hs": (chunks, h, d, d),
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
    kinds = {n: getattr(work, n).dtype for n in ("w", "u", "kd", "qe", "hs")}
    if set(kinds.values()) != {narrow}:
        raise ValueError(f"KDA chunk scratch dtypes: w, u, kd, qe and hs all fp16 or all fp32, "
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
                                 num_warps=INTRA_WARPS)
    solve[(chunks, h)](work.tp, work.count, H=h, C=c, num_warps=SOLVE_WARPS)
    bk = min(BK, d)
    rows_k[(chunks, h, d // bk)](q, k, v, g, slot, rows, q.stride(0), k.stride(0), v.stride(0),
                                 g.stride(0), *tables, *products, work.qe, work.tp, work.coef,
                                 H=h, D=d, C=c, BK=bk, num_warps=ROWS_WARPS)
    bv = min(BV, d)
    walk[(d // bv, h, runs)](slot, state, rows, state.stride(0), state.stride(1), work.chunks,
                             work.runs, work.count, *products, *starts, H=h, D=d, C=c, BV=bv,
                             num_warps=WALK_WARPS,
                             num_stages=WALK_STAGES if work.w.element_size() == 2 else 1)
    bvo = min(OUT_BV, d)
    out_k[(chunks, h, d // bvo)](slot, out, rows, out.stride(0), *tables, work.u, work.usc, work.qe,
                                work.tp, *starts, H=h, D=d, C=c, BV=bv, BVO=bvo,
                                num_warps=OUT_WARPS)
