"""KDA's causal depthwise conv + SiLU (`hyperloom.ir.semantics.kda.kda_conv`) over the q, k, v
channels, with each sequence's window of the last kernel - 1 inputs (fp32 [slots, 3C, kernel -
1]) updated in place.

Grid (rows, 3 * cdiv(C, BC)): program (r, part * blocks + b) owns channels b*BC.. of q, k or v
(part 0, 1, 2). As in the recurrence (`emitters.kda`), the first row of a sequence's run loads
its window once, walks the run's tokens (out = silu(taps . w), the window shifted by the token)
and stores it once; later rows of the run and padding rows (slot < 0) return at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hyperloom.codegen.emitters.loops import runtime_loop
from hyperloom.codegen.emitters.text import RUN_STOP, comment, pdl


CONV_BC = 128  # channels per conv program


def _conv_block(channels: int) -> int:
    return min(CONV_BC, 1 << (channels - 1).bit_length())  # a power of two


@dataclass(frozen=True)
class ConvSpec:
    channels: int  # C: channels of each of q, k, v
    kernel: int  # taps; the window keeps kernel - 1 inputs per channel


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
    picks = "".join(f'''    if part == {p}:
        x_ptr, sx, w_ptr, o_ptr, so = {n}_ptr, s{n}, w{n}_ptr, o{n}_ptr, so{n}
''' for p, n in ((1, "k"), (2, "v")))
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
{picks}    win = win_ptr + s * sw_slot + (part * C + c) * (K - 1)
{load_h}{load_w}{head}        row = i.to(tl.int64)
        x = tl.load(x_ptr + row * sx + c, mask=cm, other=0.0).to(tl.float32)
        y = {dot}
        tl.store(o_ptr + row * so + c, (y * tl.sigmoid(y)).to(o_ptr.dtype.element_ty), mask=cm)
{shift}{tail}{store_h}'''


def launch(kernel, spec: ConvSpec, *, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor, slot: torch.Tensor,
                window: torch.Tensor, oq: torch.Tensor, ok: torch.Tensor, ov: torch.Tensor,
                rows: int) -> None:
    """The first `rows` rows; window fp32 [slots, 3C, kernel - 1], updated in place."""
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
    blocks = -(-c // _conv_block(c))
    kernel[(rows, 3 * blocks)](q, k, v, wq, wk, wv, slot, window, oq, ok, ov, rows,
                               q.stride(0), k.stride(0), v.stride(0), oq.stride(0), ok.stride(0),
                               ov.stride(0), window.stride(0), num_warps=4)
