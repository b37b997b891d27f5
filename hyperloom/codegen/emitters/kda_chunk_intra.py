"""The chunked KDA prefill's in-chunk matrices (`kda_chunk` launches them): the kernels
that form beta A, Aqk and T = (I + A)^-1 for every chunk and head, with the kernel text the
chunk-parallel kernels of `kda_chunk_walk` share.

{name}_intra, grid (chunk bound, heads, C / 16): one 16-row block i of one chunk and head, over
the head's whole width (every product is d deep). With G the cumulative log decay from the
chunk's start, A[i, j] = beta_i sum_c k_i k_j exp(G_i - G_j) (j < i) and Aqk the same with q_i
(j <= i), block row i: each block left of the diagonal a tl.dot of both sides decayed to the
boundary between them (every exponent a sum of g over a span of rows, never positive: g <= 0;
fp16 operands under 16-bit activations, every factor <= 1), stored as soon as it is formed;
the diagonal block a tl.dot of k exp(G - Gm) and k exp(Gm - G), Gm at the block's middle row,
where every row's decay from it keeps both within fp32 (STEEP), else a masked [DK, 16, 16]
product of exponents <= 0, a channel tile at a time.
Nothing overflows however steep the decay. Stores beta A's blocks, with T_ii = (I + A_ii)^-1 (a
product of four factors) in place of the diagonal one, Aqk's blocks, and each row's (1 / |k|,
scale / |q|, beta).

{name}_solve, grid (chunk bound, heads): T = (I + A)^-1 from those blocks, T_ij = -T_ii
sum_{j <= l < i} A_il T_lj, stored divided by a power of two in the row products' operand dtype
([C, C], lower blocks), with that power of two.
"""

from __future__ import annotations

from hyperloom.codegen.emitters.text import wrap

SUB = 16  # rows per block of the in-chunk matrices (the smallest tl.dot tile)
DK = 16  # channels per step of a steep diagonal block's exact [DK, 16, 16] product
# a diagonal block whose log decay stays within STEEP of its middle row's in every channel is
# one product of k exp(G - Gm) and k exp(Gm - G): factors within [e^-64, e^64], products and
# their sums finite, nothing below fp32's normal range; a steeper block takes the exact
# [DK, 16, 16] form
STEEP = 64

