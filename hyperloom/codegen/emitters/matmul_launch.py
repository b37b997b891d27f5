"""The launches of `matmul`'s kernels (see its docstring for the contract): the scratch a step
needs (the normed rows h, a wide hc_post step's y), the operands bound by parameter name, the
tiling picked by rows, and the kernels run in order."""

from __future__ import annotations

import torch

from hyperloom.codegen.emitters import hc_post, norm
from hyperloom.codegen.emitters.ints import cdiv, next_power_of_2
from hyperloom.codegen.emitters.matmul import (SPLIT_ROWS, gemm_spec, kernel_names, mean_spec,
                                               norm_spec, params, split_spec)
from hyperloom.codegen.emitters.matmul_checks import check_operands
from hyperloom.codegen.emitters.matmul_sites import Site, SiteIn, bind_form, bind_site
from hyperloom.codegen.emitters.matmul_spec import NORM_KERNEL, MatmulSpec
from hyperloom.codegen.emitters.matmul_tiles import tiles
from hyperloom.errors import require, require_shape
from hyperloom.passes.kernel_plan import MEAN_ROWS


def _strides(spec: MatmulSpec, x, out, stream, post, comb, addend,
             normed=None) -> dict[str, int]:
    s = {"sx_t": x.stride(0), "so_t": out.stride(0)}
    if spec.epilogue == "gated_norm":
        s["sn_t"] = normed.stride(0)
    if spec.addend:
        s["sa_t"] = addend.stride(0)
    if spec.epilogue in ("residual", "hc_post"):
        s["sst_t"] = stream.stride(0)
    if spec.epilogue == "hc_post":
        s.update(so_h=out.stride(1), sst_h=stream.stride(1), sp_t=post.stride(0),
                 sc_t=comb.stride(0), sc_i=comb.stride(1))
    return s


def scratch_y(spec: MatmulSpec, rows: int, dtype: torch.dtype, device) -> torch.Tensor | None:
    """The result rows a wide hc_post step stores between its two kernels (w's dtype); None
    unless the epilogue is hc_post and `rows` exceeds SPLIT_ROWS. Allocate once, outside any
    captured launch; GEMMs of one width may share it."""
    if spec.epilogue != "hc_post" or rows <= SPLIT_ROWS:
        return None
    return torch.empty((rows, spec.n_out), dtype=dtype, device=device)


def needs_h(spec: MatmulSpec, rows: int) -> bool:
    """Whether steps of up to `rows` rows need the normed-row scratch h (the norm prologues run
    as kernels of their own)."""
    return spec.prologue in NORM_KERNEL


def scratch(spec: MatmulSpec, rows: int, dtype: torch.dtype, device) -> torch.Tensor | None:
    """The normed-row buffer `launch` needs as h for up to `rows` rows (w's dtype), or None
    (needs_h). Allocate it once, outside any captured launch."""
    if not needs_h(spec, rows):
        return None
    return torch.empty((rows, spec.k), dtype=dtype, device=device)


