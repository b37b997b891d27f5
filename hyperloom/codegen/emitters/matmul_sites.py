"""The mHC site a one-row projection GEMM serves (`emitters.matmul`): the site it finishes or
writes the partials and stream parts of (spec.site: `Site`, `bind_site`), and the site whose y
a GEMV forms from those parts (spec.site_in: `SiteIn`, `bind_form`, and the `form_*` source
lines of the forming kernel)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from hyperloom.codegen.emitters import hc_pre, hc_pre_launch
from hyperloom.codegen.emitters.gemv import site_programs
from hyperloom.codegen.emitters.ints import next_power_of_2
from hyperloom.codegen.emitters.text import wrap
from hyperloom.config import CONFIG
from hyperloom.errors import require
from hyperloom.passes.kernel_plan import folds

if TYPE_CHECKING:
    from hyperloom.codegen.emitters.matmul_spec import MatmulSpec


def form_gates(spec: MatmulSpec) -> list[str]:
    """The extra first program of a step that forms spec.site_in: the site's post and comb
    (nothing else reads them before the GEMM two launches on)."""
    args = ["part_ptr", str(site_programs(spec.site_in.d)), "base_ptr", "scale_ptr", "spost_ptr",
            "scomb_ptr", "s_comb_i"] + hc_pre.gates_args(spec.site_in)
    call = wrap("            _site_gates(", args, ")", 24).splitlines()  # (indented once more)
    return ["if FORM:", "    if tl.program_id(0) == 0:", *(line[4:] for line in call),
            "        return"]


def form_rows(spec: MatmulSpec) -> int:
    """A rows of a forming GEMV: each stream's hi part, then (CONFIG.site_lo_parts) its lo."""
    return spec.site_in.n * (2 if CONFIG.site_lo_parts else 1)


def form_loads(spec: MatmulSpec) -> list[str]:
    """The site's partials a forming program needs (its n pre logits and the streams' Gram,
    whose trace is sum(x^2), from every program of the GEMV before), loaded ahead of the K
    loop so they arrive under it."""
    n, jp = spec.site_in.n, hc_pre.projections(spec.site_in)[1]
    splits = site_programs(spec.site_in.d)
    gram, nn = hc_pre.gram(spec.site_in)
    return ["if FORM:", f"    sp = tl.arange(0, {next_power_of_2(splits)})",
            f"    ip = tl.arange(0, {next_power_of_2(n)})", f"    q = tl.arange(0, {nn})",
            f"    live = (sp < {splits})[:, None]",
            f"    pm = tl.load(part_ptr + sp[:, None] * {jp} + ip[None, :],",
            f"                 mask=live & (ip < {n})[None, :], other=0.0, cache_modifier=\".cg\")",
            f"    pg = tl.load(part_ptr + {gram} + sp[:, None] * {nn} + q[None, :], mask=live,",
            '                 other=0.0, cache_modifier=".cg")']


def form_result(spec: MatmulSpec, accs: list[str]) -> list[str]:
    """y = sum_i pre[i] X_i by linearity: the A rows (hi and lo part of stream i: rows i and n
    + i) weigh pre[i], and sum(y^2) = sum_ab pre[a] pre[b] G[a, b] from the streams' Gram G;
    accs: the kernel's accumulators."""
    site = spec.site_in
    n, d = site.n, site.d
    lines = [
        "if FORM:",
        "    g = tl.sum(pg, axis=0)",
        f"    ss = tl.sum(tl.where(q % {n + 1} == 0, g, 0.0), axis=0)  # the trace: sum(x^2)",
        f"    r = tl.rsqrt(ss / {n * d} + {site.norm_eps!r})",
        "    pre = tl.sigmoid(tl.sum(pm, axis=0) * r * tl.load(scale_ptr)",
        f"                     + tl.load(base_ptr + ip, mask=ip < {n}, other=0.0))"
        f" + {site.hc_eps!r}",
        f"    pick = ((rm % {n})[:, None] == ip[None, :]) & (rm < {form_rows(spec)})[:, None]",
        "    pa = tl.sum(tl.where(pick, pre[None, :], 0.0), axis=1)",
        f"    qa = tl.sum(tl.where((q // {n})[:, None] == ip[None, :], pre[None, :], 0.0), axis=1)",
        f"    qb = tl.sum(tl.where((q % {n})[:, None] == ip[None, :], pre[None, :], 0.0), axis=1)",
        "    yy = tl.sum(g * qa * qb, axis=0)",
        f"    inv = tl.rsqrt(yy / {d} + {site.out_eps!r})"]
    return lines + [f"    {acc} = tl.broadcast_to(tl.sum({acc} * pa[:, None], axis=0)[None, :] "
                    f"* inv, [BLOCK_M, BLOCK_N])" for acc in accs]


