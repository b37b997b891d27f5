"""The minimum work of a step, which the scenarios divide by time and by the hardware limit:
bytes a decode step must move (every weight it uses once, every state it reads or rewrites)
and FLOPs a prefill must do (each op in its cheapest exact form)."""

from __future__ import annotations

from hyperloom.codegen.cache import shared_name
from hyperloom.ir.graph import Graph, Node
from hyperloom.ir.ops import Op
from hyperloom.models import Model
from hyperloom.passes.kernel_plan import KernelPlan
from hyperloom.passes.rewrite import producers

EMBED = "embed_tokens.weight"


def _nbytes(graph: Graph, skip: tuple[str, ...] = ()) -> int:
    return sum(p.type.nbytes() for p in graph.params if p.name not in skip)


def _state_bytes(graph: Graph, suffix: str, node: Node, **sizes: int) -> int:
    name = node.attrs.state + suffix
    return next(d for d in graph.states() if d.name == name).type.nbytes(**sizes)


def _reach(prod: dict[str, Node], node: Node) -> int | None:
    """The most tokens an MLA row attends to: its indexer's width (None: all it sees); prod:
    the graph's producers."""
    return prod[node.args[5]].attrs.width if len(node.args) > 5 else None


def _seen(reach: int | None, visible: int) -> int:
    return visible if reach is None else min(reach, visible)


def _decode_state(graph: Graph, prod: dict[str, Node], node: Node, ctx: int) -> int:
    """Bytes of state one sequence's decode row moves through `node`."""
    op = node.op
    if op is Op.ATTENTION:  # the cache of ctx tokens, read once
        return _state_bytes(graph, ".k", node, S=ctx) + _state_bytes(graph, ".v", node, S=ctx)
    if op in (Op.KDA, Op.KDA_CONV):  # read and rewritten
        return 2 * _state_bytes(graph, ".recurrent" if op is Op.KDA else ".conv", node)
    if op is Op.MLA_ATTENTION:  # the latent rows the row attends to
        return _state_bytes(graph, ".latent", node, S=_seen(_reach(prod, node), ctx + 1))
    if op is Op.DSA_INDEX:  # every complete pool's key read, the row's [key | gate] written
        pools = (ctx + 1) // node.attrs.kpool
        return (_state_bytes(graph, ".pooled", node, S=pools * node.attrs.kpool)
                + _state_bytes(graph, ".keys", node, S=1))
    return 0


