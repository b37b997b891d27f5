"""Embedding gather: ids int64 [rows], table [V, D] -> out.

out is [rows, D] in the table dtype, or with `to_streams` fp32 mHC streams: [rows, n, D] where
every stream is a copy of the embedding row (n == 1: [rows, D] fp32). Ids are validated on the
host; the kernel still masks, so an id outside [0, V) never reads memory and yields a zero row.
Grid: (rows, cdiv(D, BLOCK_D)), one block of one row per program.

With spec.site (kernel_plan: the entry carries the formed mHC site right after it, the first
one), a one-row step runs `{name}_parts` instead, grid (site_programs(D),): each program
gathers its columns of the row, stores them to every stream, then writes the site's partials
and stream parts from them (`hc_pre.parts_lines`), so the site launches nothing at one row.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hyperloom.codegen.emitters import hc_pre, hc_pre_launch
from hyperloom.codegen.emitters.gemv import site_block, site_programs
from hyperloom.codegen.emitters.ints import cdiv, next_power_of_2
from hyperloom.codegen.emitters.text import comment, indent_block, pdl
from hyperloom.config import CONFIG
from hyperloom.errors import require


@dataclass(frozen=True)
class EmbeddingSpec:
    d: int
    streams: int = 1  # n, only read when to_streams
    to_streams: bool = False
    site: hc_pre.HCPreSpec | None = None  # the formed site whose parts a one-row step writes

    def __post_init__(self) -> None:
        if self.site is not None and (not self.to_streams or self.site.n != self.streams
                                      or self.site.d != self.d):
            raise ValueError(f"an embedding that writes a site's parts needs its {self.site.n} "
                             f"x {self.site.d} streams, got {self.streams} x {self.d}")


def parts_name(name: str) -> str:
    """The one-row kernel of source(name, spec) with spec.site: gather, streams, site parts."""
    return f"{name}_parts"


def _block_d(d: int) -> int:
    return min(1024, next_power_of_2(d))


def _parts_source(name: str, spec: EmbeddingSpec) -> str:
    body = ["pid_n = tl.program_id(0)", "rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
            f"n_ok = rn < {spec.d}",
            "_streams(ids_ptr, table_ptr, out_ptr + rn, vocab, table_stride, sx_stream, rn, "
            f"n_ok, {spec.streams})",
            "tl.debug_barrier()  # this program's stream columns are stored"]
    body += hc_pre.parts_lines(spec.site, "out_ptr", "sx_stream", CONFIG.site_lo_parts)
    return f'''

@triton.jit
def {parts_name(name)}(ids_ptr, table_ptr, out_ptr, fn_ptr, part_ptr, parts_ptr, vocab,
        table_stride, sx_stream, s_fn, BLOCK_N: tl.constexpr):
    """Row 0: its embedding into every stream, then the formed site's parts from them."""
{pdl("    ")}{indent_block(chr(10).join(body), 4)}
'''


def source(name: str, spec: EmbeddingSpec, header: str = "") -> str:
    n = spec.streams if spec.to_streams else 1
    parts = _parts_source(name, spec) if spec.site else ""
    return f'''{comment(header)}import triton
import triton.language as tl


@triton.jit
def _streams(id_ptr, table_ptr, out_at, vocab, table_stride, s_stream, cols, cmask,
             N: tl.constexpr):
    """The table row of the id at id_ptr, columns cols (cmask), into N streams at out_at + i *
    s_stream + cols, in out's dtype (a zero row for an id outside the table)."""
    tok = tl.load(id_ptr)
    ok = (tok >= 0) & (tok < vocab)
    # clamp as well as mask, so not even the address of an invalid row is formed
    tok = tl.where(ok, tok, 0).to(tl.int64)
    vals = tl.load(table_ptr + tok * table_stride + cols, mask=cmask & ok, other=0.0)
    vals = vals.to(out_at.dtype.element_ty)
    for i in tl.static_range(N):
        tl.store(out_at + i * s_stream, vals, mask=cmask)


@triton.jit
def {name}(ids_ptr, table_ptr, out_ptr, vocab, table_stride, out_stride_row, out_stride_stream,
        D: tl.constexpr = {spec.d}, N: tl.constexpr = {n},
        BLOCK_D: tl.constexpr = {_block_d(spec.d)}):
{pdl("    ")}    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    base = out_ptr + row.to(tl.int64) * out_stride_row + cols
    _streams(ids_ptr + row, table_ptr, base, vocab, table_stride, out_stride_stream, cols,
             cols < D, N)
{parts}'''


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


def launch_parts(kernel, spec: EmbeddingSpec, *, ids: torch.Tensor, table: torch.Tensor,
                 out: torch.Tensor, fn: torch.Tensor, part: torch.Tensor,
                 parts: torch.Tensor) -> None:
    """A one-row step with spec.site (the `parts_name` kernel, loaded): row 0's streams into
    out, the site's partials into part (hc_pre_launch.scratch) and its stream parts into parts
    ([2n, D], the forming GEMV's weight dtype), as hc_pre_launch.launch_parts writes them."""
    site = spec.site
    require(out.dim() == 3 and tuple(out.shape[1:]) == (site.n, site.d) and out.stride(-1) == 1
            and table.stride(-1) == 1,
            lambda: f"embedding streams: [rows, {site.n}, {site.d}] with a contiguous last dim, "
                    f"got {tuple(out.shape)}; table {tuple(table.shape)}")
    hc_pre_launch.check_parts(site, fn, part, parts)
    kernel[(site_programs(site.d),)](ids, table, out, fn, part, parts, table.shape[0],
                                     table.stride(0), out.stride(1), fn.stride(0),
                                     BLOCK_N=site_block(site.d), num_warps=hc_pre.FUSED_WARPS)
