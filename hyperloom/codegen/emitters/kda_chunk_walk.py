"""The chunked KDA prefill's chunk products (`kda_chunk` launches them): the row products,
the walk over each run's chunks and the output.

{name}_rows, grid (chunk bound, heads, d / BK): one chunk, head and BK channels, with chunk-wide
products: per row W = T (beta k exp(G)), U = T (beta v), q exp(G), K' = k exp(G_last - G), and
exp(G_last) per chunk, on tensor cores (fp16 operands under 16-bit activations, else TF32).

{name}, grid (d / BV, heads, run bound): walks its run's chunks in order with S[:, BV columns]
in registers (fp32), loaded once from state[slot] and stored once; chunk i's rows lie C (i -
first) rows past the run's first, so no load sits between chunks; per chunk it stores S (the
chunk's starting state), then V' = U - W S over U, then S = exp(G_last) S + K'^T V'.

{name}_out, grid (chunk bound, heads, d / OUT_BV): every chunk in parallel,
o = (q exp(G)) S + Aqk V' (the chunk's starting state and its deltas).

Under 16-bit activations every row product, V' and the starting states are stored in fp16
(`narrow_dtype`: 10 mantissa bits, as TF32) and the row products', the walk's and the
output's products take fp16 operands. T, v, U, V' and S are divided by a power of two that
brings the largest entry of each (chunk, head[, column block]) to 2^14 (`_scale`, in
kda_chunk_intra's helpers): fp16's range never clips them. On the H200 at 64 heads x 128 and
8192 bf16 rows: out 1.9e-3 from the fp32 reference, state 3.7e-4 (TF32 row products: 2.0e-3,
5.1e-4; fp32 U and V' and TF32 walk products: 2.5e-3, 8.0e-4).
"""

from __future__ import annotations

from hyperloom.codegen.emitters.kda_chunk_intra import CHUNK_HEAD, CHUNK_ROWS, LOWER, pair
from hyperloom.codegen.emitters.loops import runtime_loop
from hyperloom.codegen.emitters.text import wrap

HELPERS = '''
@triton.jit
def _put(p, x, m):
    """Store a row product in its scratch's dtype."""
    tl.store(p, x.to(p.dtype.element_ty), mask=m)


@triton.jit
def _get(p, m):
    """Load a row product as fp32; dead rows read 0."""
    return tl.load(p, mask=m, other=0.).to(tl.float32)
'''


_PRODUCTS = ["w_ptr", "u_ptr", "usc_ptr", "kd_ptr", "decay_ptr"]
_STARTS = ["hs_ptr", "hsc_ptr"]
_ROWS_ARGS = ["q_ptr", "k_ptr", "v_ptr", "g_ptr", "slot_ptr", "rows", "sq", "sk", "sv", "sg",
              "chunk_ptr", "count_ptr", *_PRODUCTS, "qe_ptr", "t_ptr", "tsc_ptr", "coef_ptr",
              "H: tl.constexpr", "D: tl.constexpr", "C: tl.constexpr", "BK: tl.constexpr"]
_WALK_ARGS = ["slot_ptr", "state_ptr", "rows", "st_slot", "st_head", "chunk_ptr", "run_ptr",
              "count_ptr", *_PRODUCTS, *_STARTS, "H: tl.constexpr", "D: tl.constexpr",
              "C: tl.constexpr", "BV: tl.constexpr"]
_OUT_ARGS = ["slot_ptr", "o_ptr", "rows", "so", "chunk_ptr", "count_ptr", "u_ptr", "usc_ptr",
             "qe_ptr", "tp_ptr", *_STARTS, "H: tl.constexpr", "D: tl.constexpr",
             "C: tl.constexpr", "BV: tl.constexpr", "BVO: tl.constexpr"]