HELPERS = '''
@triton.jit
def _mm(a, b):
    """The solve's products and T_ii's factors in full fp32 (the solve amplifies the rounding
    of what it reads)."""
    return tl.dot(a, b, input_precision="ieee")


@triton.jit
def _tc(a, b):
    """The in-chunk products of A and Aqk and the row products on tensor cores: TF32 where the
    operands are fp32."""
    return tl.dot(a, b, input_precision="tf32")


@triton.jit
def _pow2(a):
    """The power of two sc with a / sc in (2^13, 2^14] (1 where a is 0), for a >= 0 the largest
    magnitude of a tile: the tile / sc fits fp16 whatever its range, its largest entry 2^14
    below fp16's largest and 2^28 above its smallest normal."""
    return tl.where(a > 0, tl.exp2(tl.ceil(tl.log2(a)) - 14.0), 1.0)


@triton.jit
def _scale(x):
    """_pow2 of the [R, n] tile x's largest magnitude."""
    return _pow2(tl.max(tl.max(tl.abs(x), 1), 0))


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
def _live(slot_ptr, r, rows, s):
    """Which rows r are in bounds and slot s's."""
    return (r < rows) & (tl.load(slot_ptr + r, mask=r < rows, other=-1) == s)


@triton.jit
def _tile(x_ptr, r, m, sx, col):
    """Rows r (live where m) of x at columns col, fp32; dead rows read 0."""
    x = tl.load(x_ptr + r[:, None].to(tl.int64) * sx + col[None, :], mask=m[:, None], other=0.)
    return x.to(tl.float32)


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


# the first lines of a (chunk, head) program: chunk i's first row and slot
CHUNK_HEAD = """    i = tl.program_id(0)
    h = tl.program_id(1)
    if i >= tl.load(count_ptr):  # past the step's chunks
        return
    row0 = tl.load(chunk_ptr + i)
    s = tl.load(slot_ptr + row0)
"""
# then the chunk's rows r (live where m) and their offsets at [C, 1] in a [rows, H] layout
CHUNK_ROWS = """    t = tl.arange(0, C)
    r = row0 + t
    m = _live(slot_ptr, r, rows, s)
    live = m[:, None]
    at = r[:, None].to(tl.int64) * H + h
"""


# the stored (lower) blocks of a chunk's [C, C] product, low
LOWER = f"    low = (t[:, None] // {SUB}) >= (t[None, :] // {SUB})\n"


def pair(at: str) -> str:
    """The chunk's [2, C, C] pair (beta A with T_ii, Aqk) at tp and its stored blocks, low."""
    return LOWER + f"    tp = tp_ptr + {at} * 2 * C * C + t[:, None] * C + t[None, :]\n"


def _block(b: str, at: str, pad: str = " " * 4) -> str:
    """Rows r{b} of block `at` of the chunk and their live mask m{b}."""
    return (f"{pad}r{b} = row0 + {at} * BC + j\n"
            f"{pad}m{b} = _live(slot_ptr, r{b}, rows, s)\n")


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
    ki16 = (k * tl.exp(gl)).to(NT)  # the left blocks' operands: |k e^G|, |q e^G| <= 1
    qi16 = (q * tl.exp(gl)).to(NT)
"""

# the diagonal block: one product of k exp(G - Gm) and k exp(Gm - G), Gm the log decay at the
# block's middle row, while every channel's decay stays within STEEP of it (half the block's
# span: always, for decays of at least -STEEP / 8 a row, as GLM-5.3's gate bounds them at -5;
# from the block's start, any span past -64 took the exact form: about a third of a head's
# blocks on GLM-5.3's gate on random weights), else the exact form a channel tile at a time
# (rereading the tile)
_DIAGONAL = """    dg = gl - tl.sum(tl.where(j[:, None] == BC // 2 - 1, gl, 0.), 0)[None, :]
    if tl.max(tl.abs(dg)) <= STEEP:
        kn = tl.trans(k * tl.exp(-dg))
        ad = _tc(k * tl.exp(dg), kn)  # masked when stored
        pd = _tc(q * tl.exp(dg), kn)
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
    """Blocks J left of the diagonal (J < ib), each one product over the head's width of both
    sides decayed to the boundary between the blocks (operands in NT: every factor <= 1), stored
    at once (beta A's and Aqk's); J descends so that `span` sums g over the blocks between J and
    ib (every exponent a sum of g <= 0)."""
    out = ["    span = tl.zeros([1, D], dtype=tl.float32)\n"
           "    tp = tp_ptr + (i * H + h).to(tl.int64) * 2 * C * C + (ib * BC + j)[:, None] * C "
           "+ j[None, :]\n"]
    for x in range(nc - 2, -1, -1):
        out.append(f"    if {x} < ib:\n" + _block(str(x), str(x), " " * 8) +
                   f"        gj = _tile(g_ptr, r{x}, m{x}, sg, cols)\n"
                   "        gt = tl.sum(gj, 0)[None, :]\n"
                   f"        kj = _tile(k_ptr, r{x}, m{x}, sk, cols)\n"
                   "        kj *= _rnorm(kj)[:, None] * tl.exp(_sums(gj, True, G16) + span)\n"
                   "        kj = tl.trans(kj.to(NT))\n"
                   f"        tl.store(tp + {x * SUB}, _tc(ki16, kj) * bi[:, None])\n"
                   f"        tl.store(tp + C * C + {x * SUB}, _tc(qi16, kj))\n"
                   "        span += gt\n")
    return "".join(out)


# the diagonal block of row block ib of the chunk's [2, C, C] pair: T_ii = (I + A_ii)^-1 in
# beta A's (the solve reads no other use of it), and Aqk's
_STORE_DIAGONAL = """    ad = tl.where(j[:, None] > j[None, :], ad, 0.) * bi[:, None]
    pd = tl.where(j[:, None] >= j[None, :], pd, 0.)
    tl.store(tp + ib * BC, _unit_lower_inv(ad, BC))
    tl.store(tp + C * C + ib * BC, pd)
"""


def _pairs(nc: int) -> list[tuple[int, int]]:
    return [(i, j) for i in range(nc) for j in range(i + 1)]


def _solve_body(nc: int) -> str:
    """T from its diagonal blocks (the in-chunk kernel's) and beta A's lower blocks: for j < i
    T_ij = -T_ii sum_{j <= l < i} A_il T_lj; then T / tsc into t (its lower blocks: the row
    products read the others as zeros), tsc the power of two that brings T's largest entry to
    2^14 (`_pow2`), so that T fits the row products' narrow operand dtype."""
    at = "(i * H + h).to(tl.int64)"
    out = [f"    tp = tp_ptr + {at} * 2 * C * C + j[:, None] * C + j[None, :]\n"]
    for i, j in _pairs(nc):
        name = f"{'t' if i == j else 'a'}{i}_{j}"
        out.append(f"    {name} = tl.load(tp + {i * SUB} * C + {j * SUB})\n")
    for i in range(nc):
        for j in range(i - 1, -1, -1):
            terms = " + ".join(f"_mm(a{i}_{x}, t{x}_{j})" for x in range(j, i))
            out.append(f"    t{i}_{j} = -_mm(t{i}_{i}, {terms})\n")
    out.append("    top = 0.\n")
    out += [f"    top = tl.maximum(top, tl.max(tl.max(tl.abs(t{i}_{j}), 1), 0))\n"
            for i, j in _pairs(nc)]
    out.append("    sc = _pow2(top)\n"
               f"    tl.store(tsc_ptr + {at}, sc)\n"
               f"    tn = t_ptr + {at} * C * C + j[:, None] * C + j[None, :]\n"
               "    NT: tl.constexpr = t_ptr.dtype.element_ty\n")
    out += [f"    tl.store(tn + {i * SUB} * C + {j * SUB}, (t{i}_{j} / sc).to(NT))\n"
            for i, j in _pairs(nc)]
    return "".join(out)


INTRA_ARGS = ["q_ptr", "k_ptr", "g_ptr", "b_ptr", "slot_ptr", "rows", "sq", "sk", "sg", "sb",
              "chunk_ptr", "count_ptr", "tp_ptr", "coef_ptr", "H: tl.constexpr",
              "D: tl.constexpr", "C: tl.constexpr"]


def intra_def(name: str, head_dim: int, args: list[str] = INTRA_ARGS) -> str:
    """The in-chunk kernel's signature and its first lines (an in-chunk kernel's of other
    arguments: `args`)."""
    return f'''
