"""mHC pre-site launches (`hc_pre`'s kernels): the launch layout (programs, row blocks, K
splits), the scratch, every operand's check by name, and the launches of the site kernels and
of a one-row site's parts kernel."""

from __future__ import annotations

import torch

from hyperloom.codegen.emitters import hc_pre
from hyperloom.codegen.emitters.gemv import site_programs
from hyperloom.codegen.emitters.hc_pre import HCPreSpec
from hyperloom.codegen.emitters.ints import cdiv
from hyperloom.config import CONFIG
from hyperloom.errors import require, require_shape


def layout(spec: HCPreSpec, rows: int, fused: bool) -> tuple[int, int, int, int]:
    """(rows a projection program, row blocks, rows_pad, K splits) of a launch: enough programs
    for ~4 per multiprocessor; a wide step's as many as fit on the GPU at once (one wave: a
    second, partial wave would leave most multiprocessors idle while it runs)."""
    wide = rows > hc_pre.WIDE_ROWS and not fused
    block = hc_pre.PROJ_ROWS if wide else hc_pre.BLOCK_T
    blocks = cdiv(rows, block)
    k_blocks = spec.n * cdiv(spec.d, hc_pre.blocks(spec)["BLOCK_K"])
    programs = hc_pre.PROJ_RESIDENT * CONFIG.sms // blocks if wide else cdiv(4 * CONFIG.sms, blocks)
    return block, blocks, blocks * block, max(1, min(k_blocks, hc_pre.MAX_SPLITS, programs))


def scratch(spec: HCPreSpec, max_rows: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 partials, int32 zeroed ticket counters) for any launch of up to max_rows rows; the
    kernels leave the counters zeroed, so one pair serves every site in turn."""
    jp = hc_pre.blocks(spec)["JP"]
    sizes = (*range(1, max_rows + 1, hc_pre.BLOCK_T), max_rows)
    part = max((nsplit + 2) * rows_pad  # + 2: the gates' sums, sum(x^2)
               for r in sizes for fused in (True, False)
               for _, _, rows_pad, nsplit in [layout(spec, r, fused)]) * jp
    return (torch.empty(part, dtype=torch.float32, device=device),
            torch.zeros(cdiv(max_rows, hc_pre.BLOCK_T), dtype=torch.int32, device=device))


def _operands(spec: HCPreSpec, rows: int, **tensors: torch.Tensor) -> None:
    """Every operand's shape (rows: at least `rows`), dtype and contiguous last dim, by name."""
    n, d, j = spec.n, spec.d, (2 + spec.n) * spec.n
    for name, shape in (("x", (n, d)), ("y", (d,)), ("post", (n,)), ("comb", (n, n))):
        require_shape(f"hc_pre {name}", tensors[name], shape, rows)
    for name, shape in (("fn", (j, n * d)), ("base", (j,)), ("scale", (3,))):
        require_shape(f"hc_pre {name}", tensors[name], shape)
    for name in ("x", "base", "scale", "post", "comb"):
        require(tensors[name].dtype == torch.float32,
                lambda: f"hc_pre {name}: float32, got {tensors[name].dtype}")


def check_weight(spec: HCPreSpec, ow: torch.Tensor | None) -> None:
    """The site norm's weight: [D], contiguous, given exactly when spec.out_weight."""
    if not spec.out_weight:
        require(ow is None, lambda: "hc_pre: a norm weight for a spec without one")
        return
    require(ow is not None, lambda: "hc_pre: the spec's norm weight (ow=) is missing")
    require(tuple(ow.shape) == (spec.d,) and ow.is_contiguous(),
            lambda: f"hc_pre norm weight: contiguous [{spec.d}], got {tuple(ow.shape)}")


def launch_parts(kernel, spec: HCPreSpec, *, x: torch.Tensor, fn: torch.Tensor,
                 part: torch.Tensor, parts: torch.Tensor, block_n: int) -> None:
    """One row's formed-site parts (the `parts_name` kernel, loaded): partials, Gram and stream
    parts of x[0] into part (from scratch(spec, ...)) and parts ([2n, D], w's dtype), over
    site_programs(d) programs of block_n columns, as the GEMV after the site sums them."""
    require_shape("hc_pre x", x, (spec.n, spec.d), 1)
    require(x.dtype == torch.float32, lambda: f"hc_pre x: float32, got {x.dtype}")
    check_parts(spec, fn, part, parts)
    require(site_programs(spec.d) * block_n >= spec.d,
            lambda: f"hc_pre parts: {site_programs(spec.d)} programs of {block_n} columns "
                    f"do not cover {spec.d}")
    kernel[(site_programs(spec.d),)](x, fn, part, parts, x.stride(1), fn.stride(0),
                                     BLOCK_N=block_n, num_warps=hc_pre.FUSED_WARPS)


