"""mHC post-site kernel on its own (`hyperloom.ir.semantics.hc.hc_post`), for a site whose
sublayer does not end in a projection (a GEMM takes hc_post as its epilogue: `matmul`).

Inputs f [rows, D] (any float dtype; the sublayer's output), x fp32 [rows, n, D] (the streams),
post fp32 [rows, n], comb fp32 [rows, n, n]; output out fp32 [rows, n, D]:
out[j] = post[j] * f + sum_i comb[i, j] * x[i].

A program reads one column block of a row in every stream once, mixes them in registers and
writes the new streams once; the mix is per column, so out may alias x. ORDER picks the walk:
"columns" (grid (rows, blocks): every row's first block, then every row's second, ...), "rows"
(one row's blocks after another) or "rows_last" (the same from the last row: a kernel after a
row-ordered one starts on the rows its predecessor left in L2).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hyperloom.codegen.emitters.ints import cdiv, next_power_of_2
from hyperloom.codegen.emitters.text import comment, pdl
from hyperloom.errors import require_shape

BLOCK_D = 1024  # columns per program: [n, 1024] fp32 new streams, 32 registers a thread. On the
# H200 a whole row of 4096 at 16 warps ran the site alone at 4096 rows 4 us faster (148 us), but
# a 2048-token prefill's 8 apart 55 us slower
WARPS = 4
ORDER = "rows_last"  # H100 (ed2c86b, site_order.py, medians of 3): site at 4096 rows 416.8 us by
# columns, 410.4 by rows, 407.0 from the last row; llama's 2048-token prefill 8582, 8456, 8489
ORDERS = ("columns", "rows", "rows_last")


@dataclass(frozen=True)
class HCPostSpec:
    n: int
    d: int


def _block(spec: HCPostSpec) -> int:
    return min(BLOCK_D, next_power_of_2(spec.d))


def _blocks(spec: HCPostSpec) -> int:
    """Column blocks of a row."""
    return cdiv(spec.d, _block(spec))


def source(name: str, spec: HCPostSpec, header: str = "") -> str:
    return f"{comment(header)}import triton\nimport triton.language as tl\n\n\n" \
        + kernel_source(name, spec)


def kernel_source(name: str, spec: HCPostSpec) -> str:
    """The kernel alone (a GEMM module that runs hc_post apart includes it)."""
    return f'''@triton.jit
def {name}(f_ptr, x_ptr, post_ptr, comb_ptr, o_ptr, sf, sx_row, sx_i, spost, scomb_row,
        scomb_i, so_row, so_i, N: tl.constexpr = {spec.n},
        NP: tl.constexpr = {next_power_of_2(spec.n)}, D: tl.constexpr = {spec.d},
        BLOCK_D: tl.constexpr = {_block(spec)}):
{pdl("    ")}{_walk(spec)}    cm = c < D
    jj = tl.arange(0, NP)
    jm = jj < N
    f = tl.load(f_ptr + r * sf + c, mask=cm, other=0.0).to(tl.float32)
    post = tl.load(post_ptr + r * spost + jj, mask=jm, other=0.0)
    out = post[:, None] * f[None, :]  # [NP, BLOCK_D]
    for i in tl.static_range(N):
        x = tl.load(x_ptr + r * sx_row + i * sx_i + c, mask=cm, other=0.0)
        mix = tl.load(comb_ptr + r * scomb_row + i * scomb_i + jj, mask=jm, other=0.0)
        out += mix[:, None] * x[None, :]
    tl.store(o_ptr + r * so_row + jj[:, None] * so_i + c[None, :], out,
             mask=jm[:, None] & cm[None, :])
'''


def _walk(spec: HCPostSpec) -> str:
    """The lines that give a program its row r and columns c (ORDER)."""
    if ORDER == "columns":
        return ("    r = tl.program_id(0).to(tl.int64)\n"
                "    c = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)\n")
    blocks = _blocks(spec)
    per = "" if blocks == 1 else f" // {blocks}"  # a row a program: plain lines
    row = f"pid{per}" if ORDER == "rows" else f"tl.num_programs(0){per} - 1 - pid{per}"
    first = "" if blocks == 1 else f"pid % {blocks} * BLOCK_D + "
    return (f"    pid = tl.program_id(0)\n    r = ({row}).to(tl.int64)\n"
            f"    c = {first}tl.arange(0, BLOCK_D)\n")


def _grid(spec: HCPostSpec, rows: int) -> tuple[int, ...]:
    blocks = _blocks(spec)
    return (rows, blocks) if ORDER == "columns" else (rows * blocks,)


def launch(kernel, spec: HCPostSpec, *, f: torch.Tensor, x: torch.Tensor, post: torch.Tensor,
           comb: torch.Tensor, out: torch.Tensor, rows: int) -> None:
    """The first `rows` rows."""
    n, d = spec.n, spec.d
    want = {"f": (f, (d,)), "x": (x, (n, d)), "post": (post, (n,)), "comb": (comb, (n, n)),
            "out": (out, (n, d))}
    for name, (t, shape) in want.items():
        require_shape(f"hc_post {name}", t, shape, rows)
    for name, t in (("x", x), ("post", post), ("comb", comb), ("out", out)):
        if t.dtype != torch.float32:
            raise ValueError(f"hc_post {name}: float32, got {t.dtype}")
    if rows == 0:
        return
    kernel[_grid(spec, rows)](
        f, x, post, comb, out, f.stride(0), x.stride(0), x.stride(1), post.stride(0),
        comb.stride(0), comb.stride(1), out.stride(0), out.stride(1), num_warps=WARPS)
