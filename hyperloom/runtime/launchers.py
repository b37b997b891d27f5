"""From a kernel-plan entry to a launch: the emitter spec, the generated source (loaded through
the kernel cache) and a closure over the step's operands. Ops without an emitter run their
reference semantics on the arena tensors, in fp32."""

from __future__ import annotations

import torch

from hyperloom.codegen import entry_spec
from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters import (
    attention,
    attention_split,
    dsa,
    dsa_select,
    elementwise,
    embedding,
    hc_post,
    hc_pre,
    hc_pre_launch,
    kda,
    kda_chunk,
    kda_conv,
    kda_gate,
    matmul,
    mla,
    moe_experts,
    moe_router,
    norm,
)
from hyperloom.codegen.emitters.attention_spec import capacity as kv_capacity
from hyperloom.codegen.specs import (
    attention_spec,
    dsa_spec,
    elementwise_spec,
    hc_post_spec,
    hc_pre_spec,
    kda_gate_spec,
    mla_spec,
    moe_experts_spec,
    moe_router_spec,
)
from hyperloom.ir.ops import Op
from hyperloom.ir.semantics import EVAL, Ctx
from hyperloom.ir.semantics.dense import rope_inv_freq
from hyperloom.ir.state import segments
from hyperloom.passes.kernel_plan import NARROW_ROWS, KernelEntry
from hyperloom.runtime import launch_matmul
from hyperloom.runtime.launch_matmul import hc_pre_scratch, site_parts
from hyperloom.runtime.operands import Launch, Operands

def _hc_pre(entry: KernelEntry, o: Operands, device) -> Launch:
    """A folded site (kernel_plan: the GEMM before it finishes it at one row) launches only
    for wider steps."""
    node, spec = entry.node, hc_pre_spec(entry.node, o.types)
    src = o.source(entry)
    kerns = tuple(load(src, n, device, entry.name) for n in hc_pre.kernel_names(entry.name))
    x, fn, base, scale, *ow = (o[a] for a in node.args)  # ow: the site norm's weight
    y, post, comb = (o[v] for v in node.outs)
    part, count = hc_pre_scratch(spec, x, o, device)
    if entry.formed and not entry.folded:  # its parts at one row, for the GEMV after it
        kparts = load(src, hc_pre.parts_name(entry.name), device, entry.name)
        parts, block = site_parts(spec, node, o, device), matmul.site_block(spec.d)

    def run(rows: int, _: int) -> None:
        if not entry.launches_at(rows):  # folded, or the embedding wrote its parts
            return
        if entry.formed and not entry.folded and rows <= NARROW_ROWS:
            hc_pre_launch.launch_parts(kparts, spec, x=x, fn=fn, part=part, parts=parts,
                                       block_n=block)
        else:
            hc_pre_launch.launch(kerns, spec, x=x, fn=fn, base=base, scale=scale, y=y,
                                 post=post, comb=comb, part=part, count=count, rows=rows,
                                 fused=rows <= NARROW_ROWS, ow=ow[0] if ow else None)
    return run


def _hc_post(entry: KernelEntry, o: Operands, device) -> Launch:
    node, spec = entry.node, hc_post_spec(entry.node, o.types)
    kern = load(o.source(entry), entry.name, device)
    f, x, post, comb = (o[a] for a in node.args)
    out = o[node.outs[0]]
    return lambda rows, _: hc_post.launch(kern, spec, f=f, x=x, post=post, comb=comb, out=out,
                                          rows=rows)


def _embedding(entry: KernelEntry, o: Operands, device) -> Launch:
    """With the first formed site it carries, a one-row step writes the site's parts too."""
    node, spec = entry.node, entry_spec(entry, o.types)
    kern = load(o.source(entry), entry.name, device)
    ids, table, out = o[node.args[0]], o[node.args[1]], o[node.outs[0]]
    if entry.carries is None:
        return lambda rows, _: embedding.launch(kern, spec, ids=ids, table=table, out=out,
                                                rows=rows)
    site = entry.carries
    kparts = load(o.source(entry), embedding.parts_name(entry.name), device, entry.name)
    fn, part = o[site.node.args[1]], hc_pre_scratch(spec.site, out, o, device)[0]
    parts = site_parts(spec.site, site.node, o, device)

    def run(rows: int, _: int) -> None:
        if rows <= site.carried_rows:
            embedding.launch_parts(kparts, spec, ids=ids, table=table, out=out, fn=fn,
                                   part=part, parts=parts)
        else:
            embedding.launch(kern, spec, ids=ids, table=table, out=out, rows=rows)
    return run


