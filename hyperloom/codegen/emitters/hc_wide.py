"""The wide step's kernel bodies of an mHC pre-site (`hc_pre`'s {name}_apply and {name}_gates,
over many rows), and the row pass the finish kernels share: source text whose names (the
pointers, strides and the constexprs N, D, J, NP, JP, SB, RB, SG, BLOCK_Y, NORM_EPS, HC_EPS,
ITERS, OUT_EPS) are the including kernel's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyperloom.codegen.emitters.hc_gates import cells, put_cells, scale_y, sinkhorn_cells
from hyperloom.codegen.emitters.loops import runtime_loop
from hyperloom.codegen.emitters.text import indent_block

if TYPE_CHECKING:
    from hyperloom.codegen.emitters.hc_pre import HCPreSpec

LOAD_X = "x = tl.load(x_row + d[None, :], mask=smask & (d < D)[None, :], other=0.0)\n"


def row_pass(body: str, whole: bool, load: str = LOAD_X) -> str:
    """`body` over the row's X: `x` loaded once already (`whole`), else BLOCK_Y columns at a
    time, each after `load` (the row is in L2 after a first pass)."""
    if whole:
        return body
    return f"for d0 in range(0, D, BLOCK_Y):\n    d = d0 + dd\n{indent_block(load + body, 4)}"


def gates_body(spec: HCPreSpec) -> str:
    """A wide step's post and comb gates for RB rows, after the apply: their partials summed
    over the splits SG at a time as one flat tile (a block's rows are contiguous in a split)
    into scratch split `splits`, then gathered by kind; sum(x^2) as the apply parked it;
    Sinkhorn cell by cell, each cell an [RB] vector."""
    head, tail = runtime_loop("s0", "0", "splits", "SG", "")
    n = spec.n
    pick = "".join(f"l{a}{b} = tl.load(at + {2 * n + a * n + b}, mask=tmask, other=0.0) * rc "
                   f"+ tl.load(base_ptr + {2 * n + a * n + b})\n" for a, b in cells(n))
    return f'''t0 = tl.program_id(0) * RB
flat = tl.arange(0, RB * JP)
fmask = flat < (rows - t0) * JP
sg = tl.arange(0, SG)
acc = tl.zeros((SG, RB * JP), tl.float32)
{head}    s = s0 + sg
    acc += tl.load(part_ptr + (s[:, None] * rows_pad + t0) * JP + flat[None, :],
                   mask=(s < splits)[:, None] & fmask[None, :], other=0.0, cache_modifier=".cg")
{tail}tl.store(part_ptr + (splits * rows_pad + t0) * JP + flat, tl.sum(acc, axis=0), mask=fmask)
tl.debug_barrier()  # the sums are read back by other threads of this program
t = t0 + tl.arange(0, RB)
tmask = t < rows
t64 = t.to(tl.int64)
ii = tl.arange(0, NP)
live = tmask[:, None] & (ii < N)[None, :]
at = part_ptr + (splits * rows_pad + t64) * JP
m_post = tl.load(at[:, None] + N + ii[None, :], mask=live, other=0.0)
ss = tl.load(part_ptr + ((splits + 1) * rows_pad + t64) * JP + J, mask=tmask, other=0.0)
# rms(x) @ fn^T == rsqrt(mean(x^2) + eps) * (x @ fn^T)
r = tl.rsqrt(ss / (N * D) + NORM_EPS)
bias = tl.load(base_ptr + N + ii, mask=ii < N, other=0.0)
post = 2.0 * tl.sigmoid(m_post * r[:, None] * tl.load(scale_ptr + 1) + bias[None, :])
tl.store(post_ptr + t64[:, None] * spost_row + ii[None, :], post, mask=live)
rc = r * tl.load(scale_ptr + 2)
{pick}{sinkhorn_cells(spec.n)}{put_cells(n, 'comb_ptr + t64 * scomb_row', 'tmask')}'''


def apply_body(spec: HCPreSpec, whole: bool) -> str:
    """A wide step's y for one row: sum(x^2) from its streams (in registers when the row fits,
    else a first pass; parked for the gates), its pre gates from the summed partials, then
    y = sum_i pre[i] * X[i] (its rms with out_eps), the streams loaded one vector each, so y
    needs no reduction across streams."""
    xs = range(spec.n)
    load = "".join(f"x{i} = tl.load(x_row + {i} * sx_stream + d, mask=d < D, other=0.0)\n"
                   for i in xs)
    y = "y = " + " + ".join(f"p{i} * x{i}" for i in xs) + "\n"
    sq = ("sq = tl.zeros((BLOCK_Y,), tl.float32)\n"
          + row_pass("sq += " + " + ".join(f"x{i} * x{i}" for i in xs) + "\n", whole, load)
          + "ss = tl.sum(sq, axis=0)\n")
    norm, scale = "", ""
    if spec.out_eps is not None:
        norm = ("sq = tl.zeros((BLOCK_Y,), tl.float32)\n"
                + row_pass(y + "sq += y * y\n", whole, load)
                + "inv = tl.rsqrt(tl.sum(sq, axis=0) / D + OUT_EPS)\n")
        scale = scale_y(spec.out_weight)
    again = "" if whole and spec.out_eps is not None else y
    store = row_pass(again + scale + "tl.store(y_ptr + row * sy_row + d, "
                      "y.to(y_ptr.dtype.element_ty), mask=d < D)\n", whole, load)
    head, tail = runtime_loop("s0", "0", "splits", "SB", "")
    gates = "".join(f"p{i} = tl.sum(tl.where(ii == {i}, pre, 0.0), axis=0)\n" for i in xs)
    return f'''row = tl.program_id(0).to(tl.int64)
dd = tl.arange(0, BLOCK_Y)
x_row = x_ptr + row * sx_row
{"d = dd" + chr(10) + load if whole else ""}{sq}ii = tl.arange(0, NP)
sb = tl.arange(0, SB)
m = tl.zeros((NP,), tl.float32)
{head}    s = s0 + sb
    m += tl.sum(tl.load(part_ptr + (s[:, None] * rows_pad + row) * JP + ii[None, :],
                        mask=(s < splits)[:, None] & (ii < N)[None, :], other=0.0,
                        cache_modifier=".cg"), axis=0)
{tail}tl.store(part_ptr + ((splits + 1) * rows_pad + row) * JP + J, ss)
# rms(x) @ fn^T == rsqrt(mean(x^2) + eps) * (x @ fn^T)
r = tl.rsqrt(ss / (N * D) + NORM_EPS)
pre = tl.sigmoid(m * r * tl.load(scale_ptr) + tl.load(base_ptr + ii, mask=ii < N, other=0.0))
pre += HC_EPS
{gates}{norm}{store}'''
