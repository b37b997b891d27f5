"""The gate, Sinkhorn and streams-form finish text of an mHC site's kernels (`emitters.hc_pre`,
and the GEMV that forms a site: `emitters.matmul`): the partials summed over splits, every
projection's logit and sigmoid with post stored, the n x n comb by Sinkhorn cell by cell, and
a few-row step's finish of one row (`few_body`). The names they use (j,
row, rows_pad, splits, the pointers and the constexprs N, D, J, JP, SB, NORM_EPS, HC_EPS,
ITERS) are the including kernel's."""

from __future__ import annotations

from hyperloom.codegen.emitters.loops import runtime_loop
from hyperloom.codegen.emitters.text import indent_block


def cells(n: int) -> list[tuple[int, int]]:
    return [(a, b) for a in range(n) for b in range(n)]


def _sum(terms: list[str]) -> str:
    return " + ".join(terms)


def _max(terms: list[str]) -> str:
    while len(terms) > 1:
        pairs = [f"tl.maximum({a}, {b})" for a, b in zip(terms[::2], terms[1::2])]
        terms = pairs + ([terms[-1]] if len(terms) % 2 else [])
    return terms[0]


def _normalize(n: int, rows: bool) -> str:
    """One Sinkhorn half-step over the cells c{a}{b}: every row (or column) divided by its sum
    + HC_EPS (times one reciprocal a line)."""
    out = ""
    for u in range(n):
        line = [f"c{u}{v}" if rows else f"c{v}{u}" for v in range(n)]
        out += f"sk = 1.0 / ({_sum(line)} + HC_EPS)\n" + "".join(f"{c} = {c} * sk\n"
                                                                 for c in line)
    return out


def sinkhorn_cells(n: int) -> str:
    """Sinkhorn of the n x n logits l{a}{b} into c{a}{b}, cell by cell: an [RB] vector a cell
    in a gates program (H200, 4096 rows: gates 7.4 -> 6.3 us against [RB, NP, NP] tiles, two
    cross-thread reductions a half-step), a scalar in a lone row's finish (read back from
    memory: picked out of z by 16 masked sums, the finish took 116 us, not 9.7)."""
    out = ""
    for a in range(n):
        row = [f"l{a}{b}" for b in range(n)]
        out += f"mx = {_max(row)}\n" + "".join(f"e{a}{b} = tl.exp(l{a}{b} - mx)\n"
                                                for b in range(n))
        out += f"sk = 1.0 / ({_sum([f'e{a}{b}' for b in range(n)])})\n"
        out += "".join(f"c{a}{b} = e{a}{b} * sk + HC_EPS\n" for b in range(n))
    loop = _normalize(n, True) + _normalize(n, False)
    return (out + _normalize(n, False) + "for _ in range(ITERS - 1):\n"
            + indent_block(loop, 4))


def put_cells(n: int, row: str, mask: str = "") -> str:
    """The cells c{a}{b} stored to comb at `row` (a pointer expression), under `mask`."""
    m = f", mask={mask}" if mask else ""
    return "".join(f"tl.store({row} + {a} * scomb_i + {b}, c{a}{b}{m})\n" for a, b in cells(n))


def partial_sums() -> str:
    """m [JP]: the row's partials summed over the splits, SB at a time."""
    head, tail = runtime_loop("s0", "0", "splits", "SB", "")
    return f'''m = tl.zeros((JP,), tl.float32)
sb = tl.arange(0, SB)
{head}    s = s0 + sb
    m += tl.sum(tl.load(part_ptr + (s[:, None] * rows_pad + row) * JP + j[None, :],
                        mask=(s < splits)[:, None], other=0.0, cache_modifier=".cg"), axis=0)
{tail}'''