def _attention(entry: KernelEntry, o: Operands, device) -> Launch:
    node, at = entry.node, entry.node.attrs
    spec, src = attention_spec(node, o.types), o.source(entry)
    kerns = tuple(load(src, n, device, entry.name) for n in attention.kernel_names(entry.name))
    q, k, v, slot, pos = (o[a] for a in node.args)
    inv = rope_inv_freq(at.rope(), torch.float32).to(device)
    q_out = o.buffer(("q", tuple(q.shape), q.dtype),
                     lambda: torch.empty(q.shape, dtype=q.dtype, device=device))
    kc, vc = o.state[at.state + ".k"], o.state[at.state + ".v"]
    table = o.state.table if spec.block_size else None  # paged: the slots' block tables
    out = o[node.outs[0]]
    # split-KV decode partials: a decode step has one row per sequence, so at most one per slot
    cap = kv_capacity(spec, kc, vc, table)
    max_rows = min(q.shape[0], (kc if table is None else table).shape[0])
    part = o.buffer(("attention", spec, max_rows, cap),
                    lambda: attention_split.scratch(spec, max_rows, cap, device))
    return lambda rows, seq_rows: attention.launch(
        kerns, spec, q=q, k=k, v=v, pos=pos, slot=slot, inv_freq=inv, k_cache=kc, v_cache=vc,
        q_out=q_out, o=out, rows=rows, seq_rows=seq_rows, block_table=table, part=part)


def _kda(entry: KernelEntry, o: Operands, device) -> Launch:
    """The recurrent kernel, or the chunked form's for a step with a run of CHUNKED_ROWS rows
    (prefill); the chunked form's scratch serves every KDA layer of this width."""
    node, spec = entry.node, entry_spec(entry, o.types)  # with the gated norm it carries
    src = o.source(entry)
    rec, *chunked = (load(src, n, device, entry.name) for n in kda.kernel_names(entry.name))
    q, k, v, g, b, slot, _ = (o[a] for a in node.args)
    state, out = o.state[node.attrs.state + ".recurrent"], o[node.outs[0]]
    args = dict(q=q, k=k, v=v, g=g, b=b, slot=slot, state=state, out=out)
    cspec, max_rows = kda.chunk_spec(spec), q.shape[0]
    work = None if max_rows < kda.CHUNKED_ROWS else o.buffer(
        ("kda_chunk", cspec, max_rows, state.shape[0]),
        lambda: kda_chunk.scratch(cspec, max_rows, state.shape[0], device, q.dtype))
    norm, carried = _kda_norm(entry, spec, o, device), entry.carries

    def run(rows: int, seq_rows: int) -> None:
        if seq_rows >= kda.CHUNKED_ROWS:
            kda_chunk.launch(chunked, cspec, rows=rows, work=work, **args)
        else:
            # the recurrent state is this op's alone: no kernel before it in a step writes it
            kda.launch(rec, spec, rows=rows, seq_rows=seq_rows, early_state=True, norm=norm,
                       run_norm=carried is not None and not carried.launches_at(rows), **args)
    return run


def _kda_norm(entry: KernelEntry, spec: kda.KDASpec, o: Operands, device) -> kda.Norm | None:
    """The operands of the g_b GEMM + gated norm the recurrence carries (kernel_plan), with
    scratch for its most rows that serves every KDA layer of this shape."""
    if entry.carries is None:
        return None
    node = entry.carries.node  # linear_gated_norm(ga, wg, o, nw) -> h
    ga, wg, _, nw = (o[a] for a in node.args)
    rows = entry.carries.carried_rows
    work = o.buffer(("kda_norm", spec, rows), lambda: kda.norm_scratch(spec, rows, device))
    return kda.Norm(ga, wg, nw, o[node.outs[0]], *work)


