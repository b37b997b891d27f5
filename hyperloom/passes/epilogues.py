"""Epilogue and prologue fusions: SwiGLU into the gate|up GEMM, the residual add and hc_post into
the projection that produces the block output (so each site reads and writes the highway once;
a MoE block's routed output is added in the same epilogue), KDA's decay gate into f_b's
projection and its gated output norm into g_b's, RoPE into attention's KV write, and the
embedding gather into the highway's first write."""

from __future__ import annotations

from hyperloom.ir import ops
from hyperloom.ir.graph import Graph, Node
from hyperloom.ir.ops import Op
from hyperloom.passes.rewrite import PassResult, make_node, producers, rebuild, sole_user


def _plain_gemm(node: Node | None) -> bool:
    """A projection with one result: LINEAR, or a one-split norm_linear (its norm prologue
    stays: the emitter does a prologue and an epilogue in one kernel)."""
    if node is None:
        return False
    if node.op is Op.LINEAR:
        return True
    return node.op is Op.NORM_LINEAR and len(node.outs) == 1 and node.attrs.out_dtype == ""


def _eps(node: Node) -> ops.EpilogueLinearAttrs:
    return ops.EpilogueLinearAttrs(node.attrs.eps if node.op is Op.NORM_LINEAR else None)


class _Fuser:
    """Walks the nodes of one op; `fuse` returns (new node, index of the producer to drop), a
    reason to decline, or None for a node that is no candidate."""

    def __init__(self, graph: Graph):
        self.graph, self.users, self.prod = graph, graph.users(), producers(graph)
        self.index = {id(n): i for i, n in enumerate(graph.nodes)}
        self.replace: dict[int, Node] = {}
        self.drop: set[int] = set()
        self.declined: list[str] = []

    def single(self, value: str) -> Node | None:
        """The producer of `value` when `value` has no other reader."""
        if value not in self.prod or sole_user(self.graph, value, self.users) is None:
            return None
        return self.prod[value]

    def run(self, op: Op, fuse) -> PassResult:
        for i, node in enumerate(self.graph.nodes):
            if node.op is not op:
                continue
            got = fuse(self, node)
            if got is None:  # not a candidate
                continue
            if isinstance(got, str):
                self.declined.append(got)
                continue
            new, gone = got
            self.replace[i] = new
            self.drop |= {self.index[id(g)] for g in gone}
        return rebuild(self.graph, self.replace, self.drop), tuple(self.declined)


def _swiglu(f: _Fuser, node: Node):
    gate, up = node.args
    src = f.prod.get(gate)
    ok = (src is not None and src.op is Op.NORM_LINEAR and src.outs == (gate, up)
          and all(sole_user(f.graph, v, f.users) is node for v in (gate, up)))
    if not ok:
        return f"cannot fuse {node.outs[0]} swiglu into a GEMM: {gate}, {up} are not the only " \
               "two results of one projection"
    attrs = ops.SwiGLULinearAttrs(src.attrs.eps, node.attrs.limit)
    return make_node(f.graph, node.outs, Op.SWIGLU_LINEAR, src.args, attrs, [src, node]), [src]


def fuse_swiglu(graph: Graph) -> PassResult:
    return _Fuser(graph).run(Op.SWIGLU, _swiglu)


def _projection(f: _Fuser, value: str) -> tuple[Node, list[Node], tuple[str, ...]] | None:
    """(plain projection, nodes the epilogue absorbs, addend operands) when `value` is read once
    and is either a plain projection's sole result, or its sum with another value (a MoE block:
    the shared expert's down projection plus the routed experts' output), the add and the
    projection read nowhere else."""
    src = f.single(value)
    if _plain_gemm(src):
        return src, [src], ()
    if src is None or src.op is not Op.ADD:
        return None
    for mine, other in (src.args, src.args[::-1]):
        gemm = f.single(mine)
        if _plain_gemm(gemm) and mine != other:
            return gemm, [gemm, src], (other,)
    return None


def _residual(f: _Fuser, node: Node):
    stream, out = node.args
    got = _projection(f, out)
    if got is None:
        return f"cannot fuse {node.outs[0]} residual_add into a GEMM: {out} is not the sole " \
               "result of a plain projection (or its sum with another value)"
    src, gone, addend = got
    return make_node(f.graph, node.outs, Op.LINEAR_RESIDUAL, (*src.args, stream, *addend),
                     _eps(src), [*gone, node]), gone


def fuse_residual(graph: Graph) -> PassResult:
    return _Fuser(graph).run(Op.RESIDUAL_ADD, _residual)


def _hc_post(f: _Fuser, node: Node):
    out, streams, post, comb = node.args
    got = _projection(f, out)
    if got is None:
        kind = f.prod[out].op.value if out in f.prod else "an input"
        return f"cannot fuse {node.outs[0]} hc_post into a GEMM: {out} comes from {kind}, " \
               "not a plain projection (or its sum with another value) with one user"
    src, gone, addend = got
    return make_node(f.graph, node.outs, Op.LINEAR_HC_POST,
                     (*src.args, streams, post, comb, *addend), _eps(src), [*gone, node]), gone


