"""Derived weights: their type rules, and binding (computing them once from loaded weights)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from hyperloom.errors import IRError
from hyperloom.ir.graph import Graph
from hyperloom.ir.types import DType, TensorType

PACK_RUN = 64  # the K run of a packed expert weight (a 64-deep K step of a column block)


def pack_run(k: int) -> int:
    """The contiguous K run of a packed [E, N, K] stack: PACK_RUN, or the largest power of two
    dividing K when that is smaller (the kernels' K steps are powers of two of at least it)."""
    return min(PACK_RUN, k & -k)


def unpacked_shape(t: TensorType) -> tuple:
    """[E, N, K] of an expert stack, packed ([E, K / R, N, R]) or not."""
    if t.rank == 4:
        e, kb, n, r = t.shape
        return e, n, kb * r
    return t.shape


def derived_type(kind: str, args: Sequence[TensorType]) -> TensorType:
    if kind == "concat":
        first = args[0]
        if any(a.shape[1:] != first.shape[1:] or a.dtype != first.dtype for a in args):
            raise IRError(f"concat operands differ: {', '.join(map(str, args))}")
        return first.with_shape(sum(a.shape[0] for a in args), *first.shape[1:])
    if kind == "scale_cols":
        w, g = args
        if w.rank != 2 or g.shape != (w.shape[1],):
            raise IRError(f"scale_cols wants W [N, K] and g [K], got {w}, {g}")
        return w
    if kind == "pack_k":
        (w,) = args
        if w.rank != 3:
            raise IRError(f"pack_k wants an expert stack [E, N, K], got {w}")
        e, n, k = w.shape
        r = pack_run(k)
        return w.with_shape(e, k // r, n, r)
    if kind == "split_bf16":
        (w,) = args
        if w.dtype is not DType.F32:
            raise IRError(f"split_bf16 wants an fp32 weight, got {w}")
        return TensorType.make(DType.BF16, 3, *w.shape)
    raise IRError(f"unknown derivation {kind!r} (known: concat, scale_cols, pack_k, split_bf16)")


def pack_k(w: torch.Tensor) -> torch.Tensor:
    """[E, N, K] -> [E, K / R, N, R] (R = pack_run(K)): a K step of R of any column block is one
    contiguous run of memory."""
    e, n, k = w.shape
    r = pack_run(k)
    return w.reshape(e, n, k // r, r).permute(0, 2, 1, 3).contiguous()


def unpack_k(w: torch.Tensor) -> torch.Tensor:
    """The inverse of pack_k (a view); [E, N, K] stacks pass through."""
    if w.dim() == 3:
        return w
    e, kb, n, r = w.shape
    return w.permute(0, 2, 1, 3).reshape(e, n, kb * r)


def split_bf16(w: torch.Tensor) -> torch.Tensor:
    """fp32 W as [hi, mid, lo] bf16 with W == hi + (mid + lo) exactly: 8 bits of the mantissa
    each, so a bf16 operand's product with each term is exact in an fp32 accumulator."""
    hi = w.to(torch.bfloat16)
    r = w - hi.float()
    mid = r.to(torch.bfloat16)
    return torch.stack([hi, mid, (r - mid.float()).to(torch.bfloat16)])


def join_bf16(w: torch.Tensor) -> torch.Tensor:
    """The inverse of split_bf16 (in fp32 or wider); other weights pass through."""
    if w.dim() == 3 and w.shape[0] == 3:
        return w[0].float() + (w[1].float() + w[2].float())
    return w


def _compute(kind: str, args: list[torch.Tensor]) -> torch.Tensor:
    if kind == "concat":
        return torch.cat(args, 0)
    if kind == "pack_k":
        return pack_k(args[0])
    if kind == "split_bf16":
        return split_bf16(args[0])
    w, g = args
    wide = torch.promote_types(w.dtype, torch.float32)
    return (w.to(wide) * g.to(wide)[None, :]).to(w.dtype)


def bind(graph: Graph, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The weights a graph reads: its parameters and its derived weights, computed in order."""
    out = {p.name: weights[p.name] for p in graph.params}
    for d in graph.derived:
        out[d.name] = _compute(d.kind, [out[a[1:]] for a in d.args])
    return out