def rows_source(name: str) -> str:
    return f'''
@triton.jit
{wrap(f"def {name}_rows(", _ROWS_ARGS, "):", 8)}
{CHUNK_HEAD}{CHUNK_ROWS}    nk = tl.load(coef_ptr + at * 4, mask=m[:, None], other=0.)  # [C, 1]
    nq = tl.load(coef_ptr + at * 4 + 1, mask=m[:, None], other=0.)
    beta = tl.load(coef_ptr + at * 4 + 2, mask=m[:, None], other=0.)
    c = tl.program_id(2) * BK + tl.arange(0, BK)  # this program's channels
    col = h * D + c
    g = _tile(g_ptr, r, m, sg, col)  # every load first: their latencies overlap
    k = _tile(k_ptr, r, m, sk, col) * nk
    y = _tile(v_ptr, r, m, sv, col) * beta
    qn = _tile(q_ptr, r, m, sq, col) * nq
    at_i = (i * H + h).to(tl.int64)
{LOWER}    tn = tl.load(t_ptr + at_i * C * C + t[:, None] * C + t[None, :], mask=low, other=0.)
    st = tl.load(tsc_ptr + at_i)  # T = tn st
    gl = tl.cumsum(g, 0)  # G from the chunk's start
    e = tl.exp(gl)
    x = k * beta * e
    ofs = at * D + c[None, :]
    # operands in the scratch's dtype, T (by the solve) and v divided by powers of two into its
    # range (with fp32 scratch: TF32 products of the same values as unscaled); fp16 operands took
    # the rows from 610 to 531 us on the H200 at 8192 rows (bf16 unscaled: 480 us, state error
    # 1.7e-3), T stored scaled in fp16 by the solve 531 -> 467
    nt: tl.constexpr = w_ptr.dtype.element_ty
    _put(w_ptr + ofs, _tc(tn, x.to(nt)) * st, live)  # |x| <= 1
    sy = _scale(y)
    u = _tc(tn, (y / sy).to(nt)) * st  # T v / sy
    su = _scale(u)  # U scales with v: stored / a power of two, into fp16's range
    _put(u_ptr + ofs, u / su, live)
    tl.store(usc_ptr + (i * H + h) * (D // BK) + tl.program_id(2), su * sy)
    _put(qe_ptr + ofs, qn * e, live)
    total = tl.sum(g, 0)  # G_last (dead rows' g reads 0)
    _put(kd_ptr + ofs, k * tl.exp(total[None, :] - gl), live)
    tl.store(decay_ptr + (i * H + h) * D + c, tl.exp(total))
'''


def walk_source(name: str) -> str:
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
    end = tail + tl.sum(_live(slot_ptr, tail + t, rows, s).to(tl.int32), 0)
    c = tl.program_id(0) * BV + tl.arange(0, BV)  # this program's state columns (dv)
    kk = tl.arange(0, D)  # state rows (dk)
    NB: tl.constexpr = D // BV
    st = state_ptr + s * st_slot + h * st_head + kk[:, None] + c[None, :] * D  # stored S^T
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


def out_source(name: str) -> str:
    return f'''
@triton.jit
{wrap(f"def {name}_out(", _OUT_ARGS, "):", 8)}
{CHUNK_HEAD}{CHUNK_ROWS}    kk = tl.arange(0, D)
    c = tl.program_id(2) * BVO + tl.arange(0, BVO)  # this program's output columns (dv)
    at_i = (i * H + h).to(tl.int64)
    hs = tl.load(hs_ptr + at_i * D * D + kk[:, None] * D + c[None, :])  # [D, BVO] / sc
    qe = tl.load(qe_ptr + at * D + kk[None, :], mask=live, other=0.)
    vn = tl.load(u_ptr + at * D + c[None, :], mask=live, other=0.)  # V' / sv
{pair("at_i")}    aqk = tl.load(tp + C * C, mask=low, other=0.)
    sc = tl.load(hsc_ptr + at_i * (D // BV) + c // BV)[None, :]  # a scale per BV columns
    sv = tl.load(usc_ptr + at_i * (D // BV) + c // BV)[None, :]
    o = _tc(qe, hs) * sc + _tc(aqk.to(vn.dtype), vn) * sv  # (q e^G) S + Aqk V'
    tl.store(o_ptr + r[:, None].to(tl.int64) * so + h * D + c[None, :],
             o.to(o_ptr.dtype.element_ty), mask=live)
'''
