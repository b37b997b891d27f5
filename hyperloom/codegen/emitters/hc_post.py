"""mHC post-site kernel on its own (`hyperloom.ir.semantics.hc.hc_post`), for a site whose
sublayer does not end in a projection (a GEMM takes hc_post as its epilogue: `matmul`).

Inputs f [rows, D] (any float dtype; the sublayer's output), x fp32 [rows, n, D] (the streams),
post fp32 [rows, n], comb fp32 [rows, n, n]; output out fp32 [rows, n, D]:
out[j] = post[j] * f + sum_i comb[i, j] * x[i].

{name}: grid (rows, cdiv(D, BLOCK_D)): a program reads its column block of every stream once,
mixes them in registers and writes the new streams once; the mix is per column, so out may
alias x.
{name}_proj: the same on [FEED_ROWS, FEED_COLS] tiles, and from the new streams in registers
the next mHC site's projection partials m = X'_flat @ fn^T and sum(X'^2) (a Feed): that
site's hc_pre then skips its projection, a full read of X' (`hc_pre.fed`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from hyperloom.codegen.emitters import hc_pre
from hyperloom.codegen.emitters.hc_pre import FEED_COLS, FEED_ROWS, HCPreSpec
from hyperloom.codegen.emitters.text import comment

BLOCK_D = 1024  # columns per program: [n, 1024] fp32 new streams, 32 registers a thread
WARPS = 4
FEED_WARPS = 8  # [4 streams + f + out + sum, 32 x 128] fp32 tiles: ~112 registers a thread


@dataclass(frozen=True)
class HCPostSpec:
    n: int
    d: int


@dataclass(frozen=True)
class Feed:
    """The next site's projection: its spec, fn weights and hc_pre scratch partials."""
    spec: HCPreSpec
    fn: torch.Tensor
    part: torch.Tensor


def kernel_names(name: str) -> tuple[str, str]:
    """(plain, projecting) kernels of source(name, ...)."""
    return name, f"{name}_proj"


def _block(spec: HCPostSpec) -> int:
    return min(BLOCK_D, triton.next_power_of_2(spec.d))


def source(name: str, spec: HCPostSpec, header: str = "") -> str:
    return f"{comment(header)}import triton\nimport triton.language as tl\n\n\n" \
        + kernel_source(name, spec)


def kernel_source(name: str, spec: HCPostSpec) -> str:
    """The kernels alone (a GEMM module that runs hc_post apart includes them)."""
    return _plain_source(name, spec) + "\n\n" + _proj_source(f"{name}_proj", spec)


def _proj_source(name: str, spec: HCPostSpec) -> str:
    n = spec.n
    j, jp = hc_pre.widths(n)
    loads = "".join(f"x{i} = tl.load(x_rows + {i} * sx_i + c[None, :], mask=ok, other=0.0)\n"
                    for i in range(n))
    mix = ""
    for k in range(n):  # every stream tile is loaded before any store: out may alias x
        terms = "".join(f"\n     + _col(comb_rows + {i} * scomb_i + {k}, tmask) * x{i}"
                        for i in range(n))
        mix += (f"x = (_col(post_rows + {k}, tmask) * f{terms})\n"
                f"tl.store(o_rows + {k} * so_i + c[None, :], x, mask=ok)\n"
                "sq += x * x\n"
                f"w = tl.load(fn_ptr + jj[:, None] * s_fn + {k} * D + c[None, :],\n"
                "            mask=(jj < J)[:, None] & cm[None, :], other=0.0)\n"
                f"{hc_pre.projection_dot()}")
    body = f'''t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
tmask = t < rows
t64 = t.to(tl.int64)
c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
cm = c < D
ok = tmask[:, None] & cm[None, :]
jj = tl.arange(0, JP)
f = tl.load(f_ptr + t64[:, None] * sf + c[None, :], mask=ok, other=0.0).to(tl.float32)
x_rows = x_ptr + t64[:, None] * sx_row
o_rows = o_ptr + t64[:, None] * so_row
post_rows = post_ptr + t64 * spost
comb_rows = comb_ptr + t64 * scomb_row
{loads}acc = tl.zeros((BLOCK_T, JP), tl.float32)  # fn rows >= J are 0: column J is free
sq = tl.zeros((BLOCK_T, BLOCK_C), tl.float32)
{mix}acc += tl.where(jj == J, 1.0, 0.0)[None, :] * tl.sum(sq, axis=1)[:, None]
tl.store(part_ptr + (tl.program_id(1) * rows_pad + t64)[:, None] * JP + jj[None, :], acc,
         mask=tmask[:, None])
'''
    return f'''@triton.jit
def _col(ptr, mask):
    """A per-row scalar as a [rows, 1] column."""
    return tl.load(ptr, mask=mask, other=0.0)[:, None]


@triton.jit(do_not_specialize=["rows", "rows_pad"])
def {name}(f_ptr, x_ptr, post_ptr, comb_ptr, o_ptr, fn_ptr, part_ptr, rows, rows_pad, sf, sx_row,
        sx_i, spost, scomb_row, scomb_i, so_row, so_i, s_fn, N: tl.constexpr = {n},
        D: tl.constexpr = {spec.d}, J: tl.constexpr = {j}, JP: tl.constexpr = {jp},
        BLOCK_T: tl.constexpr = {FEED_ROWS}, BLOCK_C: tl.constexpr = {FEED_COLS}):
    """hc_post on a [BLOCK_T, BLOCK_C] tile of every stream, and the next site's partials
    X'_tile @ fn_tile^T (sum(X'^2) in column J) to split program_id(1) of its scratch."""
{_indent(body)}'''


