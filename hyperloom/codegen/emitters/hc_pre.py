"""mHC pre-site kernels: exactly `hyperloom.ir.semantics.hc.hc_pre`; one module, five kernels
(`kernel_names`) run as one launch (`fused`: a decode step), two (up to WIDE_ROWS rows) or three
(a prefill chunk); `hc_pre_launch` lays them out, checks their operands and launches them;
`hc_wide` holds the wide step's apply and gates bodies.

Inputs X fp32 [rows, n, D], fn [(2+n)*n, n*D] (bf16 or fp32), base fp32 [(2+n)*n], scale fp32 [3];
outputs y [rows, D] (fp32, or the weights' dtype with the site norm folded in), post fp32
[rows, n], comb fp32 [rows, n, n].

_partials (grid (cdiv(rows, BLOCK_T), splits)): split-K over the flat n*D axis, so a few rows
still spread over every multiprocessor (decode: up to 128 splits) and many rows sweep X once; each
program writes its partial projections m = X_flat @ fn^T to a scratch row [split, row, JP].
_finish_row: one row's partials summed in wide tiles; its X row (in registers when it fits)
gives sum(x^2), so the stream norm costs the projection nothing; the gates; every Sinkhorn
iteration in registers; post, comb and y = sum_i pre[i] * X[i] (rms(y) with out_eps, times the
norm weight ow with out_weight).

{name}: _partials, then a ticket from the row block's counter; the last program resets it (for
the next launch and CUDA-graph replays) and finishes the live rows in turn. Decode's one launch.
{name}_proj + {name}_finish (grid (rows,)): the same work for a few rows, every row finished by
its own program in parallel: up to FEW_ROWS rows in the streams form (`hc_gates.few_body`: the
projection also writes sum(x^2), y is summed stream by stream at FEW_WARPS), more in the row
form (`_finish_tiled`, `_finish_row`'s text over FINISH_TILE-element tiles).
{name}_proj + {name}_apply + {name}_gates: many rows. The projection runs in one wave of
programs; the apply streams one X row a program, takes sum(x^2) and the n pre gates from it and
the row's partials, writes y (a read-reduce-write whose only serial math is n sigmoids) and
parks sum(x^2) in the scratch; the gates then take RB rows a program, post and the n x n Sinkhorn
of every row in one [RB, n, n] tile (its reductions stay inside warps).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from hyperloom.codegen.emitters.gemv import site_programs
from hyperloom.codegen.emitters.hc_gates import GATES, comb, few_body, partial_sums, scale_y
from hyperloom.codegen.emitters.hc_wide import LOAD_X, apply_body, gates_body, row_pass
from hyperloom.codegen.emitters.ints import next_power_of_2
from hyperloom.codegen.emitters.loops import runtime_loop
from hyperloom.codegen.emitters.text import comment, indent_block, pdl, wrap
from hyperloom.config import CONFIG
from hyperloom.passes.kernel_plan import HC_WIDE_ROWS

BLOCK_T = 16  # rows per projection program of the one launch; tl.dot needs M >= 16
WIDE_ROWS = HC_WIDE_ROWS  # above this many rows: apply + gates (at 16 to 256 rows the finish is
# faster)
PROJ_ROWS, PROJ_WARPS, PROJ_STAGES = 64, 4, 3  # projection programs of apply + gates steps
PROJ_RESIDENT = 2  # of those, programs a multiprocessor runs at once (H200: 256 ran as one wave)
PROJ_K = 128  # X columns of a projection program's step
MAX_SPLITS = 128
SPLIT_BLOCK = MAX_SPLITS  # splits whose partials a finish sums per load: all in one round
ROW_TILE = 16384  # X elements of one row the one launch's finish loads at once
# a finish program a row (2 to WIDE_ROWS rows). Up to FEW_ROWS rows (one projection row block)
# the "streams" form (`hc_gates.few_body`: sum(x^2) from the projection, FEW_WARPS warps, y over
# FEW_COLS columns at once); more rows, `_finish_row` at FINISH_WARPS warps over FINISH_TILE
# X elements at once. H100, the step (projection + finish) at D = 4096, n = 4, µs at 2 / 16 /
# 64 / 256 rows: streams 8.2 / 8.7 / 13.2 / 24.6, the row form at 8 warps and 4096 elements
# 10.0 / 10.2 / 11.9 / 21.9, at 16 warps and 16384 (before) 12.8 / 12.9 / 14.7; its 20
# Sinkhorn rounds cost the 16-warp form 5.5 us (every warp issues the scalar rounds) and the
# streams form 1.8. The projection's sum(x^2) costs it 0.3 us at one row block, 3 at four.
FEW_ROWS = BLOCK_T
FEW_COLS, FEW_WARPS = 4096, 4  # 32 registers a thread for a stream's columns, 32 for y's
FINISH_TILE, FINISH_WARPS = 4096, 8
GATE_ROWS, GATE_SPLITS, GATE_WARPS = 16, 16, 2  # a gates program: rows, splits summed at once.
# H100, 4096 rows (4 splits), the launch alone: 4.78 us; 16 lanes fitted to the 4 splits 5.17
# (48 registers a thread, not 168); 8 rows at 1 warp 4.44; 32 or 64 rows 5.3 to 6.5 (hc_rows)
APPLY_WARPS = 16  # one X row a program: 4.0 TB/s at 2048 rows
FUSED_WARPS = 4  # decode's one launch on the H200: 9.25 us a site at 4 warps, 10.2 at 8, 11.3
# at 16 (Sinkhorn's reductions cross fewer warps; it is 2.2 us of the 9.25)

_INTERPRET_DOT = "{acc} = tl.dot({x}, tl.trans({w}.to(tl.float32)), {acc})\n"
# The projections feed sigmoids and 20 Sinkhorn rounds, and plain tf32 would cost ~1e-3 relative.
# bf16 weights are exact in bf16: X split as hi + lo bf16 parts gives ~2^-16 relative error from
# two bf16 MMAs; fp32 weights take tf32x3.
_GPU_DOT = """wt = tl.trans({w})
if fn_ptr.dtype.element_ty == tl.bfloat16:
    x_hi = {x}.to(tl.bfloat16)
    {acc} = tl.dot(x_hi, wt, {acc})
    {acc} = tl.dot(({x} - x_hi.to(tl.float32)).to(tl.bfloat16), wt, {acc})
