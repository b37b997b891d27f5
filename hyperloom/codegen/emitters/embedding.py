"""Embedding gather: ids int64 [rows], table [V, D] -> out.

out is [rows, D] in the table dtype, or with `to_streams` fp32 mHC streams: [rows, n, D] where
every stream is a copy of the embedding row (n == 1: [rows, D] fp32). Ids are validated on the
host; the kernel still masks, so an id outside [0, V) never reads memory and yields a zero row.
Grid: (rows, cdiv(D, BLOCK_D)), one block of one row per program.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hyperloom.codegen.emitters.ints import cdiv, next_power_of_2
from hyperloom.codegen.emitters.text import comment, pdl
from hyperloom.errors import require


@dataclass(frozen=True)
class EmbeddingSpec:
    d: int
    streams: int = 1  # n, only read when to_streams
    to_streams: bool = False


def _block_d(d: int) -> int:
    return min(1024, next_power_of_2(d))


def source(name: str, spec: EmbeddingSpec, header: str = "") -> str:
    n = spec.streams if spec.to_streams else 1
    return f'''{comment(header)}import triton
import triton.language as tl


@triton.jit
def {name}(ids_ptr, table_ptr, out_ptr, vocab, table_stride, out_stride_row, out_stride_stream,
        D: tl.constexpr = {spec.d}, N: tl.constexpr = {n},
        BLOCK_D: tl.constexpr = {_block_d(spec.d)}):
{pdl("    ")}    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    tok = tl.load(ids_ptr + row)
    ok = (tok >= 0) & (tok < vocab)
    # clamp as well as mask, so not even the address of an invalid row is formed
    tok = tl.where(ok, tok, 0).to(tl.int64)
    vals = tl.load(table_ptr + tok * table_stride + cols, mask=(cols < D) & ok, other=0.0)
    vals = vals.to(out_ptr.dtype.element_ty)
    base = out_ptr + row.to(tl.int64) * out_stride_row + cols
    for i in tl.static_range(N):
        tl.store(base + i * out_stride_stream, vals, mask=cols < D)
'''


def launch(kernel, spec: EmbeddingSpec, *, ids: torch.Tensor, table: torch.Tensor,
           out: torch.Tensor, rows: int) -> None:
    if rows == 0:
        return
    require(table.stride(-1) == 1 and out.stride(-1) == 1,
            lambda: f"embedding table {tuple(table.shape)}, out {tuple(out.shape)}: contiguous "
                    f"last dims, got strides {table.stride()} and {out.stride()}")
    stream_stride = out.stride(1) if out.dim() == 3 else 0
    kernel[(rows, cdiv(spec.d, _block_d(spec.d)))](
        ids, table, out, table.shape[0], table.stride(0), out.stride(0), stream_stride)
