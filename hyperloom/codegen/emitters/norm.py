"""Row norms on their own, for norms no projection takes as its prologue: `rmsnorm` (x * rsqrt(
mean(x^2) + eps) * w), `gated_rmsnorm` (the same per head_dim group, times sigmoid(gate): KDA's
output norm) and `layernorm` (`hyperloom.ir.semantics.dense`).

x [rows, ...] with each row contiguous (any float dtype), read as [rows, width]; gate like x;
w (and layernorm's b) [group]; out [rows, width] in its own dtype. Statistics in fp32.

Grid (rows, width / group): a program normalises one group of one row (the row itself unless
the norm is per head), read once, in registers. With spec.then (kernel_plan: the entry carries
the independent norm right after it, e.g. a DSA layer's latent and indexer-key norms), the
second norm's groups are more programs of the same launch: one launch for both.
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
    then: NormSpec | None = None  # a second, independent norm the launch also runs

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
    kernel = kernel_source(name, spec) if spec.then is None else _pair_source(name, spec)
    return f'''{comment(header)}import triton
import triton.language as tl

{kernel}'''


_PARAMS = "x_ptr, g_ptr, w_ptr, b_ptr, o_ptr, sx, sg, so"
_PARAMS2 = "x2_ptr, g2_ptr, w2_ptr, b2_ptr, o2_ptr, sx2, sg2, so2"


def _group_source(fname: str, spec: NormSpec) -> str:
    """`fname(r, p, ...)`: group p of row r of one norm."""
    return f'''
@triton.jit
def {fname}(r, p, {_PARAMS}, G: tl.constexpr, BLOCK: tl.constexpr, EPS: tl.constexpr):
    c = tl.arange(0, BLOCK)
    m = c < G
    col = p * G + c
    x = tl.load(x_ptr + r * sx + col, mask=m, other=0.0).to(tl.float32)
{_body(spec.kind)}    tl.store(o_ptr + r * so + col, y.to(o_ptr.dtype.element_ty), mask=m)
'''


def _pair_source(name: str, spec: NormSpec) -> str:
    """Both norms in one grid: programs (r, p < NG) run the first's groups, the rest the
    second's."""
    a, b = spec, spec.then
    return f'''{_group_source(f"_{name}_first", a)}{_group_source(f"_{name}_second", b)}

@triton.jit
def {name}({_PARAMS},
        {_PARAMS2}, NG: tl.constexpr = {a.width // a.group}):
{pdl("    ")}    r = tl.program_id(0).to(tl.int64)
    p = tl.program_id(1)
    if p < NG:
        _{name}_first(r, p, {_PARAMS}, {_consts(a)})
    else:
        _{name}_second(r, p - NG, {_PARAMS2}, {_consts(b)})
'''


def _consts(spec: NormSpec) -> str:
    """G, BLOCK, EPS of a group helper's call, as source literals."""
    return f"{spec.group}, {next_power_of_2(spec.group)}, {spec.eps!r}"


def kernel_source(name: str, spec: NormSpec) -> str:
    """The kernel alone (matmul's gated norm prologue runs it apart for wide steps)."""
    return f'''{_group_source(f"_{name}_group", spec)}

@triton.jit
def {name}({_PARAMS}):
{pdl("    ")}    _{name}_group(tl.program_id(0).to(tl.int64), tl.program_id(1), {_PARAMS},
{" " * (len(name) + 12)}{_consts(spec)})
'''


def _rows_of(name: str, t: torch.Tensor, rows: int, width: int) -> None:
    inner = t.shape[1:]
    want = tuple(math.prod(inner[i + 1:]) for i in range(len(inner)))
    if t.shape[0] < rows or math.prod(inner) != width or t.stride()[1:] != want:
        raise ValueError(f"norm {name}: [>= {rows}, ...] rows of {width} contiguous elements, "
                         f"got shape {tuple(t.shape)} strides {t.stride()}")


@dataclass(frozen=True)
class Operands:
    """One norm's tensors (`launch`'s keyword arguments of the same names)."""
    x: torch.Tensor
    w: torch.Tensor
    out: torch.Tensor
    gate: torch.Tensor | None = None
    b: torch.Tensor | None = None


def _check(spec: NormSpec, rows: int, x: torch.Tensor, w: torch.Tensor, out: torch.Tensor,
           gate: torch.Tensor | None, b: torch.Tensor | None) -> None:
    if (gate is not None) != (spec.kind == "gated_rmsnorm") \
            or (b is not None) != (spec.kind == "layernorm"):
        raise ValueError(f"norm {spec.kind}: gate given {gate is not None}, bias given "
                         f"{b is not None}")
    for name, t in (("x", x), ("out", out)) + ((("gate", gate),) if gate is not None else ()):
        _rows_of(name, t, rows, spec.width)
    for name, t in (("w", w),) + ((("b", b),) if b is not None else ()):
        if tuple(t.shape) != (spec.group,) or not t.is_contiguous():
            raise ValueError(f"norm {name}: contiguous [{spec.group}], got {tuple(t.shape)}")


def _warps(spec: NormSpec) -> int:
    return max(1, min(16, next_power_of_2(spec.group) // (32 * REGS_PER_THREAD)))


def _args(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, gate: torch.Tensor | None,
          b: torch.Tensor | None) -> tuple:
    g = x if gate is None else gate
    return x, g, w, w if b is None else b, out, x.stride(0), g.stride(0), out.stride(0)


def launch(kernel, spec: NormSpec, *, x: torch.Tensor, w: torch.Tensor, out: torch.Tensor,
           rows: int, gate: torch.Tensor | None = None, b: torch.Tensor | None = None,
           then: Operands | None = None) -> None:
    """The first `rows` rows; gate for gated_rmsnorm, b for layernorm; with spec.then, `then`
    holds the second norm's operands (its rows the same)."""
    _check(spec, rows, x, w, out, gate, b)
    args, groups, warps = _args(x, w, out, gate, b), spec.width // spec.group, _warps(spec)
    if spec.then is not None:
        if then is None:
            raise ValueError("norm: a spec with a second norm needs its operands (then=)")
        _check(spec.then, rows, then.x, then.w, then.out, then.gate, then.b)
        args += _args(then.x, then.w, then.out, then.gate, then.b)
        groups += spec.then.width // spec.then.group
        warps = max(warps, _warps(spec.then))
    if rows == 0:
        return
    kernel[(rows, groups)](*args, num_warps=warps)