def _kda_conv(entry: KernelEntry, o: Operands, device) -> Launch:
    node, spec = entry.node, entry_spec(entry, o.types)  # with the gate it carries
    src = o.source(entry)
    kerns = tuple(load(src, n, device, entry.name) for n in kda_conv.kernel_names(entry.name))
    q, k, v, wq, wk, wv, slot, _ = (o[a] for a in node.args)
    oq, ok, ov = (o[v] for v in node.outs)
    window = o.state[node.attrs.state + ".conv"]
    gate = None
    if entry.carries is not None:  # linear_kda_gate(f, wf, dt_bias, a_log) -> g
        gnode = entry.carries.node
        gate = kda_conv.Gate(*(o[a] for a in gnode.args), o[gnode.outs[0]])
    return lambda rows, seq_rows: kda_conv.launch(
        kerns, spec, q=q, k=k, v=v, wq=wq, wk=wk, wv=wv, slot=slot, window=window, oq=oq, ok=ok,
        ov=ov, rows=rows, seq_rows=seq_rows, gate=gate)


def _kda_gate(entry: KernelEntry, o: Operands, device) -> Launch:
    node, spec = entry.node, kda_gate_spec(entry.node, o.types)
    kern = load(o.source(entry), entry.name, device)
    f, dt_bias, a_log = (o[a] for a in node.args)
    g = o[node.outs[0]]
    return lambda rows, _: kda_gate.launch(kern, spec, f=f, dt_bias=dt_bias, a_log=a_log, g=g,
                                           rows=rows)


def _dsa(entry: KernelEntry, o: Operands, device) -> Launch:
    """Indexer: cache write + pool keys, pool scores, top-k; the score and selection scratch
    serves every indexer of this capacity."""
    node, spec = entry.node, dsa_spec(entry.node, o.types)
    kerns = tuple(load(o.source(entry), n, device, entry.name)
                  for n in dsa.kernel_names(entry.name))
    qi, w, ki, gate, ape, slot, pos = (o[a] for a in node.args)
    keys, pooled = (o.state[node.attrs.state + s] for s in (".keys", ".pooled"))
    table = o.state.table if spec.block_size else None  # paged: the slots' block tables
    dsa.check(spec, keys, pooled, table)
    work = o.buffer(("dsa_work", qi.shape[0], pooled.shape[1]),
                    lambda: dsa_select.scratch(qi.shape[0], pooled))
    args = dict(qi=qi, w=w, ki=ki, gate=gate, ape=ape, slot=slot, pos=pos, keys=keys,
                pooled=pooled, work=work, out=o[node.outs[0]], block_table=table)
    return lambda rows, _: dsa.launch(kerns, spec, rows=rows, **args)


def _mla(entry: KernelEntry, o: Operands, device) -> Launch:
    """Sparse MLA in absorbed form over the latent cache (a long run's rows below topk in the
    dense form); one scratch per shape."""
    node, spec = entry.node, mla_spec(entry.node, o.types)
    kerns = tuple(load(o.source(entry), n, device, entry.name)
                  for n in mla.kernel_names(entry.name))
    q, c, wkvb, slot, pos, index = (o[a] for a in node.args)
    latent = o.state[node.attrs.state + ".latent"]
    work = o.buffer(("mla", spec, q.shape[0], latent.dtype),
                    lambda: mla.scratch(spec, q.shape[0], latent.dtype, device))
    args = dict(q=q, c=c, wkvb=wkvb, slot=slot, pos=pos, index=index, latent=latent,
                out=o[node.outs[0]], work=work,
                block_table=o.state.table if spec.block_size else None)
    return lambda rows, seq_rows: mla.launch(kerns, spec, rows=rows, seq_rows=seq_rows, **args)


def _moe_router(entry: KernelEntry, o: Operands, device) -> Launch:
    """Router GEMV + grouped top-k; the partial-logit scratch serves every router of a spec."""
    node, spec = entry.node, moe_router_spec(entry.node, o.types)
    kerns = tuple(load(o.source(entry), n, device, entry.name)
                  for n in moe_router.kernel_names(entry.name))
    x, w, bias = (o[a] for a in node.args)
    part = o.buffer(("moe_router", spec, x.shape[0]),
                    lambda: moe_router.scratch(spec, x.shape[0], device))
    args = dict(x=x, w=w, bias=bias, weights=o[node.outs[0]], ids=o[node.outs[1]], part=part)
    return lambda rows, _: moe_router.launch(kerns, spec, rows=rows, **args)


