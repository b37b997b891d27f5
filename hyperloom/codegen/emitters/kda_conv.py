"""KDA's causal depthwise conv + SiLU (`hyperloom.ir.semantics.kda.kda_conv`) over the q, k, v
channels, with each sequence's window of the last kernel - 1 inputs (fp32 [slots, 3C, kernel -
1]) updated in place. Two forms, one source:

`{name}_runs`, for steps of at most SERIAL_ROWS rows a sequence (decode, verify): grid (rows,
3 * cdiv(C, BC)); the program of a run's first row walks the run's rows in order with the window
in registers, and writes the new window at the end; the other programs return at once.

`{name}`, for prefill steps: grid (cdiv(rows, BR), 3 * cdiv(C, BC)); program (b, part * blocks +
cb) owns rows [b BR, (b + 1) BR) and channels cb*BC.. of q, k or v (part 0, 1, 2); every row of a
prefill is computed in parallel, each from the inputs before it (the rows of its run before it in
this step, else its sequence's window). A run's rows are contiguous, so a row's place in its run
(d, up to kernel - 1) comes from the slots of the rows just before it. A run's first kernel - 1
rows, the only ones that read its window, belong to the program owning the run's first row (their
tile reaches kernel - 2 rows past its BR), and that program alone writes the run's new window (the
run's last kernel - 1 inputs, or the old window shifted for a shorter run), after its reads: no
other program touches that window. So a program sums its rows' own inputs as one tile, then takes
the runs that start in it one by one (the window's part of their first rows, their new window),
and the programs of a long prefill's later rows have no window work at all. Padding rows (slot <
0) are not computed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hyperloom.codegen.emitters import kda_gate
from hyperloom.codegen.emitters.ints import cdiv, next_power_of_2
from hyperloom.codegen.emitters.loops import runtime_loop
from hyperloom.codegen.emitters.text import RUN_STOP, comment, pdl
from hyperloom.config import CONFIG
from hyperloom.passes.kernel_plan import GEMV_ROWS, KDA_CONV_SERIAL_ROWS

CONV_BC = 128  # channels per conv program
BIG = 1 << 30


@dataclass(frozen=True)
class Tile:
    """A program's row tile (BT rows, of which the first BT - (kernel - 2) are its own; the
    rest: spill of its runs' first kernel - 1 rows), channels and warps."""
    rows: int
    channels: int
    warps: int


# the tiled form's tile. On the H200 at GLM-5.3's width (CUDA graphs of launches), with the
# window as [BT, BC] tiles (216 registers a thread on [32, 128] x 4 warps: two programs a
# multiprocessor): prefill 2048 rows 328 us on [32, 128] x 4 warps, 396 on [8, 128] and
# [16, 128], 626 on [8, 64], 791 on [16, 128] x 8 warps (BENCHMARKS). With the window run by run
# as [BC] vectors (106 registers, ptxas sm_90; bench/sweeps/kda_conv.py, d8e231b): prefill 2048
# rows 110-111 us on [16, 128] x 4 warps, 118 on [32, 128], 154-156 on [64, 128] and [32, 256],
# 268 on [64, 128] x 8 warps; prefill 256 rows 15.6-15.9 us against 15.9-16.0
CONV_TILE = Tile(16, 128, 4)
# at most this many rows a sequence: the _runs form. H200, GLM-5.3's width, us: decode b1 1.66
# vs 4.0 tiled, b16 4.15 vs 11.6, verify 4 x 4 rows 4.79 vs 6.46; prefill 256 rows 117 vs 41
SERIAL_ROWS = KDA_CONV_SERIAL_ROWS


def kernel_names(name: str) -> tuple[str, str]:
    """(the tiled form, the run-walking form), both defined by source(name, ...)."""
    return name, f"{name}_runs"


def _conv_block(channels: int, most: int = CONV_BC) -> int:
    return min(most, 1 << (channels - 1).bit_length())  # a power of two


# the f_b GEMM + decay gate a conv launch carries (kernel_plan: `carries`) in steps of at most
# GATE_ROWS rows: GATE_BN gate columns a program, all the step's rows 16 at a time. ptxas for
# sm_90 at GLM-5.3's width, one stage (the run-walking form pipelines nothing): 32 registers
# and 12 KB of shared memory a program, against 32 and none without the gate (64 columns: 20
# KB, 11 programs a multiprocessor, not 16)
GATE_ROWS, GATE_BN = GEMV_ROWS, 32