def norm_tiles(spec: MatmulSpec) -> tuple[int, int]:
    """(BLOCK_K, num_warps) of the norm kernel: 2048-wide chunks (K=4096: two steps, eight fp32
    of each stream per thread and step)."""
    block_k = min(2048, max(16, next_power_of_2(spec.k)))
    return block_k, max(1, min(8, block_k // 256))


def launch_norm(kernel, spec: MatmulSpec, *, x: torch.Tensor, h: torch.Tensor, rows: int) -> None:
    """mean_rmsnorm's norm kernel: h[:rows] = the normed stream means of x[:rows]."""
    block_k, warps = norm_tiles(spec)
    kernel[(rows,)](x, h, x.stride(0), x.stride(1), h.stride(0), BLOCK_K=block_k,
                    num_warps=warps)


def launch_gemm(kernel, spec: MatmulSpec, *, x: torch.Tensor, w: torch.Tensor, out: torch.Tensor,
                rows: int, stream: torch.Tensor | None = None, post: torch.Tensor | None = None,
                comb: torch.Tensor | None = None, site: Site | None = None,
                dt: torch.Tensor | None = None, alog: torch.Tensor | None = None,
                addend: torch.Tensor | None = None, normed: torch.Tensor | None = None,
                nw: torch.Tensor | None = None, site_in: SiteIn | None = None,
                mean: torch.Tensor | None = None) -> None:
    """The GEMM kernel of a spec whose prologue is none or rmsnorm (see gemm_spec) on the first
    `rows` rows; site: spec.site's operands (needed with spec.site); dt, alog: the kda_gate
    epilogue's dt_bias and A_log; addend: spec.addend's rows; normed, nw: the gated_norm
    epilogue's rows and norm weight; site_in: spec.site_in's operands (a one-row step reads
    them in place of x); mean: spec.mean_out's [>= rows, N]."""
    t = tiles(spec, rows, x.element_size(), w.element_size())
    bound = {"x_ptr": x, "w_ptr": w, "out_ptr": out, "stream_ptr": stream, "post_ptr": post,
             "comb_ptr": comb, "bias_ptr": dt, "alog_ptr": alog, "add_ptr": addend, "rows": rows,
             "normed_ptr": normed, "nw_ptr": nw,
             **_strides(spec, x, out, stream, post, comb, addend, normed)}
    if spec.mean_out:
        require(mean is not None, "matmul stream mean: needed by a mean_out spec, got None")
        require_shape("matmul stream mean", mean, (spec.n_out,), rows)
        bound |= {"mean_ptr": mean, "sm_t": mean.stride(0)}
    grid = (cdiv(rows, t.block_m) * cdiv(spec.n_out, t.block_n),)
    extra = {}
    if spec.site:
        bind_site(spec, rows, grid, bound, extra, site)
    if spec.site_in:
        grid = bind_form(spec, rows, grid, bound, extra, site_in)
    kernel[grid](*(bound[p] for p in params(spec)), BLOCK_M=t.block_m, BLOCK_N=t.block_n,
                 BLOCK_K=t.block_k, GROUP_M=t.group_m, GEMV=t.gemv,
                 num_warps=t.num_warps, num_stages=t.num_stages, **extra)


def launch(kernels, spec: MatmulSpec, *, x: torch.Tensor, w: torch.Tensor, out: torch.Tensor,
           rows: int, stream: torch.Tensor | None = None, post: torch.Tensor | None = None,
           comb: torch.Tensor | None = None, h: torch.Tensor | None = None,
           y: torch.Tensor | None = None, site: Site | None = None,
           gate: torch.Tensor | None = None, nw: torch.Tensor | None = None,
           dt: torch.Tensor | None = None, alog: torch.Tensor | None = None,
           addend: torch.Tensor | None = None, normed: torch.Tensor | None = None,
           site_in: SiteIn | None = None, mean: torch.Tensor | None = None) -> None:
    """Run the kernels of `source(..., spec)` (those of kernel_names, loaded, in order) on the
    first `rows` rows of the operands. mean_rmsnorm: h is the scratch of `scratch(...)` (at least
    `rows` rows); the norm kernel fills h[:rows], then the GEMM reads it as its x. hc_post: y
    is `scratch_y(...)`'s, needed when rows > SPLIT_ROWS. spec.site: `site` holds the site's
    operands, and a one-row step finishes it (finishes_site). gated_rmsnorm: gate and nw (the
    norm weight), and h (`scratch`) as for mean_rmsnorm. kda_gate: dt (dt_bias [N]) and alog
    (A_log [heads]). spec.addend: addend [>= rows, N]. gated_norm: normed [>= rows, N] and
    nw. spec.site_in: `site_in` holds the site's operands, and a one-row step forms y.
    spec.mean_out: mean [>= rows, N] takes the new streams' mean (up to SPLIT_ROWS rows).
    spec.mean_in: with mean given (what the GEMM before stored), a step of up to MEAN_ROWS
    rows runs the rmsnorm GEMM on it, in place of the norm kernel and h."""
    check_operands(spec, rows, x=x, w=w, out=out, stream=stream, post=post, comb=comb, h=h,
                   gate=gate, nw=nw, dt=dt, alog=alog, addend=addend, normed=normed)
    require(len(kernels) == len(kernel_names("", spec)), "one loaded kernel per kernel_names")
    if rows <= 0:
        return
    if spec.mean_in and mean is not None and rows <= MEAN_ROWS:
        require_shape("matmul stream mean", mean, (spec.k,), rows)
        launch_gemm(kernels[2], mean_spec(spec), x=mean, w=w, out=out, rows=rows)
        return
    if spec.prologue in NORM_KERNEL:
        if spec.prologue == "mean_rmsnorm":
            launch_norm(kernels[0], spec, x=x, h=h, rows=rows)
        else:
            norm.launch(kernels[0], norm_spec(spec), x=x, w=nw, out=h, rows=rows, gate=gate)
        x = h
    gemm = kernels[1 if spec.prologue in NORM_KERNEL else 0]
    if spec.epilogue == "hc_post" and rows > SPLIT_ROWS:
        require(y is not None and y.shape[0] >= rows and y.shape[1] == spec.n_out,
                lambda: f"a {rows}-row hc_post step needs y [>= {rows}, {spec.n_out}] "
                        f"(scratch_y), got {None if y is None else tuple(y.shape)}")
        launch_gemm(kernels[-2], split_spec(spec), x=x, w=w, out=y, rows=rows, stream=addend)
        hc_post.launch(kernels[-1], hc_post.HCPostSpec(spec.hc, spec.n_out), f=y, x=stream,
                       post=post, comb=comb, out=out, rows=rows)
        return
    launch_gemm(gemm, gemm_spec(spec), x=x, w=w, out=out, rows=rows, stream=stream,
                post=post, comb=comb, site=site, dt=dt, alog=alog, addend=addend, normed=normed,
                nw=nw if spec.epilogue == "gated_norm" else None, site_in=site_in, mean=mean)