def check_parts(spec: HCPreSpec, fn: torch.Tensor, part: torch.Tensor,
                parts: torch.Tensor) -> None:
    """A one-row site's parts kernel's operands: fn, the partials (with its Gram rows) and the
    stream parts [2n, D], each named with the shape it needs."""
    require_shape("hc_pre fn", fn, ((2 + spec.n) * spec.n, spec.n * spec.d))
    check_partials(spec, part)
    check_stream_parts(spec, parts)


def check_partials(spec: HCPreSpec, part: torch.Tensor) -> None:
    """A one-row site's partials: one row a site program, then its Gram rows."""
    at, nn = hc_pre.gram(spec)
    need = at + site_programs(spec.d) * nn
    require(part.numel() >= need,
            lambda: f"site partials: >= {need} floats, got {part.numel()}")


def check_stream_parts(spec: HCPreSpec, parts: torch.Tensor | None) -> None:
    """A one-row site's stream parts: contiguous [2n, D] (matmul.site_parts)."""
    require(parts is not None and tuple(parts.shape) == (2 * spec.n, spec.d)
            and parts.is_contiguous(),
            lambda: f"site stream parts: contiguous [{2 * spec.n}, {spec.d}] (site_parts), got "
                    f"{None if parts is None else tuple(parts.shape)}")


def launch(kernels, spec: HCPreSpec, *, x: torch.Tensor, fn: torch.Tensor, base: torch.Tensor,
           scale: torch.Tensor, y: torch.Tensor, post: torch.Tensor, comb: torch.Tensor,
           part: torch.Tensor, count: torch.Tensor, rows: int, fused: bool,
           ow: torch.Tensor | None = None) -> None:
    """kernels: the five of kernel_names(name), loaded; part, count: from scratch(spec, >=
    rows). fused: one launch whose last program per row block finishes its rows in turn (the
    faster form for one row), else the projection and a finish program per row, or above
    hc_pre.WIDE_ROWS rows the projection, an apply program per row and gates over row blocks.
    ow: the site norm's weight [D] (spec.out_weight)."""
    _operands(spec, rows, x=x, fn=fn, base=base, scale=scale, y=y, post=post, comb=comb)
    check_weight(spec, ow)
    if rows == 0:
        return
    one, proj, finish, gates, apply = kernels
    b = hc_pre.blocks(spec)
    block, row_blocks, rows_pad, nsplit = layout(spec, rows, fused)
    need = (nsplit + 2) * rows_pad * b["JP"]
    require(part.numel() >= need and count.numel() >= row_blocks,
            lambda: f"hc_pre scratch for {rows} rows: partials >= {need} and counters >= "
                    f"{row_blocks}, got {part.numel()} and {count.numel()} (scratch(spec, "
                    f">= {rows}) allocates them)")
    kb_split = cdiv(spec.n * cdiv(spec.d, b["BLOCK_K"]), nsplit)
    args = (x, fn, base, scale, y, post, comb, part, rows, rows_pad, nsplit, kb_split,
            x.stride(0), x.stride(1), fn.stride(0), y.stride(0), post.stride(0), comb.stride(0),
            comb.stride(1)) + ((ow,) if spec.out_weight else ())
    if fused:
        one[(row_blocks, nsplit)](*args, count, num_warps=hc_pre.FUSED_WARPS)
        return
    few = block == hc_pre.BLOCK_T and rows <= hc_pre.FEW_ROWS
    proj[(row_blocks, nsplit)](*args, BLOCK_P=block, SS=few, num_warps=hc_pre.PROJ_WARPS,
                               num_stages=hc_pre.PROJ_STAGES)
    if few:
        finish[(rows,)](*args, FEW=True, num_warps=hc_pre.FEW_WARPS)
        return
    if block == hc_pre.BLOCK_T:
        finish[(rows,)](*args, num_warps=hc_pre.FINISH_WARPS)
        return
    apply[(rows,)](*args, num_warps=hc_pre.APPLY_WARPS)
    gates[(cdiv(rows, hc_pre.GATE_ROWS),)](*args, num_warps=hc_pre.GATE_WARPS)