@dataclass(frozen=True)
class ConvSpec:
    channels: int  # C: channels of each of q, k, v
    kernel: int  # taps; the window keeps kernel - 1 inputs per channel
    gate: kda_gate.KDAGateSpec | None = None  # the f_b GEMM + decay gate it carries
    rank: int = 0  # that GEMM's K (f_a's width)

    def tile(self, t: Tile = CONV_TILE) -> tuple[int, int, int, int]:
        """(BT, BR, BC, warps) of the tiled form on `t`: its row tile, the rows a program owns,
        its channels and warps."""
        bt = max(t.rows, next_power_of_2(2 * self.kernel))
        return bt, bt - max(self.kernel - 2, 0), _conv_block(self.channels, t.channels), t.warps


_HELPERS = RUN_STOP + '''

@triton.jit
def _place(slot_ptr, r, s, rows, K: tl.constexpr):
    """Rows of r's run before r, at most K - 1 (a run's rows are contiguous), and whether the
    slot changes at r (r starts a run, or is padding or past the rows)."""
    d = tl.zeros(r.shape, tl.int32)
    same = s >= 0
    prev = tl.load(slot_ptr + r - 1, mask=(r >= 1) & (r - 1 < rows), other=-1)
    for j in tl.static_range(1, K):
        if j == 1:
            sj = prev
        else:
            sj = tl.load(slot_ptr + r - j, mask=(r >= j) & (r - j < rows), other=-1)
        same = same & (sj == s)
        d += same.to(tl.int32)
    return d, (r >= rows) | (s != prev)


@triton.jit
def _run_ends(slot_ptr, base, r, edge, start, rows, BT: tl.constexpr, BIG: tl.constexpr):
    """One past the last row of each run starting at a row of r (where start): the next slot
    change in the tile, else (the tile's last run) the first one after it."""
    later = (r[None, :] > r[:, None]) & edge[None, :]
    stop = tl.min(tl.where(later, r[None, :], BIG), axis=1)
    if tl.max((start & (stop == BIG)).to(tl.int32), axis=0) > 0:
        last = tl.load(slot_ptr + base + BT - 1)  # the tile ends inside that run
        stop = tl.where(stop == BIG, _run_end(slot_ptr, base + BT, last, rows), stop)
    return stop
'''


# a program's operands: q's, else k's or v's (part 1, 2)
PICKS = "".join(f'''    if part == {p}:
        x_ptr, sx, w_ptr, o_ptr, so = {n}_ptr, s{n}, w{n}_ptr, o{n}_ptr, so{n}
''' for p, n in ((1, "k"), (2, "v")))


def _new_window(taps: int) -> tuple[str, str]:
    """(reads, writes) of the new window entries n0.. of the run that starts at row i0 and
    ends before row st (scalars), [BC] vectors at its window wr: entry i is the input at st -
    taps + i, from x inside the run, else the old window's entry i + (st - i0)."""
    indent = " " * 12
    reads = "".join(f'''{indent}at = st - {taps - i}
{indent}mine = at >= i0
{indent}n{i} = tl.where(mine, tl.load(x_ptr + at.to(tl.int64) * sx + c, mask=cm & mine,
{indent}                              other=0.0).to(tl.float32),
{indent}                tl.load(wr + st - i0 + {i}, mask=cm & ~mine, other=0.0))
''' for i in range(taps))
    writes = "".join(f"{indent}tl.store(wr + {i}, n{i}, mask=cm)\n" for i in range(taps))
    return reads, writes


def _taps(kernel: int) -> str:
    """The tiled form's sum over the run's own inputs: tap t{j} (weight K - 1 - j) times x[r -
    j] where row r has j rows of its run before it (the window's part comes later)."""
    return "".join(f'''    t{j} = tl.load(w_ptr + c * K + {kernel - 1 - j}, mask=cm, other=0.0)
    y += t{j}[None, :] * tl.load(x_ptr + (r - {j}).to(tl.int64)[:, None] * sx + c[None, :],
                                 mask=m & (d >= {j})[:, None], other=0.0).to(tl.float32)
''' for j in range(kernel))