def fuse_hc_post(graph: Graph) -> PassResult:
    """hc_post as the epilogue of the projection it mixes in: of `linear`, or of `linear + v`
    (v added to the projection's result first)."""
    return _Fuser(graph).run(Op.HC_POST, _hc_post)


def _gated_norm(f: _Fuser, node: Node):
    x = node.args[0]
    src = f.prod.get(x)
    if src is None or src.op is not Op.GATED_RMSNORM or node.attrs != ops.EpilogueLinearAttrs() \
            or len(node.args) != 5:
        return None  # nothing to fold
    if f.single(x) is None:
        return f"cannot fold {x} gated_rmsnorm into the GEMM of {node.outs[0]}: {x} has " \
               "other readers"
    attrs = ops.EpilogueLinearAttrs(src.attrs.eps, src.attrs.head_dim)
    return make_node(f.graph, node.outs, Op.LINEAR_HC_POST,
                     (src.args[0], *node.args[1:], *src.args[1:]), attrs, [src, node]), [src]


def fold_gated_norm(graph: Graph) -> PassResult:
    """A gated RMSNorm read only by an hc_post GEMM (KDA's o_norm before o_proj) becomes that
    GEMM's prologue."""
    return _Fuser(graph).run(Op.LINEAR_HC_POST, _gated_norm)


def _gated_norm_epilogue(f: _Fuser, node: Node):
    normed, gate, nw = node.args
    src = f.single(gate)
    if src is None or src.op is not Op.LINEAR:
        return None  # fold_gated_norm may still take it as its reader's prologue
    return make_node(f.graph, node.outs, Op.LINEAR_GATED_NORM, (*src.args, normed, nw),
                     node.attrs, [src, node]), [src]


def fuse_gated_norm(graph: Graph) -> PassResult:
    """A gated RMSNorm whose gate is a projection read by nothing else (KDA's o_norm gated by
    g_b's) becomes that GEMM's epilogue over whole heads: the gate never goes to memory, and
    neither the norm nor its reader's prologue launches apart."""
    return _Fuser(graph).run(Op.GATED_RMSNORM, _gated_norm_epilogue)


def _kda_gate(f: _Fuser, node: Node):
    fx, dt_bias, a_log = node.args
    src = f.single(fx)
    if src is None or src.op is not Op.LINEAR:
        return f"cannot fuse {node.outs[0]} kda_gate into a GEMM: {fx} does not come from a " \
               "plain projection with one reader"
    return make_node(f.graph, node.outs, Op.LINEAR_KDA_GATE, (*src.args, dt_bias, a_log),
                     node.attrs, [src, node]), [src]


def fuse_kda_gate(graph: Graph) -> PassResult:
    """KDA's decay gate (f_b's projection, + dt_bias, the rate of each head) as the epilogue of
    f_b's GEMM: f never goes to memory, and the gate's own launch is gone."""
    return _Fuser(graph).run(Op.KDA_GATE, _kda_gate)


def _rope_attention(f: _Fuser, node: Node):
    q, k, v, slot, pos = node.args
    rq, rk = f.single(q), f.single(k)
    ok = all(r is not None and r.op is Op.ROPE and r.args[1] == pos for r in (rq, rk)) \
        and rq.attrs == rk.attrs
    if not ok:
        return f"cannot fuse RoPE into {node.outs[0]} attention: q and k are not both roped " \
               "once, at the row positions"
    attrs = ops.RopeAttentionAttrs.of(node.attrs, rq.attrs)
    args = (rq.args[0], rk.args[0], v, slot, pos)
    return make_node(f.graph, node.outs, Op.ROPE_ATTENTION, args, attrs, [rq, rk, node]), [rq, rk]


def fuse_rope_attention(graph: Graph) -> PassResult:
    return _Fuser(graph).run(Op.ATTENTION, _rope_attention)


def _embedding(f: _Fuser, node: Node):
    src = f.single(node.args[0])
    if src is None or src.op is not Op.EMBEDDING:
        return f"cannot fuse {node.outs[0]} {node.op.value} into the embedding gather"
    if node.op is Op.CAST and node.attrs.dtype != "f32":
        return f"cannot fuse {node.outs[0]} cast to {node.attrs.dtype} into the embedding"
    n = node.attrs.n if node.op is Op.HC_EXPAND else 1
    return make_node(f.graph, node.outs, Op.EMBED_STREAMS, src.args,
                     ops.HCExpandAttrs(n), [src, node]), [src]


def fuse_embedding(graph: Graph) -> PassResult:
    g, d1 = _Fuser(graph).run(Op.HC_EXPAND, _embedding)
    g, d2 = _Fuser(g).run(Op.CAST, _embedding)
    return g, d1 + d2