def _indent(text: str) -> str:
    return "".join("    " + ln if ln.strip() else ln for ln in text.splitlines(keepends=True))


def _plain_source(name: str, spec: HCPostSpec) -> str:
    return f'''@triton.jit
def {name}(f_ptr, x_ptr, post_ptr, comb_ptr, o_ptr, sf, sx_row, sx_i, spost, scomb_row,
        scomb_i, so_row, so_i, N: tl.constexpr = {spec.n},
        NP: tl.constexpr = {triton.next_power_of_2(spec.n)}, D: tl.constexpr = {spec.d},
        BLOCK_D: tl.constexpr = {_block(spec)}):
    r = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    cm = c < D
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


def launch(kernels, spec: HCPostSpec, *, f: torch.Tensor, x: torch.Tensor, post: torch.Tensor,
           comb: torch.Tensor, out: torch.Tensor, rows: int, feed: Feed | None = None) -> None:
    """The first `rows` rows; kernels: the two of kernel_names, loaded. feed: also write the
    next site's projection partials (hc_pre.feed_layout) for its launch with fed=True."""
    n, d = spec.n, spec.d
    want = {"f": (f, (d,)), "x": (x, (n, d)), "post": (post, (n,)), "comb": (comb, (n, n)),
            "out": (out, (n, d))}
    for name, (t, shape) in want.items():
        if tuple(t.shape[1:]) != shape or t.shape[0] < rows or t.stride(-1) != 1:
            raise ValueError(f"hc_post {name}: [>= {rows}, {', '.join(map(str, shape))}] with "
                             f"a contiguous last dim, got {tuple(t.shape)}")
    for name, t in (("x", x), ("post", post), ("comb", comb), ("out", out)):
        if t.dtype != torch.float32:
            raise ValueError(f"hc_post {name}: float32, got {t.dtype}")
    if rows == 0:
        return
    plain, proj = kernels
    strides = (f.stride(0), x.stride(0), x.stride(1), post.stride(0), comb.stride(0),
               comb.stride(1), out.stride(0), out.stride(1))
    if feed is None:
        plain[(rows, triton.cdiv(d, _block(spec)))](f, x, post, comb, out, *strides,
                                                    num_warps=WARPS)
        return
    _check_feed(spec, feed, rows)
    rows_pad, splits = hc_pre.feed_layout(feed.spec, rows)
    proj[(triton.cdiv(rows, FEED_ROWS), splits)](f, x, post, comb, out, feed.fn, feed.part, rows,
                                                rows_pad, *strides, feed.fn.stride(0),
                                                num_warps=FEED_WARPS)


def _check_feed(spec: HCPostSpec, feed: Feed, rows: int) -> None:
    n, d = spec.n, spec.d
    if (feed.spec.n, feed.spec.d) != (n, d):
        raise ValueError(f"hc_post feed: the next site is n={feed.spec.n} d={feed.spec.d}, "
                         f"these streams n={n} d={d}")
    j = hc_pre.widths(n)[0]
    if tuple(feed.fn.shape) != (j, n * d) or feed.fn.stride(-1) != 1:
        raise ValueError(f"hc_post feed fn: [{j}, {n * d}] with a contiguous last dim, got "
                         f"{tuple(feed.fn.shape)}")
    rows_pad, splits = hc_pre.feed_layout(feed.spec, rows)
    if feed.part.numel() < (splits + 2) * rows_pad * hc_pre.widths(n)[1]:
        raise ValueError(f"hc_post feed: the scratch holds {feed.part.numel()} partials, "
                         f"{rows} rows need hc_pre.scratch(spec, >= {rows})")