def _moe_experts(entry: KernelEntry, o: Operands, device) -> Launch:
    """Grouped expert GEMMs; padding rows (slot < 0) are skipped. The routing and per-pair
    scratch serves every MoE layer of a spec."""
    node, spec = entry.node, moe_experts_spec(entry.node, o.types)
    kerns = tuple(load(o.source(entry), n, device, entry.name)
                  for n in moe_experts.kernel_names(entry.name))
    x, weights, ids, wg, wu, wd = (o[a] for a in node.args)
    work = o.buffer(("moe_experts", spec, x.shape[0], x.dtype),
                    lambda: moe_experts.scratch(spec, x.shape[0], x.dtype, device))
    args = dict(x=x, weights=weights, ids=ids, wg=wg, wu=wu, wd=wd, out=o[node.outs[0]],
                work=work, skip=o.values.get("%slot"))
    return lambda rows, _: moe_experts.launch(kerns, spec, rows=rows, **args)


def _norm_operands(node, o: Operands) -> norm.Operands:
    x, *args = (o[a] for a in node.args)  # rmsnorm (w), gated (gate, w), layernorm (w, b)
    out = o[node.outs[0]]
    if node.op is Op.GATED_RMSNORM:
        return norm.Operands(x, args[1], out, gate=args[0])
    return norm.Operands(x, args[0], out, b=args[1] if node.op is Op.LAYERNORM else None)


def _norm(entry: KernelEntry, o: Operands, device) -> Launch:
    """A row norm (with the norm it carries, if any; a carried norm launches nothing)."""
    spec = entry_spec(entry, o.types)
    kern = None if entry.carried_rows else load(o.source(entry), entry.name, device)
    ops = _norm_operands(entry.node, o)
    then = _norm_operands(entry.carries.node, o) if entry.carries is not None else None

    def run(rows: int, _: int) -> None:
        if entry.launches_at(rows):
            norm.launch(kern, spec, x=ops.x, w=ops.w, out=ops.out, rows=rows, gate=ops.gate,
                        b=ops.b, then=then)
    return run


def _elementwise(entry: KernelEntry, o: Operands, device) -> Launch:
    node, spec = entry.node, elementwise_spec(entry.node, o.types)
    kern = load(o.source(entry), entry.name, device)
    ins = dict(zip(("a", "b") if len(node.args) == 2 else ("x",), (o[a] for a in node.args)))
    out = o[node.outs[0]]
    return lambda rows, _: elementwise.launch(kern, spec, out=out, rows=rows, **ins)


def _interpreter(entry: KernelEntry, o: Operands, device) -> Launch:
    """Reference semantics on the arena tensors: fp32 math, results cast into their buffers.
    Padding rows (slot -1, always the tail of a bucket) are left out: they own no state."""
    node = entry.node
    rowed = "%slot" in o.values

    def run(rows: int, _: int) -> None:
        if rowed:
            rows = int((o["%slot"][:rows] >= 0).sum())
        args = [o[a] if a.startswith("@") else o[a][:rows] for a in node.args]
        args = [a.float() if a.is_floating_point() else a for a in args]
        rows_of = segments(o["%slot"][:rows], o["%pos"][:rows]) if rowed else ()
        res = EVAL[node.op](Ctx(torch.float32, o.state, rows_of), node.attrs, *args)
        for v, r in zip(node.outs, res if isinstance(res, tuple) else (res,)):
            o[v][:rows].copy_(r)
    return run


BUILDERS = {"matmul": launch_matmul.build, "hc_pre": _hc_pre, "hc_post": _hc_post,
            "embedding": _embedding, "attention": _attention, "kda": _kda,
            "kda_conv": _kda_conv, "kda_gate": _kda_gate, "norm": _norm,
            "moe_router": _moe_router, "moe_experts": _moe_experts,
            "dsa": _dsa, "mla": _mla, "elementwise": _elementwise,
            "interpreter": _interpreter}
