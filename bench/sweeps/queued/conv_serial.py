"""The KDA conv's previous form (before 6f10e08), for one timing against the committed one
(`bench/sweeps/kda_conv.py`): the first row of each run walks the run's tokens in one program,
after a serial search for the run's end. Delete it once timed."""

from __future__ import annotations

from hyperloom.codegen.emitters.loops import runtime_loop
from hyperloom.codegen.emitters.kda_conv import PICKS, ConvSpec, _conv_block
from hyperloom.codegen.emitters.kda_conv import launch as _launch
from hyperloom.codegen.emitters.text import comment, pdl


# the run's end as that form found it: a load a row
RUN_STOP = '''
@triton.jit
def _run_stop(slot_ptr, r, rows):
    s = tl.load(slot_ptr + r)
    prev = tl.load(slot_ptr + r - 1, mask=r > 0, other=-1)
    stop = r
    if (s >= 0) & (prev != s):
        stop = r + 1
        while (stop < rows) & (tl.load(slot_ptr + stop, mask=stop < rows, other=-1) == s):
            stop += 1
    return stop
'''


def source(name: str, spec: ConvSpec, header: str = "") -> str:
    taps = spec.kernel - 1
    load_h = "".join(f"    h{j} = tl.load(win + {j}, mask=cm, other=0.0)\n" for j in range(taps))
    load_w = "".join(f"    w{j} = tl.load(w_ptr + c * K + {j}, mask=cm, other=0.0)\n"
                     for j in range(spec.kernel))
    dot = " + ".join([f"w{j} * h{j}" for j in range(taps)] + [f"w{taps} * x"])
    shift = "".join(f"        h{j} = h{j + 1}\n" for j in range(taps - 1))
    shift += f"        h{taps - 1} = x\n" if taps else ""
    store_h = "".join(f"    tl.store(win + {j}, h{j}, mask=cm)\n" for j in range(taps))
    head, tail = runtime_loop("i", "r", "stop", "1", " " * 4)
    return f'''{comment(header)}import triton
import triton.language as tl

{RUN_STOP}

@triton.jit
def {name}(q_ptr, k_ptr, v_ptr, wq_ptr, wk_ptr, wv_ptr, slot_ptr, win_ptr, oq_ptr, ok_ptr, ov_ptr,
        rows, sq, sk, sv, soq, sok, sov, sw_slot, C: tl.constexpr = {spec.channels},
        K: tl.constexpr = {spec.kernel}, BC: tl.constexpr = {_conv_block(spec.channels)}):
{pdl("    ")}    r = tl.program_id(0)
    blocks = tl.cdiv(C, BC)
    part = tl.program_id(1) // blocks  # 0: q, 1: k, 2: v
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


def launch(kernel, spec: ConvSpec, *, rows: int, **kw) -> None:
    """The committed launch's checks, then a program a row."""
    _launch(_Grid(kernel, rows), spec, rows=rows, **kw)


class _Grid:
    """The kernel launched over (rows, channel blocks) whatever grid the committed launch asks."""

    def __init__(self, kernel, rows: int) -> None:
        self.kernel, self.rows = kernel, rows

    def __getitem__(self, grid: tuple):
        run = self.kernel[(self.rows, grid[1])]
        return lambda *a, BC, BT, BR, **kw: run(*a, **kw)  # this form tiles no rows
