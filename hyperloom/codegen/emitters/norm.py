"""Row norms on their own, for norms no projection takes as its prologue: `rmsnorm` (x * rsqrt(
mean(x^2) + eps) * w), `gated_rmsnorm` (the same per head_dim group, times sigmoid(gate): KDA's
output norm) and `layernorm` (`hyperloom.ir.semantics.dense`).

x [rows, ...] with each row contiguous (any float dtype), read as [rows, width]; gate like x;
w (and layernorm's b) [group]; out [rows, width] in its own dtype. Statistics in fp32.

Grid (rows, width / group): a program normalises one group of one row (the row itself unless
the norm is per head), read once, in registers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from hyperloom.codegen.emitters.ints import next_power_of_2
from hyperloom.codegen.emitters.text import comment, pdl

KINDS = ("rmsnorm", "gated_rmsnorm", "layernorm")
REGS_PER_THREAD = 16  # fp32 values of the group each thread holds


@dataclass(frozen=True)
class NormSpec:
    kind: str
    width: int  # elements of a row
    group: int  # elements normalised together (width, or head_dim for gated_rmsnorm)
    eps: float

    def __post_init__(self) -> None:
        if self.kind not in KINDS or self.group < 1 or self.width % self.group:
            raise ValueError(f"norm: kind {self.kind!r} (one of {KINDS}), width {self.width} "
                             f"a multiple of group {self.group}")


def _body(kind: str) -> str:
    if kind == "layernorm":
        return """    mean = tl.sum(x, axis=0) / G
    xc = tl.where(m, x - mean, 0.0)
    y = xc * tl.rsqrt(tl.sum(xc * xc, axis=0) / G + EPS)
    y = y * tl.load(w_ptr + c, mask=m, other=0.0).to(tl.float32)
    y += tl.load(b_ptr + c, mask=m, other=0.0).to(tl.float32)
"""
    y = """    y = x * tl.rsqrt(tl.sum(x * x, axis=0) / G + EPS)
    y = y * tl.load(w_ptr + c, mask=m, other=0.0).to(tl.float32)
"""
    if kind == "gated_rmsnorm":
        y += ("    gate = tl.load(g_ptr + r * sg + col, mask=m, other=0.0).to(tl.float32)\n"
              "    y = y * tl.sigmoid(gate)\n")
    return y


def source(name: str, spec: NormSpec, header: str = "") -> str:
    return f'''{comment(header)}import triton
import triton.language as tl

{kernel_source(name, spec)}'''


def kernel_source(name: str, spec: NormSpec) -> str:
    """The kernel alone (matmul's gated norm prologue runs it apart for wide steps)."""
    return f'''
@triton.jit
def {name}(x_ptr, g_ptr, w_ptr, b_ptr, o_ptr, sx, sg, so, G: tl.constexpr = {spec.group},
        BLOCK: tl.constexpr = {next_power_of_2(spec.group)},
        EPS: tl.constexpr = {spec.eps!r}):
{pdl("    ")}    r = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, BLOCK)
    m = c < G
    col = tl.program_id(1) * G + c
    x = tl.load(x_ptr + r * sx + col, mask=m, other=0.0).to(tl.float32)
{_body(spec.kind)}    tl.store(o_ptr + r * so + col, y.to(o_ptr.dtype.element_ty), mask=m)
'''


def _rows_of(name: str, t: torch.Tensor, rows: int, width: int) -> None:
    inner = t.shape[1:]
    want = tuple(math.prod(inner[i + 1:]) for i in range(len(inner)))
    if t.shape[0] < rows or math.prod(inner) != width or t.stride()[1:] != want:
        raise ValueError(f"norm {name}: [>= {rows}, ...] rows of {width} contiguous elements, "
                         f"got shape {tuple(t.shape)} strides {t.stride()}")


def launch(kernel, spec: NormSpec, *, x: torch.Tensor, w: torch.Tensor, out: torch.Tensor,
           rows: int, gate: torch.Tensor | None = None, b: torch.Tensor | None = None) -> None:
    """The first `rows` rows; gate for gated_rmsnorm, b for layernorm."""
    if (gate is not None) != (spec.kind == "gated_rmsnorm") \
            or (b is not None) != (spec.kind == "layernorm"):
        raise ValueError(f"norm {spec.kind}: gate given {gate is not None}, bias given "
                         f"{b is not None}")
    for name, t in (("x", x), ("out", out)) + ((("gate", gate),) if gate is not None else ()):
        _rows_of(name, t, rows, spec.width)
    for name, t in (("w", w),) + ((("b", b),) if b is not None else ()):
        if tuple(t.shape) != (spec.group,) or not t.is_contiguous():
            raise ValueError(f"norm {name}: contiguous [{spec.group}], got {tuple(t.shape)}")
    if rows == 0:
        return
    warps = max(1, min(16, next_power_of_2(spec.group) // (32 * REGS_PER_THREAD)))
    g = x if gate is None else gate
    kernel[(rows, spec.width // spec.group)](
        x, g, w, w if b is None else b, out, x.stride(0), g.stride(0), out.stride(0),
        num_warps=warps)
