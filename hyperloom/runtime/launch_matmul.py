"""The GEMM entries' launches (`matmul`): the operands of each fused epilogue and prologue, the
GEMM's own scratch, and the mHC sites a GEMM finishes or forms, with the site buffers that
hc_pre's and the embedding's launches share."""

from __future__ import annotations

import torch

from hyperloom.codegen import entry_spec
from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters import hc_pre, hc_pre_launch, matmul, matmul_launch
from hyperloom.ir.ops import Op, addend_of
from hyperloom.passes.kernel_plan import KernelEntry
from hyperloom.runtime.operands import Launch, Operands


def build(entry: KernelEntry, o: Operands, device) -> Launch:
    """A GEMM entry's launch, with its fused epilogue's and sites' operands and scratch."""
    node = entry.node
    spec, src = entry_spec(entry, o.types), o.source(entry)
    kerns = tuple(load(src, n, device, entry.name) for n in matmul.kernel_names(entry.name, spec))
    x, w = o[node.args[0]], o[node.args[1]]
    out = o.groups.get(node.outs[0], o[node.outs[0]])
    extra = (_epilogue_operands(node, spec, o) | _own_scratch(spec, x, w, o, device)
             | _site_operands(entry, spec, out, o, device))
    if not entry.carried_rows:
        return lambda rows, _: matmul_launch.launch(kerns, spec, x=x, w=w, out=out, rows=rows,
                                                    **extra)

    def run(rows: int, _: int) -> None:
        if entry.launches_at(rows):  # the entry before it runs it in its launch up to then
            matmul_launch.launch(kerns, spec, x=x, w=w, out=out, rows=rows, **extra)
    return run


def _epilogue_operands(node, spec: matmul.MatmulSpec,
                       o: Operands) -> dict[str, torch.Tensor]:
    """The operands a fused GEMM's op adds to x and w: its epilogue's and its prologue's."""
    def arg(i: int) -> torch.Tensor:
        return o[node.args[i]]

    extra = {}
    if node.op is Op.LINEAR_RESIDUAL:
        extra = {"stream": arg(2)}
    elif node.op is Op.LINEAR_HC_POST:
        extra = {"stream": arg(2), "post": arg(3), "comb": arg(4)}
    elif node.op is Op.LINEAR_KDA_GATE:
        extra = {"dt": arg(2), "alog": arg(3)}
    elif node.op is Op.LINEAR_GATED_NORM:
        extra = {"normed": arg(2), "nw": arg(3)}
    if spec.addend:
        extra["addend"] = o[addend_of(node)]
    if spec.prologue == "gated_rmsnorm":
        extra |= {"gate": arg(5), "nw": arg(6)}
    return extra


def _own_scratch(spec: matmul.MatmulSpec, x: torch.Tensor, w: torch.Tensor, o: Operands,
                 device) -> dict[str, torch.Tensor]:
    """A GEMM's own scratch: the normed rows (h) and, for a wide hc_post step, y."""
    extra = {}
    if matmul_launch.needs_h(spec, x.shape[0]):
        extra["h"] = o.buffer(("matmul_norm", x.shape[0], spec.k, w.dtype),
                              lambda: matmul_launch.scratch(spec, x.shape[0], w.dtype, device))
    if spec.epilogue == "hc_post" and x.shape[0] > matmul.SPLIT_ROWS:  # per GEMM width
        extra["y"] = o.buffer(("matmul_y", x.shape[0], spec.n_out, w.dtype),
                              lambda: matmul_launch.scratch_y(spec, x.shape[0], w.dtype, device))
    return extra


def _site_operands(entry: KernelEntry, spec: matmul.MatmulSpec, out: torch.Tensor,
                   o: Operands, device) -> dict:
    """What a GEMM that finishes the site after it (site), forms the site before it (site_in)
    or stores or reads the streams' mean (mean) needs (kernel_plan)."""
    extra = {}
    if spec.site:
        site = entry.finishes.node
        fn, base, scale, *ow = (o[a] for a in site.args[1:])
        parts = site_parts(spec.site, site, o, device) if spec.site_parts else None
        extra["site"] = matmul.Site(fn, base, scale, *(o[v] for v in site.outs),
                                    *hc_pre_scratch(spec.site, out, o, device),
                                    ow=ow[0] if ow else None, parts=parts)
    if entry.means is not None or entry.meaned:
        extra["mean"] = stream_mean(entry.means or entry, o, device)
    if spec.site_in:
        site = entry.forms.node
        part, _ = hc_pre_scratch(spec.site_in, o[site.args[0]], o, device)
        extra["site_in"] = matmul.SiteIn(part, site_parts(spec.site_in, site, o, device),
                                         o[site.args[2]], o[site.args[3]], o[site.outs[1]],
                                         o[site.outs[2]])
    return extra


def hc_pre_scratch(spec: hc_pre.HCPreSpec, x: torch.Tensor, o: Operands,
                   device) -> tuple[torch.Tensor, torch.Tensor]:
    """(partials, ticket counters): one pair serves every site of this shape in turn."""
    return o.buffer(("hc_pre", spec, x.shape[0]),
                    lambda: hc_pre_launch.scratch(spec, x.shape[0], device))


def stream_mean(head: KernelEntry, o: Operands, device) -> torch.Tensor:
    """The streams' mean the GEMM before a stream-mean norm GEMM (`head`) stores for it, in
    the head's weight dtype, for steps of up to SPLIT_ROWS rows (kernel_plan: means, meaned)."""
    x, w = o[head.node.args[0]], o[head.node.args[1]]
    rows = min(x.shape[0], matmul.SPLIT_ROWS)
    return o.buffer(("stream_mean", head.node.args[0]),
                    lambda: torch.empty((rows, x.shape[-1]), dtype=w.dtype, device=device))


def site_parts(spec: hc_pre.HCPreSpec, site, o: Operands, device) -> torch.Tensor:
    """The stream parts a site's GEMM writes and the GEMV that forms its y reads, in y's
    dtype: one buffer serves every site of this shape in turn."""
    dtype = o[site.outs[0]].dtype
    return o.buffer(("site_parts", spec.n, spec.d, dtype),
                    lambda: matmul.site_parts(spec, dtype, device))