def _expert_numel(graph: Graph, node: Node) -> int:
    """Elements of one expert's gate, up and down rows of a MOE_EXPERTS node."""
    stacks = [graph.param(a[1:]).type for a in node.args[3:6]]
    return sum(t.numel() // int(t.shape[0]) for t in stacks)


def _expert_bytes(graph: Graph, node: Node) -> int:
    return _expert_numel(graph, node) * graph.param(node.args[3][1:]).type.dtype.torch.itemsize


def decode_bytes(model: Model, ctx: int, batch: int = 1,
                 experts: list[int] | None = None) -> float:
    """Every weight once (an embedding row per sequence; of a routed MoE, the experts the step
    chose: `experts`, distinct ids per MoE layer in graph order, else top_k per sequence) plus
    every sequence's state traffic at a context of ctx tokens."""
    g = model.main
    emb = g.param(EMBED).type
    moe = list(g.by_op(Op.MOE_EXPERTS))
    stacks = tuple(a[1:] for n in moe for a in n.args[3:6])
    weights = _nbytes(g, skip=(EMBED, *stacks)) + batch * emb.nbytes() // int(emb.shape[0])
    prod = producers(g)
    if experts is None:
        experts = [min(batch * prod[n.args[2]].attrs.top_k, int(g.param(n.args[3][1:]).type
                                                                   .shape[0])) for n in moe]
    weights += sum(k * _expert_bytes(g, n) for k, n in zip(experts, moe, strict=True))
    state = sum(_decode_state(g, prod, n, ctx) for n in g.nodes if n.state)
    return float(weights + batch * state)


def _matmul_flops(graph: Graph, node: Node, n: int) -> int:
    w = graph.param(node.args[1][1:]).type.shape
    return 2 * n * int(w[0]) * int(w[1])


def _mla_flops(prod: dict[str, Node], node: Node, n: int) -> int:
    """The cheaper of attending through kv_b_proj's keys and values, or in the latent space
    (q and the output folded through kv_b_proj); both project every row once."""
    at = node.attrs
    reach = _reach(prod, node)
    seen = sum(_seen(reach, i + 1) for i in range(n))
    project = 2 * n * at.kv_lora_rank * at.heads * (at.qk_head_dim + at.v_head_dim)
    expanded = 2 * at.heads * (at.qk_head_dim + at.v_head_dim) * seen
    absorbed = 4 * at.heads * at.kv_lora_rank * seen
    return project + min(expanded, absorbed)


def _op_flops(graph: Graph, prod: dict[str, Node], node: Node, n: int) -> int:
    op, at = node.op, node.attrs
    if op in (Op.LINEAR, Op.LM_HEAD, Op.MOE_ROUTER):
        return _matmul_flops(graph, node, n)
    if op is Op.ATTENTION:  # causal: QK^T and PV over half the square
        return n * n * at.heads * at.head_dim * 2
    if op is Op.MOE_EXPERTS:  # top_k experts a row: gate, up and down
        top_k = prod[node.args[2]].attrs.top_k
        return 2 * n * top_k * _expert_numel(graph, node)
    if op is Op.KDA:  # the recurrence's three products a token: S^T k, k delta^T, S^T q
        return 6 * n * at.heads * at.head_dim * at.head_dim
    if op is Op.DSA_INDEX:  # each row scores the complete pools it sees
        pools = sum((i + 1) // at.kpool for i in range(n))
        return 2 * at.heads * at.head_dim * pools
    if op is Op.MLA_ATTENTION:
        return _mla_flops(prod, node, n)
    return 0


def prefill_flops(model: Model, n: int) -> float:
    """A prompt of n tokens from position 0: GEMMs 2 n N K (a routed MoE's top_k experts a
    row), causal and sparse attention over the tokens each row sees, the KDA recurrence."""
    g = model.main
    prod = producers(g)
    return float(sum(_op_flops(g, prod, node, n) for node in g.nodes))


def site_bytes(graph: Graph, rows: int) -> float:
    """hc_pre reads the streams and writes y; hc_post reads y and the streams and writes the
    streams (the sublayer between them is a real boundary); the weights once."""
    shape = graph.inputs[0][1].shape
    streams = rows * int(shape[1]) * int(shape[2]) * 4
    y = rows * int(shape[2]) * next(graph.by_op(Op.HC_PRE)).types[0].dtype.torch.itemsize
    return float(3 * streams + 2 * y + _nbytes(graph))


# ops whose launch reads only some of their weight rows (the chosen experts, the embedded tokens)
PART_READ = (Op.MOE_EXPERTS, Op.EMBEDDING, Op.EMBED_STREAMS)


def kernel_weights(plan: KernelPlan, graph: Graph, rows: int) -> dict[str, int]:
    """Weight bytes a step of `rows` rows reads, by the name of the kernel that reads them (a
    plan entry's layer-free name, as profiles show it; an entry that launches nothing at this
    width counts under the entry whose launch runs it). Entries of PART_READ ops are left out,
    and so are a folded site's weights, which the GEMM before it reads. `graph`: the compiled
    one (its derived weights are the ones read)."""
    types, out = graph.value_types(), {}
    for prev, k in zip((None, *plan.kernels), plan.kernels):
        carried = prev is not None and prev.carries is not None and prev.carries.name == k.name
        reader = k if k.launches_at(rows, decode=True) else prev if carried else None
        if reader is None or k.node.op in PART_READ:
            continue
        size = sum(types[a].nbytes() for a in k.node.args if a.startswith("@"))
        if size:
            name = shared_name(reader.name)
            out[name] = out.get(name, 0) + size
    return out