@triton.jit
{wrap(f"def {name}_intra(", args + [f"BC: tl.constexpr = {SUB}",
      f"DK: tl.constexpr = {min(DK, head_dim)}",
      f"Q_SCALE: tl.constexpr = {head_dim ** -0.5!r}",
      f"STEEP: tl.constexpr = {STEEP}"], "):", 8)}
{CHUNK_HEAD}    G16: tl.constexpr = g_ptr.dtype.element_ty != tl.float32
    # fp16 operands of the left blocks' products under 16-bit activations (TF32's mantissa)
    Q16: tl.constexpr = q_ptr.dtype.element_ty.primitive_bitwidth == 16
    NT: tl.constexpr = tl.float16 if Q16 else tl.float32
    j = tl.arange(0, BC)
    cols = h * D + tl.arange(0, D)
'''


def intra_source(name: str, chunk: int, head_dim: int) -> str:
    return (intra_def(name, head_dim) + "    ib = tl.program_id(2)  # this program's row block\n"
            + _block("i", "ib") + _OWN_BLOCK + _DIAGONAL + _left_blocks(chunk // SUB)
            + _STORE_DIAGONAL)


def solve_source(name: str, chunk: int) -> str:
    return f'''
@triton.jit
def {name}_solve(tp_ptr, t_ptr, tsc_ptr, count_ptr, H: tl.constexpr, C: tl.constexpr,
        BC: tl.constexpr = {SUB}):
    i = tl.program_id(0)
    h = tl.program_id(1)
    if i >= tl.load(count_ptr):  # past the step's chunks
        return
    j = tl.arange(0, BC)
{_solve_body(chunk // SUB)}'''