else:
    {acc} = tl.dot({x}, wt.to(tl.float32), {acc}, input_precision="tf32x3")
"""


def partial_dot(x: str = "x", w: str = "w", acc: str = "acc") -> str:
    """Source lines of `acc` += `x` (fp32 rows) @ `w`^T (fn rows, of fn_ptr's dtype) at the
    projection's precision (fp32 in the interpreter)."""
    return (_INTERPRET_DOT if CONFIG.interpret else _GPU_DOT).format(x=x, w=w, acc=acc)


@dataclass(frozen=True)
class HCPreSpec:
    n: int
    d: int
    norm_eps: float
    hc_eps: float
    iters: int
    out_eps: float | None = None  # the site's RMSNorm folded in: y = rms(y)
    out_weight: bool = False  # and its weight (ow [D]): y = rms(y) * ow


def kernel_names(name: str) -> tuple[str, ...]:
    """(one-launch, projection, finish, gates, apply kernels) defined by source(name, ...)."""
    return name, f"{name}_proj", f"{name}_finish", f"{name}_gates", f"{name}_apply"


def blocks(spec: HCPreSpec) -> dict[str, int]:
    d2 = next_power_of_2(spec.d)
    np2 = next_power_of_2(spec.n)
    j = (2 + spec.n) * spec.n  # projections: n pre, n post, n*n comb logits
    return {
        "J": j,
        "NP": np2,
        "JP": max(16, next_power_of_2(j + 1)),  # column J: sum(x^2); tl.dot N >= 16
        "BLOCK_K": max(16, min(PROJ_K, d2)),
        "BLOCK_Y": max(16, min(ROW_TILE // np2, d2)),  # X columns a finish loads at once
        "BLOCK_F": max(16, min(FINISH_TILE // np2, d2)),  # and a few-row step's, in the row form
    }


_CONSTS = ("N", "D", "J", "NP", "JP", "BLOCK_T", "BLOCK_P", "BLOCK_K", "BLOCK_Y", "BLOCK_F", "SB",
           "RB", "SG",
           "NORM_EPS", "HC_EPS", "ITERS")
_SIG = ["x_ptr", "fn_ptr", "base_ptr", "scale_ptr", "y_ptr", "post_ptr", "comb_ptr", "part_ptr",
        "rows", "rows_pad", "splits", "kb_split", "sx_row", "sx_stream", "s_fn", "sy_row",
        "spost_row", "scomb_row", "scomb_i"]


def signature(spec: HCPreSpec) -> list[str]:
    """The kernels' runtime parameters (the norm weight's pointer last, when spec.out_weight)."""
    return _SIG + (["ow_ptr"] if spec.out_weight else [])


def _constexprs(spec: HCPreSpec) -> list[str]:
    b = blocks(spec)
    vals = {"N": spec.n, "D": spec.d, "J": b["J"], "NP": b["NP"], "JP": b["JP"],
            "BLOCK_T": BLOCK_T, "BLOCK_P": PROJ_ROWS, "BLOCK_K": b["BLOCK_K"],
            "BLOCK_Y": b["BLOCK_Y"], "BLOCK_F": b["BLOCK_F"], "SB": SPLIT_BLOCK, "RB": GATE_ROWS,
            "SG": GATE_SPLITS,
            "NORM_EPS": spec.norm_eps, "HC_EPS": spec.hc_eps, "ITERS": spec.iters}
    return [f"{k}: tl.constexpr = {vals[k]!r}" for k in _CONSTS]


def finish_args(spec: HCPreSpec) -> list[str]:
    """`_finish_row`'s constexpr arguments after its runtime ones, as source literals."""
    b = blocks(spec)
    vals = [spec.n, spec.d, b["J"], b["NP"], b["JP"], SPLIT_BLOCK, b["BLOCK_Y"], spec.norm_eps,
            spec.hc_eps, spec.iters] + ([] if spec.out_eps is None else [spec.out_eps])
    return [repr(v) for v in vals]


def projections(spec: HCPreSpec) -> tuple[int, int]:
    """(J projections of a row, JP: their padded width, the partials' row length)."""
    b = blocks(spec)
    return b["J"], b["JP"]


def _partials_source() -> str:
    dot = partial_dot()
    head, tail = runtime_loop("b", "b_lo", "b_hi", "1", " " * 4)
    return f'''
@triton.jit
def _partials(x_ptr, fn_ptr, part_ptr, rows, rows_pad, kb_split, sx_row, sx_stream, s_fn,
              D: tl.constexpr, N: tl.constexpr, J: tl.constexpr, JP: tl.constexpr,
              BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr, SS: tl.constexpr = False):
    """This program's K blocks of m = X_flat @ fn^T for its BLOCK_T rows, to the scratch (SS:
    with their sum(x^2) in column J). A block lies in one stream, so its columns are contiguous
    (vector loads) at a scalar offset."""
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    tmask = t < rows
    t64 = t.to(tl.int64)
    j = tl.arange(0, JP)
    kk = tl.arange(0, BLOCK_K)
    KB: tl.constexpr = (D + BLOCK_K - 1) // BLOCK_K  # blocks per stream
    b_lo = tl.program_id(1) * kb_split
    b_hi = tl.minimum(b_lo + kb_split, N * KB)
    acc = tl.zeros((BLOCK_T, JP), tl.float32)  # fn rows >= J are 0
    sq = tl.zeros((BLOCK_T, BLOCK_K), tl.float32)
{head}        i = b // KB
        c = (b - i * KB) * BLOCK_K + kk
        cmask = c < D
        x = tl.load(x_ptr + t64[:, None] * sx_row + i * sx_stream + c[None, :],
                    mask=tmask[:, None] & cmask[None, :], other=0.0).to(tl.float32)
        w = tl.load(fn_ptr + j[:, None] * s_fn + i * D + c[None, :],
                    mask=(j < J)[:, None] & cmask[None, :], other=0.0)
        if SS:
            sq += x * x
{indent_block(dot, 8)}{tail}    at = part_ptr + (tl.program_id(1) * rows_pad + t64) * JP
    if SS:  # column J (0 in acc: fn rows >= J are 0) stored apart, in x's own layout
        tl.store(at[:, None] + j[None, :], acc, mask=tmask[:, None] & (j != J)[None, :])
        tl.store(at + J, tl.sum(sq, axis=1), mask=tmask)
    else:
        tl.store(at[:, None] + j[None, :], acc, mask=tmask[:, None])
'''


def _tiled(spec: HCPreSpec) -> bool:
    """Whether the row-form finish walks its row in tiles where `_finish_row` holds it whole
    (then it needs `_finish_tiled`'s text; else it calls `_finish_row` with BLOCK_F)."""
    b = blocks(spec)
    return (b["BLOCK_F"] >= spec.d) != (b["BLOCK_Y"] >= spec.d)


def finish_source(spec: HCPreSpec, name: str = "_finish_row", block: str = "BLOCK_Y") -> str:
    """The `_finish_row` helper (a GEMM that finishes the site it feeds includes it too), or
    another `name` for X columns `blocks(spec)[block]` at once (passed as its BLOCK_Y)."""
    # passes over X: sum(x^2) for the stream norm, sum(y^2) for out_eps, then y
    whole = blocks(spec)[block] >= spec.d  # the row is one register tile: one X read
    y = "y = tl.sum(pre[:, None] * x, axis=0)\n"
    load = "d = dd\n" + LOAD_X if whole else ""
    head = (load + "sq = tl.zeros((BLOCK_Y,), tl.float32)\n"
            + row_pass("sq += tl.sum(x * x, axis=0)\n", whole) + "ss = tl.sum(sq, axis=0)\n")
    norm_pass, scale = "", ""
    if spec.out_eps is not None:
        norm_pass = ("sq = tl.zeros((BLOCK_Y,), tl.float32)\n"
                     + row_pass(y + "sq += y * y\n", whole)
                     + "inv = tl.rsqrt(tl.sum(sq, axis=0) / D + OUT_EPS)\n")
        scale = scale_y(spec.out_weight)
    y_again = "" if whole and spec.out_eps is not None else y  # the norm pass made it
    store = row_pass(y_again + scale + "tl.store(y_ptr + row * sy_row + d, "
                      "y.to(y_ptr.dtype.element_ty), mask=d < D)\n", whole)
    out_eps = "" if spec.out_eps is None else ",\n                OUT_EPS: tl.constexpr"
    ow = " ow_ptr," if spec.out_weight else ""
    body = f'''row = row.to(tl.int64)
j = tl.arange(0, JP)
ii = tl.arange(0, NP)
dd = tl.arange(0, BLOCK_Y)
smask = (ii < N)[:, None]  # padded streams read zeros
x_row = x_ptr + row * sx_row + ii[:, None] * sx_stream
{partial_sums()}{head}{GATES}
# register tensors cannot be sliced: pick columns out with one-hot masked sums
pre = tl.sum(tl.where(j[None, :] == ii[:, None], sig[None, :], 0.0), axis=1) + HC_EPS
{norm_pass}{store}
{comb(spec.n)}'''
    return f'''
@triton.jit
def {name}(row, x_ptr, base_ptr, scale_ptr, y_ptr, post_ptr, comb_ptr, part_ptr, rows_pad,
                splits, sx_row, sx_stream, sy_row, spost_row, scomb_row, scomb_i,{ow}
                N: tl.constexpr, D: tl.constexpr, J: tl.constexpr, NP: tl.constexpr,
                JP: tl.constexpr, SB: tl.constexpr, BLOCK_Y: tl.constexpr,
                NORM_EPS: tl.constexpr, HC_EPS: tl.constexpr, ITERS: tl.constexpr{out_eps}):
    """One row: partials -> gates -> Sinkhorn -> post, comb, y."""
{indent_block(body, 4)}'''


def gram(spec: HCPreSpec) -> tuple[int, int]:
    """(offset, row length) of the streams' Gram partials in a formed site's partials buffer:
    after its site_programs(d) rows of projection partials, one row of next_power_of_2(n *
    n) floats a program."""
    return _gram(spec, CONFIG.sms)


@functools.lru_cache(maxsize=256)  # every launch of a formed site's GEMVs asks
def _gram(spec: HCPreSpec, sms: int) -> tuple[int, int]:
    """gram(spec) under the `sms` knob's value (site_programs reads it)."""
    return site_programs(spec.d) * projections(spec)[1], next_power_of_2(spec.n * spec.n)


def parts_lines(spec: HCPreSpec, x: str, s_stream: str, lo: bool) -> list[str]:
    """Source lines for one program of a one-row site whose y the GEMV after it forms: over its
    columns rn (n_ok) of the streams (stream i at `x` + i * `s_stream`), its partials of X @
    fn^T with sum(x^2) in column J (row pid_n of `part_ptr`), its columns of the streams' Gram
    (its row of `gram(spec)`), and each stream's columns as a hi part in parts_ptr's dtype
    (rows 0..n-1), then (`lo`) the lo part that rounding left (rows n..2n-1). Each stream's
    columns are loaded once."""
    n, d = spec.n, spec.d
    (j, jp), (at, nn) = projections(spec), gram(spec)
    lines = [f"jj = tl.arange(0, {jp})", f"pj = tl.zeros(({jp},), tl.float32)",
             f"q = tl.arange(0, {nn})", f"gv = tl.zeros(({nn},), tl.float32)"]
    for i in range(n):
        lines += [f"xs{i} = tl.load({x} + {i} * {s_stream} + rn, mask=n_ok, other=0.0)",
                  f"wf = tl.load(fn_ptr + jj[:, None] * s_fn + {i * d} + rn[None, :],",
                  f"             mask=(jj < {j})[:, None] & n_ok[None, :], other=0.0)",
                  f"pj += tl.sum(wf.to(tl.float32) * xs{i}[None, :], axis=1)",
                  f"hi = xs{i}.to(parts_ptr.dtype.element_ty)",
                  f"tl.store(parts_ptr + {i * d} + rn, hi, mask=n_ok)"]
        if lo:
            lines += [f"tl.store(parts_ptr + {(n + i) * d} + rn, (xs{i} - hi.to(tl.float32))"
                      ".to(parts_ptr.dtype.element_ty), mask=n_ok)"]
    # the Gram G[a, b] = sum X_a X_b (the forming GEMV's sum(y^2) in fp32, off its K loop);
    # its trace, sum(x^2), also goes to column J of the partials
    lines += [f"gv = tl.where((q == {a * n + b}) | (q == {b * n + a}), "
              f"tl.sum(xs{a} * xs{b}, axis=0), gv)" for a in range(n) for b in range(a, n)]
    trace = " | ".join(f"(q == {i * n + i})" for i in range(n))
    return lines + [f"pj = tl.where(jj == {j}, tl.sum(tl.where({trace}, gv, 0.0), axis=0), pj)",
                    f"tl.store(part_ptr + pid_n * {jp} + jj, pj)",
                    f"tl.store(part_ptr + {at} + pid_n * {nn} + q, gv)"]


def gates_source(spec: HCPreSpec) -> str:
    """The `_site_gates` helper: a one-row site's post and comb from partials that carry the
    row's sum(x^2) in column J (a GEMV that forms the site's y itself runs it in one program)."""
    body = f'''row = 0
rows_pad = 1
spost_row = 0
scomb_row = 0
j = tl.arange(0, JP)
{partial_sums()}ss = tl.sum(tl.where(j == J, m, 0.0), axis=0)
{GATES}{comb(spec.n)}'''
    return f'''
@triton.jit
def _site_gates(part_ptr, splits, base_ptr, scale_ptr, post_ptr, comb_ptr, scomb_i,
                N: tl.constexpr, D: tl.constexpr, J: tl.constexpr, JP: tl.constexpr,
                SB: tl.constexpr, NORM_EPS: tl.constexpr, HC_EPS: tl.constexpr,
                ITERS: tl.constexpr):
    """Row 0's post and comb from its partials (rows_pad 1; sum(x^2) in column J)."""
{indent_block(body, 4)}'''


def gates_args(spec: HCPreSpec) -> list[str]:
    """`_site_gates`'s constexpr arguments after its runtime ones, as source literals."""
    b = blocks(spec)
    return [repr(v) for v in (spec.n, spec.d, b["J"], b["JP"], SPLIT_BLOCK, spec.norm_eps,
                              spec.hc_eps, spec.iters)]


def _kernels_source(name: str, spec: HCPreSpec) -> str:
    fused, proj, finish, gates, apply = kernel_names(name)
    consts = _constexprs(spec)
    out_eps = [] if spec.out_eps is None else [f"OUT_EPS: tl.constexpr = {spec.out_eps!r}"]
    params = signature(spec) + consts + out_eps
    part_args = ("x_ptr fn_ptr part_ptr rows rows_pad kb_split sx_row sx_stream s_fn D N J JP "
                 "BLOCK_T BLOCK_K").split()
    wide_args = [a if a != "BLOCK_T" else "BLOCK_P" for a in part_args]
    runtime = ("x_ptr base_ptr scale_ptr y_ptr post_ptr comb_ptr part_ptr rows_pad splits "
               "sx_row sx_stream sy_row spost_row scomb_row scomb_i").split()
    row_consts = "N D J NP JP SB BLOCK_Y NORM_EPS HC_EPS ITERS".split() + ["OUT_EPS"][:len(out_eps)]
    row_args = runtime + ["ow_ptr"] * spec.out_weight + row_consts  # _finish_row's order
    partials = wrap("    _partials(", part_args, ")", 14)
    wide = wrap("    _partials(", wide_args + ["SS"], ")", 14)
    rhead, rtail = runtime_loop("r", "0", "n_live", "1", " " * 8)
    dns = '["rows", "rows_pad", "splits", "kb_split"]'
    wait = pdl("    ")
    few = few_body(spec, min(FEW_COLS, next_power_of_2(spec.d)))
    finish_body = ("    if FEW:\n" + indent_block(few, 8) + "    else:\n"
                   + wrap(f"        {'_finish_tiled' if _tiled(spec) else '_finish_row'}(",
                          ["tl.program_id(0)"]
                          + [a if a != "BLOCK_Y" else "BLOCK_F" for a in row_args], ")", 20))
    return f'''
@triton.jit(do_not_specialize={dns})
{wrap(f"def {fused}(", signature(spec) + ["count_ptr"] + consts + out_eps, "):", 8)}
{wait}{partials}
    # every thread's partials are written before the ticket; the last ticket finishes the block
    tl.debug_barrier()
    ticket = tl.atomic_add(count_ptr + tl.program_id(0), 1, sem="acq_rel")
    if ticket == splits - 1:
        tl.debug_barrier()
        tl.store(count_ptr + tl.program_id(0), 0)
        n_live = tl.minimum(rows - tl.program_id(0) * BLOCK_T, BLOCK_T)
{rhead}{wrap("            _finish_row(", ["tl.program_id(0) * BLOCK_T + r"] + row_args, ")", 24)}
{rtail}

@triton.jit(do_not_specialize={dns})
{wrap(f"def {proj}(", params + ["SS: tl.constexpr = False"], "):", 8)}
{wait}{wide}


@triton.jit(do_not_specialize={dns})
{wrap(f"def {finish}(", params + ["FEW: tl.constexpr = False"], "):", 8)}
{wait}{finish_body}


@triton.jit(do_not_specialize={dns})
{wrap(f"def {gates}(", params, "):", 8)}
{wait}{indent_block(gates_body(spec), 4)}

@triton.jit(do_not_specialize={dns})
{wrap(f"def {apply}(", params, "):", 8)}
{wait}{indent_block(apply_body(spec, blocks(spec)["BLOCK_Y"] >= spec.d), 4)}'''


def parts_name(name: str) -> str:
    """The kernel of source(name, ...) that writes a formed site's parts at one row (grid
    (site_programs(d),)): what the GEMV after the site forms y from, when no GEMM before
    the site writes them (the first site, after the embedding)."""
    return f"{name}_parts"


def _parts_source(name: str, spec: HCPreSpec) -> str:
    body = ["pid_n = tl.program_id(0)", "rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
            f"n_ok = rn < {spec.d}"] + parts_lines(spec, "x_ptr", "sx_stream", CONFIG.site_lo_parts)
    return f'''
@triton.jit
def {parts_name(name)}(x_ptr, fn_ptr, part_ptr, parts_ptr, sx_stream, s_fn, BLOCK_N: tl.constexpr):
    """Row 0's parts of a formed site: `parts_lines` over BLOCK_N columns a program."""
{pdl("    ")}{indent_block(chr(10).join(body), 4)}
'''


def source(name: str, spec: HCPreSpec, header: str = "") -> str:
    return (f"{comment(header)}import triton\nimport triton.language as tl\n\n"
            f"{_partials_source()}\n{finish_source(spec)}\n"
            f"{finish_source(spec, '_finish_tiled', 'BLOCK_F') if _tiled(spec) else ''}\n"
            f"{_kernels_source(name, spec)}\n"
            f"{_parts_source(name, spec)}")
