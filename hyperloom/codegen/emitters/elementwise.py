"""Row-wise ops no other kernel takes as a prologue or epilogue (`hyperloom.ir.semantics`):
`add` / `residual_add` (a + b), `concat` (a | b along the last dim), `cast` (x into the out
buffer's dtype) and `hc_head_mean` (the mean of the n streams).

add, cast: operands [rows, ...] (any float dtypes, each row contiguous, any row stride) read
as [rows, width]; concat: a [rows, split], b [rows, width - split]; head_mean: x [rows, n, D]
with a contiguous last dim (row and stream strides free). out [rows, width] in its own dtype.
Math in fp32, one cast at the store.

Grid (rows, cdiv(width, BLOCK)): a program does one column block of one row; rows past
`rows` are never touched, so the grid depends on rows alone (CUDA-graph capture).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from hyperloom.codegen.emitters.ints import cdiv, next_power_of_2
from hyperloom.codegen.emitters.text import comment, pdl

KINDS = ("add", "concat", "cast", "head_mean")
BLOCK = 1024  # elements a program holds: 8 fp32 registers a thread at 4 warps
WARPS = 4


@dataclass(frozen=True)
class ElementwiseSpec:
    kind: str
    width: int  # output elements of a row
    streams: int = 1  # head_mean: the n streams averaged into one row
    split: int = 0  # concat: the columns that come from a

    def __post_init__(self) -> None:
        if self.kind not in KINDS or self.width < 1 or self.streams < 1 \
                or (self.kind != "head_mean" and self.streams != 1) \
                or not (0 < self.split < self.width if self.kind == "concat" else self.split == 0):
            raise ValueError(f"elementwise: kind {self.kind!r} (one of {KINDS}), width "
                             f"{self.width} >= 1, streams {self.streams} (1 but for head_mean), "
                             f"split {self.split} (inside the row for concat, else 0)")


def _streams_block(spec: ElementwiseSpec) -> int:
    return next_power_of_2(spec.streams)


def _block(spec: ElementwiseSpec) -> int:
    return max(1, min(BLOCK // _streams_block(spec), next_power_of_2(spec.width)))


def _add(name: str, spec: ElementwiseSpec) -> str:
    return f'''@triton.jit
def {name}(a_ptr, b_ptr, o_ptr, sa, sb, so, W: tl.constexpr = {spec.width},
        BLOCK: tl.constexpr = {_block(spec)}):
{pdl("    ")}    r = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = c < W
    a = tl.load(a_ptr + r * sa + c, mask=m, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + r * sb + c, mask=m, other=0.0).to(tl.float32)
    tl.store(o_ptr + r * so + c, (a + b).to(o_ptr.dtype.element_ty), mask=m)
'''


def _concat(name: str, spec: ElementwiseSpec) -> str:
    return f'''@triton.jit
def {name}(a_ptr, b_ptr, o_ptr, sa, sb, so, W: tl.constexpr = {spec.width},
        SPLIT: tl.constexpr = {spec.split}, BLOCK: tl.constexpr = {_block(spec)}):
{pdl("    ")}    r = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = c < W
    a = tl.load(a_ptr + r * sa + c, mask=c < SPLIT, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + r * sb + (c - SPLIT), mask=m & (c >= SPLIT), other=0.0).to(tl.float32)
    tl.store(o_ptr + r * so + c, tl.where(c < SPLIT, a, b).to(o_ptr.dtype.element_ty), mask=m)
'''


def _cast(name: str, spec: ElementwiseSpec) -> str:
    return f'''@triton.jit
def {name}(x_ptr, o_ptr, sx, so, W: tl.constexpr = {spec.width},
        BLOCK: tl.constexpr = {_block(spec)}):
{pdl("    ")}    r = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = c < W
    x = tl.load(x_ptr + r * sx + c, mask=m, other=0.0).to(tl.float32)
    tl.store(o_ptr + r * so + c, x.to(o_ptr.dtype.element_ty), mask=m)
'''


def _head_mean(name: str, spec: ElementwiseSpec) -> str:
    return f'''@triton.jit
def {name}(x_ptr, o_ptr, sx, sn, so, W: tl.constexpr = {spec.width},
        N: tl.constexpr = {spec.streams}, BN: tl.constexpr = {_streams_block(spec)},
        BLOCK: tl.constexpr = {_block(spec)}):
{pdl("    ")}    r = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    n = tl.arange(0, BN)
    m = (n[:, None] < N) & (c[None, :] < W)
    x = tl.load(x_ptr + r * sx + n[:, None] * sn + c[None, :], mask=m, other=0.0)
    # x: [BN, BLOCK] fp32
    y = tl.sum(x.to(tl.float32), axis=0) / N
    tl.store(o_ptr + r * so + c, y.to(o_ptr.dtype.element_ty), mask=c < W)
'''


def source(name: str, spec: ElementwiseSpec, header: str = "") -> str:
    body = {"add": _add, "concat": _concat, "cast": _cast,
            "head_mean": _head_mean}[spec.kind](name, spec)
    return f'''{comment(header)}import triton
import triton.language as tl


{body}'''


def _rows_of(name: str, t: torch.Tensor, rows: int, inner: tuple[int, ...]) -> None:
    """t: [>= rows, *inner] with each row's inner dims contiguous (any row stride)."""
    want = tuple(math.prod(inner[i + 1:]) for i in range(len(inner)))
    if t.dim() != 1 + len(inner) or t.shape[0] < rows or tuple(t.shape[1:]) != inner \
            or t.stride()[1:] != want:
        raise ValueError(f"elementwise {name}: [>= {rows}, {', '.join(map(str, inner))}] with "
                         f"contiguous rows, got shape {tuple(t.shape)} strides {t.stride()}")