def _old_window(kernel: int) -> str:
    """The window's part for the run starting at row i0 (ending before st): its old entries
    h0.. ([BC] vectors, h{K-2} the latest input) times the taps, added to the rows i0 + e, e <
    K - 1, whose taps reach back past the run's start (x[i0 + e - j] is entry K - 1 - (j - e))."""
    taps = kernel - 1
    out = "".join(f"{' ' * 12}h{i} = tl.load(wr + {i}, mask=cm, other=0.0)\n"
                  for i in range(taps))
    for e in range(taps):
        add = " + ".join(f"t{j} * h{taps - (j - e)}" for j in range(e + 1, kernel))
        out += (f"{' ' * 12}y += tl.where(((r == i0 + {e}) & (i0 + {e} < st))[:, None], "
                f"({add})[None, :], 0.0)\n")
    return out


def _gate_source(spec: ConvSpec) -> str:
    """`_gate_columns`: the carried f_b GEMM + decay gate over GATE_BN columns of every row."""
    up = ".to(tl.float32)" if CONFIG.interpret else ""  # the interpreter's low-precision dots
    head, tail = runtime_loop("r0", "0", "rows", "16", " " * 4)
    lines = kda_gate.gate_lines(spec.gate, "f", "c[None, :]", "cm[None, :]")
    gate = "".join(f"        {line}\n" for line in lines)
    return f'''

@triton.jit
def _gate_columns(f_ptr, sf, wf_ptr, bias_ptr, alog_ptr, g_ptr, sg, rows, nb,
                  W: tl.constexpr = {spec.gate.width}, KR: tl.constexpr = {spec.rank},
                  KP: tl.constexpr = {max(16, next_power_of_2(spec.rank))},
                  BN: tl.constexpr = {GATE_BN}):
    """Columns nb * BN.. of g = gate(f @ wf^T) for every row (emitters.kda_gate), 16 rows a
    product, the weight tile loaded once."""
    c = nb * BN + tl.arange(0, BN)
    cm = c < W
    kk = tl.arange(0, KP)
    km = kk < KR
    w = tl.load(wf_ptr + c[:, None] * KR + kk[None, :], mask=cm[:, None] & km[None, :],
                other=0.0)
{head}        rr = r0 + tl.arange(0, 16)
        rm = rr < rows
        x = tl.load(f_ptr + rr.to(tl.int64)[:, None] * sf + kk[None, :],
                    mask=rm[:, None] & km[None, :], other=0.0)
        f = tl.dot(x.to(w.dtype){up}, tl.trans(w{up}))  # [16, BN] fp32
{gate}        tl.store(g_ptr + rr.to(tl.int64)[:, None] * sg + c[None, :],
                 g.to(g_ptr.dtype.element_ty), mask=rm[:, None] & cm[None, :])
{tail}'''


def _runs_source(name: str, spec: ConvSpec, bc: int) -> str:
    """The form for a few rows a sequence: a run's rows walked in order from its window; with
    a carried gate (spec.gate), the programs past the conv's run `_gate_columns` (row 0's)."""
    taps = spec.kernel - 1
    load_h = "".join(f"    h{j} = tl.load(win + {j}, mask=cm, other=0.0)\n" for j in range(taps))
    load_w = "".join(f"    w{j} = tl.load(w_ptr + c * K + {j}, mask=cm, other=0.0)\n"
                     for j in range(spec.kernel))
    dot = " + ".join([f"w{j} * h{j}" for j in range(taps)] + [f"w{taps} * x"])
    shift = "".join(f"        h{j} = h{j + 1}\n" for j in range(taps - 1))
    shift += f"        h{taps - 1} = x\n" if taps else ""
    store_h = "".join(f"    tl.store(win + {j}, h{j}, mask=cm)\n" for j in range(taps))
    head, tail = runtime_loop("i", "r", "stop", "1", " " * 4)
    gate_args, gate = "", ""
    if spec.gate is not None:
        gate_args = "\n        f_ptr, sf, wf_ptr, bias_ptr, alog_ptr, g_ptr, sg,"
        gate = '''    if tl.program_id(1) >= 3 * blocks:  # the carried gate's columns
        if r == 0:
            _gate_columns(f_ptr, sf, wf_ptr, bias_ptr, alog_ptr, g_ptr, sg, rows,
                          tl.program_id(1) - 3 * blocks)
        return
'''
    return f'''{_gate_source(spec) if spec.gate is not None else ""}

@triton.jit
def {name}(q_ptr, k_ptr, v_ptr, wq_ptr, wk_ptr, wv_ptr, slot_ptr, win_ptr, oq_ptr, ok_ptr, ov_ptr,
        rows, sq, sk, sv, soq, sok, sov, sw_slot,{gate_args} C: tl.constexpr = {spec.channels},
        K: tl.constexpr = {spec.kernel}, BC: tl.constexpr = {bc}):
{pdl("    ")}    r = tl.program_id(0)
    blocks = tl.cdiv(C, BC)
{gate}    part = tl.program_id(1) // blocks  # 0: q, 1: k, 2: v
    c = (tl.program_id(1) % blocks) * BC + tl.arange(0, BC)
    cm = c < C
    stop = _run_stop(slot_ptr, r, rows)
    if stop == r:  # padding, or not the first row of its sequence's run
        return
    s = tl.load(slot_ptr + r)
    x_ptr, sx, w_ptr, o_ptr, so = q_ptr, sq, wq_ptr, oq_ptr, soq
{PICKS}    win = win_ptr + s * sw_slot + (part * C + c) * (K - 1)
{load_h}{load_w}{head}        row = i.to(tl.int64)
        x = tl.load(x_ptr + row * sx + c, mask=cm, other=0.0).to(tl.float32)
        y = {dot}
        tl.store(o_ptr + row * so + c, (y * tl.sigmoid(y)).to(o_ptr.dtype.element_ty), mask=cm)
{shift}{tail}{store_h}'''