# from m and ss (the row's sum(x^2)): every projection's logit z and sigmoid, post stored
GATES = """# rms(x) @ fn^T == rsqrt(mean(x^2) + eps) * (x @ fn^T)
sc = tl.where(j < N, tl.load(scale_ptr), tl.where(j < 2 * N, tl.load(scale_ptr + 1),
                                                   tl.load(scale_ptr + 2)))
z = m * tl.rsqrt(ss / (N * D) + NORM_EPS) * sc + tl.load(base_ptr + j, mask=j < J, other=0.0)
sig = tl.sigmoid(z)
tl.store(post_ptr + row * spost_row + (j - N), 2.0 * sig, mask=(j >= N) & (j < 2 * N))
"""


def comb(n: int) -> str:
    """The row's comb from its logits z: Sinkhorn, stored."""
    pick = "".join(f"l{a}{b} = tl.load(cz + {a} * scomb_i + {b})\n" for a, b in cells(n))
    park = ("# the comb logits parked in the row's comb and read back as scalars: Sinkhorn cell "
            "by cell,\n# no cross-thread reductions (as [NP, NP] tiles, two a half-step)\n")
    return park + f'''cz = comb_ptr + row * scomb_row
ab = j - 2 * N
tl.store(cz + (ab // N) * scomb_i + ab % N, z, mask=(j >= 2 * N) & (j < J))
tl.debug_barrier()  # every thread's logits are stored before any is read
{pick}{sinkhorn_cells(n)}{put_cells(n, 'cz')}'''


def scale_y(weight: bool) -> str:
    """y's rms scaling by inv, times the site norm's weight ow (`weight`)."""
    if weight:
        return "y = y * inv * tl.load(ow_ptr + d, mask=d < D, other=0.0).to(tl.float32)\n"
    return "y = y * inv\n"


def _few_y(spec, cols: int) -> str:
    """The streams form's y = sum_i p{i} * X[i] over `cols` columns at a time, stream by stream
    (its rms with out_eps: over a second pass when the row is wider than `cols`), stored."""
    whole = cols >= spec.d
    y = f"y = tl.zeros(({cols},), tl.float32)\n" + "".join(
        f"y += p{i} * tl.load(x_row + {i} * sx_stream + d, mask=d < D, other=0.0)\n"
        for i in range(spec.n))
    chunks = f"for d0 in range(0, D, {cols}):\n    d = d0 + dd\n"
    store = "tl.store(y_ptr + row * sy_row + d, y.to(y_ptr.dtype.element_ty), mask=d < D)\n"
    if spec.out_eps is None:
        return ("d = dd\n" + y + store) if whole else chunks + indent_block(y + store, 4)
    scale = scale_y(spec.out_weight)
    inv = "inv = tl.rsqrt(tl.sum(sq, axis=0) / D + OUT_EPS)\n"
    if whole:
        return "d = dd\n" + y + "sq = y * y\n" + inv + scale + store
    return (f"sq = tl.zeros(({cols},), tl.float32)\n" + chunks
            + indent_block(y + "sq += y * y\n", 4) + inv
            + chunks + indent_block(y + scale + store, 4))


def few_body(spec, cols: int) -> str:
    """hc_pre's finish of one row of a few-row step in the streams form (spec: its HCPreSpec):
    sum(x^2) from the partials (the projection's column J), the gates, y (`_few_y`, `cols`
    columns at a time), then Sinkhorn cell by cell. Its launch takes few warps: every warp
    issues the scalar Sinkhorn rounds, so fewer warps run them faster."""
    gates = "".join(f"p{i} = tl.sum(tl.where(ii == {i}, pre, 0.0), axis=0)\n"
                    for i in range(spec.n))
    return f'''row = tl.program_id(0).to(tl.int64)
j = tl.arange(0, JP)
ii = tl.arange(0, NP)
dd = tl.arange(0, {cols})
x_row = x_ptr + row * sx_row
{partial_sums()}ss = tl.sum(tl.where(j == J, m, 0.0), axis=0)
{GATES}pre = tl.sum(tl.where(j[None, :] == ii[:, None], sig[None, :], 0.0), axis=1) + HC_EPS
{gates}{_few_y(spec, cols)}{comb(spec.n)}'''
