"""Tensor types of the IR: a dtype and a shape of sympy expressions over the step symbols.

T = rows in this step (prefill tokens, decode sequences, verify tokens), S = per-sequence cache
capacity in tokens. Shapes are sympy expressions so plans can be made at declared upper bounds.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import sympy
import torch

T = sympy.Symbol("T", integer=True, positive=True)
S = sympy.Symbol("S", integer=True, positive=True)
SYMBOLS = {"T": T, "S": S}


class DType(enum.Enum):
    F64 = "f64"
    F32 = "f32"
    BF16 = "bf16"
    F16 = "f16"
    I64 = "i64"
    I32 = "i32"
    BOOL = "bool"

    @property
    def is_float(self) -> bool:
        return self in (DType.F64, DType.F32, DType.BF16, DType.F16)

    @property
    def torch(self) -> torch.dtype:
        return _TORCH[self]

    @staticmethod
    def of(dt: torch.dtype | str | DType) -> DType:
        if isinstance(dt, DType):
            return dt
        if isinstance(dt, str):
            return _BY_NAME[dt]
        return _FROM_TORCH[dt]


_TORCH = {
    DType.F64: torch.float64, DType.F32: torch.float32, DType.BF16: torch.bfloat16,
    DType.F16: torch.float16, DType.I64: torch.int64, DType.I32: torch.int32,
    DType.BOOL: torch.bool,
}
_FROM_TORCH = {v: k for k, v in _TORCH.items()}
_BY_NAME = {d.value: d for d in DType} | {
    "float32": DType.F32, "float64": DType.F64, "bfloat16": DType.BF16, "float16": DType.F16,
}
_RANK = [DType.F64, DType.F32, DType.BF16, DType.F16]


def promote(a: DType, b: DType) -> DType:
    """The wider float of two (what torch gives for a mixed-precision matmul after upcast)."""
    return min(a, b, key=_RANK.index)


Dim = sympy.Expr


def dim(x: int | str | sympy.Expr) -> sympy.Expr:
    if isinstance(x, str):
        return sympy.sympify(x, locals=SYMBOLS)
    return sympy.sympify(x)


@dataclass(frozen=True, slots=True)
class TensorType:
    dtype: DType
    shape: tuple[sympy.Expr, ...]

    @staticmethod
    def make(dtype: DType | str, *shape: int | str | sympy.Expr) -> TensorType:
        return TensorType(DType.of(dtype), tuple(dim(s) for s in shape))

    def with_shape(self, *shape: int | str | sympy.Expr) -> TensorType:
        return TensorType.make(self.dtype, *shape)

    def with_dtype(self, dtype: DType) -> TensorType:
        return TensorType(dtype, self.shape)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def concrete(self, **sizes: int) -> tuple[int, ...]:
        subs = {SYMBOLS[k]: v for k, v in sizes.items()}
        return tuple(int(s.subs(subs)) for s in self.shape)

    def numel(self, **sizes: int) -> int:
        """Elements at the given symbol sizes (`T=4`); a shape of constants needs none."""
        return math.prod(self.concrete(**sizes))

    def nbytes(self, **sizes: int) -> int:
        return self.numel(**sizes) * self.dtype.torch.itemsize

    def __str__(self) -> str:
        return f"{self.dtype.value}[{', '.join(str(s) for s in self.shape)}]"


class StateKind(enum.Enum):
    TOKEN = "token"  # one row per cached token, indexed by position (KV, latent, indexer keys)
    FIXED = "fixed"  # one block per sequence, overwritten each step (conv window, recurrent state)


@dataclass(frozen=True, slots=True)
class StateDecl:
    """Per-sequence state of a stateful op; TOKEN shapes lead with the capacity symbol S."""

    name: str
    kind: StateKind
    type: TensorType