def source(name: str, spec: ConvSpec, header: str = "") -> str:
    bt, br, bc, _ = spec.tile()
    reads, writes = _new_window(spec.kernel - 1)
    own = _taps(spec.kernel)
    return f'''{comment(header)}import triton
import triton.language as tl

{_HELPERS}
{_runs_source(kernel_names(name)[1], spec, bc)}

@triton.jit
def {name}(q_ptr, k_ptr, v_ptr, wq_ptr, wk_ptr, wv_ptr, slot_ptr, win_ptr, oq_ptr, ok_ptr, ov_ptr,
        rows, sq, sk, sv, soq, sok, sov, sw_slot, C: tl.constexpr = {spec.channels},
        K: tl.constexpr = {spec.kernel}, BC: tl.constexpr = {bc},
        BT: tl.constexpr = {bt}, BR: tl.constexpr = {br},
        BIG: tl.constexpr = {BIG}):
{pdl("    ")}    blocks = tl.cdiv(C, BC)
    part = tl.program_id(1) // blocks  # 0: q, 1: k, 2: v
    c = (tl.program_id(1) % blocks) * BC + tl.arange(0, BC)
    cm = c < C
    base = tl.program_id(0) * BR
    r = base + tl.arange(0, BT)
    s = tl.load(slot_ptr + r, mask=r < rows, other=-1)
    d, edge = _place(slot_ptr, r, s, rows, K)
    first = r - d  # the run's first row where d < K - 1
    work = (s >= 0) & tl.where(d == K - 1, r < base + BR, (first >= base) & (first < base + BR))
    x_ptr, sx, w_ptr, o_ptr, so = q_ptr, sq, wq_ptr, oq_ptr, soq
{PICKS}    m = work[:, None] & cm[None, :]
    y = tl.zeros([BT, BC], tl.float32)
{own}    # each run starting here, one at a time (in a long prefill, only its first program
    # has one): the window's part of its first K - 1 rows, then its new window, the run's last
    # K - 1 inputs (from the old window where the run is shorter), read before any is written.
    # As [BC] vectors: [BT, BC] tiles of the window took 216 registers a thread, not 106
    start = work & (d == 0)
    if tl.max(start.to(tl.int32), axis=0) > 0:
        stop = _run_ends(slot_ptr, base, r, edge, start, rows, BT, BIG)
        while tl.max(start.to(tl.int32), axis=0) > 0:
            i0 = tl.min(tl.where(start, r, BIG), axis=0)
            st = tl.min(tl.where(r == i0, stop, BIG), axis=0)
            wr = win_ptr + tl.load(slot_ptr + i0) * sw_slot + (part * C + c) * (K - 1)
{_old_window(spec.kernel)}{reads}            tl.debug_barrier()  # this run's old window is read
{writes}            start = start & (r != i0)
    tl.store(o_ptr + r.to(tl.int64)[:, None] * so + c[None, :],
             (y * tl.sigmoid(y)).to(o_ptr.dtype.element_ty), mask=m)
'''


