"""The DSA select with its segment's score loads issued first: `cands` before the histogram's
scan, `write` before the search (emitting from the keys it loaded). 128 registers for write
on sm_90 (72 committed), no spill."""

from variant import make

from hyperloom.codegen.emitters import dsa
from hyperloom.codegen.emitters.dsa_select import TOP

SCAN = """        bins = tl.arange(0, NB)
        hist = tl.load(hist_ptr + r * CP * NB + bins)
"""
SEGMENT = """        j = g * SEG + tl.arange(0, SEG)
        jm = j < n
        u = _ordered(tl.load(sc_ptr + r * ssc + j, mask=jm, other=0.0)) >> (32 - TOP)
"""
WRITE_HEAD = """    done = g * SEG
    ties = n * 0
"""
WRITE_LOAD = """    jj = g * SEG + tl.arange(0, SEG)
    jjm = jj < n
    useg = _ordered(tl.load(sc_ptr + r * ssc + jj, mask=jjm, other=0.0))
"""
EMIT = ("        _emit(sc_ptr + r * ssc, out_ptr + r * so, g * SEG, tl.minimum(n, (g + 1) * SEG), "
        "thr,\n              take, done, ties, P, PP, SEG)")
EMIT_KEYS = "        _emit_keys(useg, jj, jjm, out_ptr + r * so, thr, take, done, ties, P, PP)"
HELPER = '''
@triton.jit
def _emit_keys(u, j, jm, out, thr, take, done, ties, P: tl.constexpr, PP: tl.constexpr):
    """_emit over one segment whose keys u (pools j, jm: visible) are loaded already."""
    t = tl.arange(0, PP)
    eq = jm & (u == thr)
    sel = jm & ((u > thr) | (eq & (ties + tl.cumsum(eq.to(tl.int32), axis=0) <= take)))
    at = done + tl.cumsum(sel.to(tl.int32), axis=0) - 1
    tl.store(out + at[:, None] * P + t[None, :], (j[:, None] * P + t[None, :]).to(tl.int32),
             mask=sel[:, None] & (t < P)[None, :])

'''
assert TOP == 12  # the texts above were written against 12 top bits


def cands_first(source: str, name: str) -> str:
    """cands' segment load moved ahead of its histogram's scan."""
    i = source.index(SCAN)
    k = source.index(SEGMENT, i)
    source = source[:k] + source[k + len(SEGMENT):]
    return source[:i] + SEGMENT + source[i:]


TEXT = [cands_first, (WRITE_HEAD, WRITE_HEAD + WRITE_LOAD), (EMIT, EMIT_KEYS),
        ("\n@triton.jit\ndef _finish(", HELPER + "\n@triton.jit\ndef _finish(")]
globals().update(make(text=TEXT, host=dsa))