def launch(kernel, spec: ElementwiseSpec, *, out: torch.Tensor, rows: int,
           a: torch.Tensor | None = None, b: torch.Tensor | None = None,
           x: torch.Tensor | None = None) -> None:
    """The first `rows` rows of out: a + b (add), a | b (concat), x (cast), x.mean(1)
    (head_mean); later rows are left untouched."""
    pair = spec.kind in ("add", "concat")
    if (a is not None and b is not None and x is None) != pair \
            or (x is not None and a is None and b is None) == pair:
        raise ValueError(f"elementwise {spec.kind}: add and concat take a and b, cast and "
                         f"head_mean take x")
    grid = (rows, cdiv(spec.width, _block(spec)))
    if spec.kind == "concat":
        _rows_of("a", a, rows, (spec.split,))
        _rows_of("b", b, rows, (spec.width - spec.split,))
        _rows_of("out", out, rows, (spec.width,))
    elif spec.kind == "head_mean":
        if x.dim() != 3 or x.shape[0] < rows \
                or tuple(x.shape[1:]) != (spec.streams, spec.width) or x.stride(2) != 1:
            raise ValueError(f"elementwise head_mean x: [>= {rows}, {spec.streams}, "
                             f"{spec.width}] with a contiguous last dim, got shape "
                             f"{tuple(x.shape)} strides {x.stride()}")
        _rows_of("out", out, rows, (spec.width,))
    else:
        first = a if pair else x
        inner = tuple(first.shape[1:])
        if math.prod(inner) != spec.width:
            raise ValueError(f"elementwise {spec.kind}: rows of {spec.width}, got "
                             f"{tuple(first.shape)}")
        for name, t in ((("a", a), ("b", b)) if pair else (("x", x),)) + (("out", out),):
            _rows_of(name, t, rows, inner)
    if rows == 0:
        return
    if spec.kind == "head_mean":
        kernel[grid](x, out, x.stride(0), x.stride(1), out.stride(0), num_warps=WARPS)
    elif pair:
        kernel[grid](a, b, out, a.stride(0), b.stride(0), out.stride(0), num_warps=WARPS)
    else:
        kernel[grid](x, out, x.stride(0), out.stride(0), num_warps=WARPS)