@dataclass(frozen=True)
class Gate:
    """The carried f_b GEMM + decay gate's operands: f [rows, rank] (f_a's output), wf [W,
    rank], dt_bias [W], a_log [heads], out g [rows, W]."""
    f: torch.Tensor
    wf: torch.Tensor
    dt_bias: torch.Tensor
    a_log: torch.Tensor
    g: torch.Tensor


def _check_gate(spec: ConvSpec, gate: Gate) -> None:
    w, r = spec.gate.width, spec.rank
    for name, t, shape in (("f", gate.f, (None, r)), ("wf", gate.wf, (w, r)),
                           ("g", gate.g, (None, w))):
        if t.dim() != 2 or t.shape[1] != shape[1] or t.stride(1) != 1 \
                or (shape[0] is not None and (t.shape[0] != shape[0] or not t.is_contiguous())):
            raise ValueError(f"KDA conv's gate {name}: [{shape[0] or 'rows'}, {shape[1]}] "
                             f"with a contiguous last dim, got {tuple(t.shape)}")
    kda_gate.check_params(spec.gate, gate.dt_bias, gate.a_log)


def launch(kernels, spec: ConvSpec, *, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor, slot: torch.Tensor,
           window: torch.Tensor, oq: torch.Tensor, ok: torch.Tensor, ov: torch.Tensor,
           rows: int, seq_rows: int, tile: Tile = CONV_TILE,
           serial_rows: int = SERIAL_ROWS, gate: Gate | None = None) -> None:
    """The first `rows` rows (at most seq_rows of one sequence) with `kernels` (kernel_names'
    order): walked run by run up to serial_rows a sequence, else on `tile`; window fp32 [slots,
    3C, kernel - 1], updated in place. With spec.gate, a step of at most GATE_ROWS rows also
    runs the carried gate (its operands: `gate`) in the run-walking form's launch."""
    c, kn = spec.channels, spec.kernel
    if tuple(window.shape[1:]) != (3 * c, kn - 1) or window.dtype != torch.float32 \
            or not window.is_contiguous():
        raise ValueError(f"KDA conv window: contiguous fp32 [slots, {3 * c}, {kn - 1}], got "
                         f"{window.dtype} {tuple(window.shape)}")
    for name, w in (("wq", wq), ("wk", wk), ("wv", wv)):
        if tuple(w.shape) != (c, 1, kn) or not w.is_contiguous():
            raise ValueError(f"KDA conv {name}: contiguous [{c}, 1, {kn}], got {tuple(w.shape)}")
    for name, t in (("q", q), ("k", k), ("v", v), ("out q", oq), ("out k", ok), ("out v", ov)):
        if t.shape[-1] != c or t.stride(-1) != 1:
            raise ValueError(f"KDA conv {name}: last dim {c} contiguous, got {tuple(t.shape)}")
    if rows == 0:
        return
    args = (q, k, v, wq, wk, wv, slot, window, oq, ok, ov, rows, q.stride(0), k.stride(0),
            v.stride(0), oq.stride(0), ok.stride(0), ov.stride(0), window.stride(0))
    tiled, runs = kernels
    bt, br, bc, warps = spec.tile(tile)
    run_args, extra = args, 0
    if spec.gate is not None:
        if gate is None:
            raise ValueError("KDA conv: a spec with a carried gate needs the gate's operands")
        _check_gate(spec, gate)
        run_args += (gate.f, gate.f.stride(0), gate.wf, gate.dt_bias, gate.a_log, gate.g,
                     gate.g.stride(0))
        if rows <= GATE_ROWS:  # the gate's programs after the conv's (a wider step's GEMM
            extra = cdiv(spec.gate.width, GATE_BN)  # entry launches itself)
    if seq_rows <= serial_rows or extra:
        runs[(rows, 3 * cdiv(c, bc) + extra)](*run_args, BC=bc, num_warps=4, num_stages=1)
    else:
        tiled[(cdiv(rows, br), 3 * cdiv(c, bc))](*args, BC=bc, BT=bt, BR=br, num_warps=warps)
