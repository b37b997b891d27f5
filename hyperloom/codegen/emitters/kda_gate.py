"""KDA's per-channel decay gate (`hyperloom.ir.semantics.kda.kda_gate`, SPEC "KDA" step 3).

Inputs f [rows, W] (any float dtype; f_b_proj's output, W = heads * head_dim), dt_bias [W],
a_log [heads]; output g [rows, W] in its buffer's dtype (the IR says fp32), math in fp32:
  x = f + dt_bias;  g = lower_bound * sigmoid(exp(a_log) * x)  (GLM-5.3: lower_bound -5)
                    or g = -exp(a_log) * softplus(x)             (lower_bound None)
softplus as torch computes it: x above 20, else log1p(exp(x)) (log1p by Kahan's log(u) * e /
(u - 1), accurate to a few ulp for tiny e: Triton's interpreter runs no libdevice).

Grid (rows, cdiv(W, BLOCK)): elementwise; a program reads its column block of f once and the
head rate of each column from a_log (column c is head c // head_dim).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hyperloom.codegen.emitters.ints import cdiv, next_power_of_2
from hyperloom.codegen.emitters.text import comment, pdl

BLOCK = 1024  # columns per program: 8 fp32 registers a thread at 4 warps
WARPS = 4
SOFTPLUS_LINEAR = 20.0  # softplus(x) = x above this, as torch's default threshold


@dataclass(frozen=True)
class KDAGateSpec:
    heads: int
    head_dim: int
    lower_bound: float | None  # None: the softplus form

    @property
    def width(self) -> int:
        return self.heads * self.head_dim


def _block(spec: KDAGateSpec) -> int:
    return min(BLOCK, next_power_of_2(spec.width))


def gate_lines(spec: KDAGateSpec, f: str, cols: str, mask: str) -> list[str]:
    """Lines that set g (fp32) from f (fp32) at columns `cols` (valid where `mask`), reading
    bias_ptr (dt_bias) and alog_ptr (A_log, a head's rate exp(A_log)): this row kernel's body
    and the epilogue of f_b's GEMM (`emitters.matmul`)."""
    x, rate = "xg", "rate"
    return [f"{x} = {f} + tl.load(bias_ptr + {cols}, mask={mask}, other=0.0).to(tl.float32)",
            f"{rate} = tl.exp(tl.load(alog_ptr + {cols} // {spec.head_dim}, mask={mask}, "
            "other=0.0).to(tl.float32))"] + _gate_of(spec, x, rate)


def _gate_of(spec: KDAGateSpec, x: str, rate: str) -> list[str]:
    if spec.lower_bound is not None:
        return [f"g = {float(spec.lower_bound)!r} * tl.sigmoid({rate} * {x})"]
    return [f"e = tl.exp(tl.minimum({x}, {SOFTPLUS_LINEAR!r}))",
            "u = 1.0 + e",
            "tiny = u == 1.0  # e below half an ulp of 1: log1p(e) = e",
            "log1p = tl.where(tiny, e, tl.log(u) * (e / tl.where(tiny, 1.0, u - 1.0)))",
            f"g = -{rate} * tl.where({x} > {SOFTPLUS_LINEAR!r}, {x}, log1p)"]


def _body(spec: KDAGateSpec) -> str:
    return "".join(f"    {line}\n" for line in gate_lines(spec, "f", "c", "cm"))


def source(name: str, spec: KDAGateSpec, header: str = "") -> str:
    return f'''{comment(header)}import triton
import triton.language as tl


@triton.jit
def {name}(f_ptr, bias_ptr, alog_ptr, g_ptr, sf, sg, W: tl.constexpr = {spec.width},
        BLOCK: tl.constexpr = {_block(spec)}):
{pdl("    ")}    r = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    cm = c < W
    f = tl.load(f_ptr + r * sf + c, mask=cm, other=0.0).to(tl.float32)
{_body(spec)}    tl.store(g_ptr + r * sg + c, g.to(g_ptr.dtype.element_ty), mask=cm)
'''


def check_params(spec: KDAGateSpec, dt_bias: torch.Tensor, a_log: torch.Tensor) -> None:
    """dt_bias [width] and a_log [heads], contiguous."""
    for name, t, n in (("dt_bias", dt_bias, spec.width), ("a_log", a_log, spec.heads)):
        if tuple(t.shape) != (n,) or not t.is_contiguous():
            raise ValueError(f"KDA gate {name}: contiguous [{n}], got {tuple(t.shape)}")


def launch(kernel, spec: KDAGateSpec, *, f: torch.Tensor, dt_bias: torch.Tensor,
           a_log: torch.Tensor, g: torch.Tensor, rows: int) -> None:
    """The first `rows` rows of f into g; later rows of g are left untouched."""
    w = spec.width
    for name, t in (("f", f), ("g", g)):
        if t.dim() != 2 or t.shape[1] != w or t.shape[0] < rows or t.stride(1) != 1:
            raise ValueError(f"KDA gate {name}: [>= {rows}, {w}] with a contiguous last dim, "
                             f"got {tuple(t.shape)}")
    check_params(spec, dt_bias, a_log)
    if rows == 0:
        return
    kernel[(rows, cdiv(w, _block(spec)))](f, dt_bias, a_log, g, f.stride(0), g.stride(0),
                                                 num_warps=WARPS)