@dataclass(frozen=True)
class Site:
    """The operands of the hc_pre a site-feeding GEMM finishes (spec.site): its weights, its
    outputs and its scratch (hc_pre_launch.scratch: partials, zeroed ticket counters)."""

    fn: torch.Tensor
    base: torch.Tensor
    scale: torch.Tensor
    y: torch.Tensor
    post: torch.Tensor
    comb: torch.Tensor
    part: torch.Tensor
    count: torch.Tensor
    ow: torch.Tensor | None = None  # the site norm's weight (spec.site.out_weight)
    parts: torch.Tensor | None = None  # spec.site_parts: the streams' parts (site_parts(...))

    def bound(self) -> dict[str, object]:
        return {"fn_ptr": self.fn, "base_ptr": self.base, "scale_ptr": self.scale,
                "y_ptr": self.y, "spost_ptr": self.post, "scomb_ptr": self.comb,
                "part_ptr": self.part, "count_ptr": self.count, "s_fn": self.fn.stride(0),
                "s_y": self.y.stride(0), "s_post": self.post.stride(0),
                "s_comb": self.comb.stride(0), "s_comb_i": self.comb.stride(1),
                "ow_ptr": self.ow, "parts_ptr": self.parts}


@dataclass(frozen=True)
class SiteIn:
    """The operands of the site whose y a GEMV forms (spec.site_in): the partials and stream
    parts the GEMV before wrote (its Site's part and parts), the site's base and scale, and
    its post and comb, which the forming step writes."""

    part: torch.Tensor
    parts: torch.Tensor
    base: torch.Tensor
    scale: torch.Tensor
    post: torch.Tensor
    comb: torch.Tensor

    def bound(self) -> dict[str, object]:
        return {"parts_ptr": self.parts, "part_ptr": self.part, "base_ptr": self.base,
                "scale_ptr": self.scale, "spost_ptr": self.post, "scomb_ptr": self.comb,
                "s_comb_i": self.comb.stride(1)}


def site_parts(site: hc_pre.HCPreSpec, dtype: torch.dtype, device) -> torch.Tensor:
    """The one-row buffer of a site's stream parts: rows 0..n-1 each stream's value in `dtype`
    (the weights'), rows n..2n-1 what that rounding left. Allocate once, outside any captured
    launch; every site of this shape shares it (each is read by the next launch only)."""
    return torch.empty((2 * site.n, site.d), dtype=dtype, device=device)


def finishes_site(spec: MatmulSpec, rows: int) -> bool:
    """Whether a step of `rows` rows finishes spec.site in the GEMM (one row, the GEMV path
    with the epilogue fused); the site's own hc_pre launch is then skipped."""
    return spec.site is not None and folds(rows)


def bind_site(spec: MatmulSpec, rows: int, grid: tuple[int], bound: dict, extra: dict,
              site: Site | None) -> None:
    """Bind spec.site's operands; a one-row step finishes the site (SITE), or writes its
    partials and stream parts for the GEMV that forms it, which sums one row a program."""
    require(site is not None, "a site-feeding GEMM needs its site's operands")
    hc_pre_launch.check_weight(spec.site, site.ow)
    bound |= site.bound()
    extra["SITE"] = finishes_site(spec, rows)
    if not extra["SITE"]:
        return
    if spec.site_parts:  # the GEMV after the site sums one partials row a site program
        hc_pre_launch.check_stream_parts(spec.site, site.parts)
        require(grid[0] == site_programs(spec.site.d),
                lambda: f"site partials: {grid[0]} programs, the GEMV after the site sums "
                        f"{site_programs(spec.site.d)}")
        hc_pre_launch.check_partials(spec.site, site.part)
        return
    need = grid[0] * hc_pre.projections(spec.site)[1]
    require(site.part.numel() >= need,
            lambda: f"site partials: >= {need} floats, got {site.part.numel()}")


def bind_form(spec: MatmulSpec, rows: int, grid: tuple[int], bound: dict, extra: dict,
              site_in: SiteIn | None) -> tuple[int]:
    """Bind spec.site_in's operands; a one-row step forms y from the stream parts (they take
    x's place) and runs one program more."""
    require(site_in is not None, "a GEMV that forms a site's y needs the site's operands")
    bound |= site_in.bound()
    extra["FORM"] = int(folds(rows))
    if not extra["FORM"]:
        return grid
    hc_pre_launch.check_stream_parts(spec.site_in, site_in.parts)
    hc_pre_launch.check_partials(spec.site_in, site_in.part)
    bound |= {"x_ptr": site_in.parts, "sx_t": site_in.parts.stride(0)}
    return (grid[0] + 1,)
