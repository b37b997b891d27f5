"""Triton codegen: one emitter per fused-kernel kind, listed in EMITTERS. Each emitter turns a
kernel-plan entry into deterministic Triton source whose header lists what it fused."""

from __future__ import annotations

import dataclasses

from hyperloom.codegen.emitters import (
    attention,
    dsa,
    elementwise,
    embedding,
    hc_post,
    hc_pre,
    kda,
    kda_conv,
    kda_gate,
    matmul,
    mla,
    moe_experts,
    moe_router,
    norm,
)
from hyperloom.codegen.specs import (
    attention_spec,
    dsa_spec,
    elementwise_spec,
    embedding_spec,
    hc_post_spec,
    hc_pre_spec,
    kda_conv_spec,
    kda_gate_spec,
    kda_spec,
    matmul_spec,
    mla_spec,
    moe_experts_spec,
    moe_router_spec,
    norm_spec,
)
from hyperloom.errors import CodegenError
from hyperloom.ir.ops import Op
from hyperloom.ir.printer import print_node
from hyperloom.passes.kernel_plan import ALWAYS, INTERPRETER, KernelEntry

EMITTERS = {  # emitter kind -> (spec from the node and operand types, its module)
    "matmul": (matmul_spec, matmul), "hc_pre": (hc_pre_spec, hc_pre),
    "hc_post": (hc_post_spec, hc_post),
    "embedding": (embedding_spec, embedding), "attention": (attention_spec, attention),
    "kda": (kda_spec, kda), "kda_conv": (kda_conv_spec, kda_conv),
    "kda_gate": (kda_gate_spec, kda_gate), "norm": (norm_spec, norm),
    "moe_router": (moe_router_spec, moe_router), "moe_experts": (moe_experts_spec, moe_experts),
    "dsa": (dsa_spec, dsa), "mla": (mla_spec, mla),
    "elementwise": (elementwise_spec, elementwise),
}


def header(entry: KernelEntry) -> str:
    return "\n".join([f"{entry.name}: {entry.emitter}", f"fuses: {', '.join(entry.node.sources)}",
                      f"node: {print_node(entry.node)}", *entry.bindings])


def entry_spec(entry: KernelEntry, types: dict):
    """The emitter spec of a plan entry: its node's, plus the site a GEMM finishes (or writes
    the parts of), the site a GEMV forms, the stream mean a GEMM stores or reads, the gate
    a KDA conv carries, the gated norm the KDA recurrence carries or the norm a norm carries."""
    if entry.emitter not in EMITTERS:
        raise CodegenError(f"no emitter {entry.emitter!r} for {entry.name}; emitters: "
                           f"{', '.join(EMITTERS)}")
    spec = EMITTERS[entry.emitter][0](entry.node, types)
    if entry.finishes is not None:
        spec = dataclasses.replace(spec, site=hc_pre_spec(entry.finishes.node, types),
                                   site_parts=entry.finishes.formed)
    if entry.forms is not None:
        spec = dataclasses.replace(spec, site_in=hc_pre_spec(entry.forms.node, types))
    if entry.means is not None or entry.meaned:
        spec = dataclasses.replace(spec, mean_out=entry.means is not None, mean_in=entry.meaned)
    carried = entry.carries.node if entry.carries is not None else None
    if carried is not None and carried.op is Op.LINEAR_KDA_GATE:  # (f, wf, dt_bias, a_log)
        spec = dataclasses.replace(spec, gate=kda_gate_spec(carried, types),
                                   rank=int(types[carried.args[1]].shape[1]))
    elif carried is not None and entry.emitter == "embedding":  # the first formed site
        spec = dataclasses.replace(spec, site=hc_pre_spec(carried, types))
    elif carried is not None and entry.emitter == "norm":  # an independent norm after it
        spec = dataclasses.replace(spec, then=norm_spec(carried, types))
    elif carried is not None:  # linear_gated_norm(ga, wg, o, nw) of the KDA recurrence
        spec = dataclasses.replace(spec, rank=int(types[carried.args[1]].shape[1]),
                                   eps=carried.attrs.eps)
    return spec


def kernel_source(entry: KernelEntry, types: dict) -> str | None:
    """The generated Triton source of a plan entry (None for interpreter fallbacks and entries
    the one before runs at every width)."""
    if entry.emitter == INTERPRETER or entry.carried_rows >= ALWAYS:
        return None
    return EMITTERS[entry.emitter][1].source(entry.name, entry_spec(entry, types), header(entry))
