"""The baseline: an IR graph lowered to a torch.fx GraphModule of plain torch ops, for a fixed
batch of sequences stepping together, with static KV caches (module buffers, one slot per
sequence). Built from the same spec and weights as the engine, it runs eager or under
torch.compile, as a user would run their own PyTorch model."""

from __future__ import annotations

import operator

import torch
import torch.fx as fx

from hyperloom.bench import baseline_dsa as BD
from hyperloom.bench import baseline_kda as BK
from hyperloom.bench import baseline_moe as BM
from hyperloom.bench import baseline_ops as B
from hyperloom.errors import CodegenError
from hyperloom.ir.graph import Graph, Node
from hyperloom.ir.ops import Op
from hyperloom.ir.semantics.dense import rope_inv_freq
from hyperloom.ir.types import S


def _safe(name: str) -> str:
    return "w_" + name.replace(".", "__").replace("*", "all")


class BaselineModule(torch.nn.Module):
    """Holds the weights, static caches ([slots, S, ...] each) and RoPE tables as buffers."""

    def __init__(self, graph: Graph, weights: dict[str, torch.Tensor], max_seq_len: int,
                 device: torch.device, slots: int = 1):
        super().__init__()
        for p in graph.params:
            self.register_buffer(_safe(p.name), weights[p.name].to(device, p.type.dtype.torch))
        self.states = tuple(_safe(d.name) for d in graph.states())
        for d in graph.states():
            shape = [slots] + [int(s.subs(S, max_seq_len)) for s in d.type.shape]
            self.register_buffer(_safe(d.name), torch.zeros(shape, dtype=d.type.dtype.torch,
                                                            device=device))
        self.max_seq_len, self.device = max_seq_len, device

    def rope_tables(self, node: Node) -> tuple[str, str]:
        at = node.attrs
        key = _safe(f"rope.{at.head_dim}.{at.theta}.{at.kind}.{at.factor}")
        if not hasattr(self, key + "_cos"):
            inv = rope_inv_freq(at, torch.float32).to(self.device)
            ang = torch.arange(self.max_seq_len, device=self.device)[:, None].float() * inv
            ang = torch.cat([ang, ang], -1)
            self.register_buffer(key + "_cos", ang.cos())
            self.register_buffer(key + "_sin", ang.sin())
        return key + "_cos", key + "_sin"

    def reset(self) -> None:
        """Zero every cache and recurrent state: the slots hold new sequences."""
        for name in self.states:
            getattr(self, name).zero_()


def _state(g: fx.Graph, node: Node, *suffixes: str) -> list[fx.Node]:
    return [g.get_attr(_safe(node.attrs.state + x)) for x in suffixes]


def _dense(g, root, node, a, dt):
    at, op = node.attrs, node.op
    if op is Op.EMBEDDING:
        return g.call_function(B.embedding, (a[0], a[1]), {"dtype": dt})
    if op is Op.CAST:
        return g.call_function(B.cast, (a[0],), {"dtype": dt})
    if op in (Op.RMSNORM, Op.LAYERNORM):
        fn = B.rmsnorm if op is Op.RMSNORM else B.layernorm
        return g.call_function(fn, tuple(a), {"eps": at.eps, "dtype": dt})
    if op is Op.GATED_RMSNORM:
        return g.call_function(B.gated_rmsnorm, tuple(a), {"eps": at.eps,
                                                         "head_dim": at.head_dim, "dtype": dt})
    if op is Op.SWIGLU:
        return g.call_function(B.swiglu, (a[0], a[1]), {"limit": at.limit, "dtype": dt})
    fn = {Op.LINEAR: B.linear, Op.ADD: B.add, Op.RESIDUAL_ADD: B.add, Op.CONCAT: B.concat}[op]
    return g.call_function(fn, (a[0], a[1]), {"dtype": dt})


def _attention(g, root, node, a, dt):
    at = node.attrs
    if node.op is Op.ROPE:
        cos, sin = (g.get_attr(n) for n in root.rope_tables(node))
        return g.call_function(B.rope, (a[0], a[1], cos, sin),
                               {"head_dim": at.head_dim, "dtype": dt})
    return g.call_function(B.attention, (a[0], a[1], a[2], a[4], *_state(g, node, ".k", ".v")), {
        "heads": at.heads, "kv_heads": at.kv_heads, "head_dim": at.head_dim,
        "scale": at.scale, "dtype": dt})


def _hc(g, root, node, a, dt):
    at, op = node.attrs, node.op
    if op is Op.HC_EXPAND:
        return g.call_function(B.hc_expand, (a[0],), {"n": at.n, "dtype": dt})
    if op is Op.HC_PRE:
        return g.call_function(B.hc_pre, tuple(a), {"n": at.n, "norm_eps": at.norm_eps,
                                                    "hc_eps": at.hc_eps, "iters": at.iters})
    fn = {Op.HC_POST: B.hc_post, Op.HC_HEAD_MEAN: B.hc_head_mean, Op.LM_HEAD: B.lm_head}[op]
    return g.call_function(fn, tuple(a))


def _kda(g, root, node, a, dt):
    at, op = node.attrs, node.op
    if op is Op.KDA_CONV:
        return g.call_function(BK.conv, (*a[:6], *_state(g, node, ".conv")),
                               {"kernel": at.kernel, "dtype": dt})
    if op is Op.KDA_GATE:
        return g.call_function(BK.gate, tuple(a), {"heads": at.heads, "head_dim": at.head_dim,
                                                   "lower_bound": at.lower_bound, "dtype": dt})
    return g.call_function(BK.kda, (*a[:5], *_state(g, node, ".recurrent")),
                           {"heads": at.heads, "head_dim": at.head_dim, "dtype": dt})


def _dsa(g, root, node, a, dt):
    at = node.attrs
    if node.op is Op.DSA_INDEX:
        return g.call_function(BD.index, (*a[:5], a[6], *_state(g, node, ".keys", ".pooled")),
                               {"heads": at.heads, "head_dim": at.head_dim, "topk": at.topk,
                                "kpool": at.kpool, "select_tail": at.select_tail})
    sel = a[5:]  # the selection, where an indexer chose the tokens
    return g.call_function(BD.mla, (a[0], a[1], a[2], a[4], *_state(g, node, ".latent"), *sel), {
        "heads": at.heads, "qk_head_dim": at.qk_head_dim, "v_head_dim": at.v_head_dim,
        "scale": at.scale, "dtype": dt})


def _moe(g, root, node, a, dt):
    at = node.attrs
    if node.op is Op.MOE_ROUTER:
        return g.call_function(BM.router, tuple(a), {
            "top_k": at.top_k, "n_group": at.n_group, "topk_group": at.topk_group,
            "norm_topk_prob": at.norm_topk_prob, "scaling": at.scaling})
    return g.call_function(BM.experts, tuple(a), {"limit": at.limit, "dtype": dt})


LOWERINGS = {
    **dict.fromkeys((Op.EMBEDDING, Op.CAST, Op.RMSNORM, Op.LAYERNORM, Op.GATED_RMSNORM,
                     Op.LINEAR, Op.SWIGLU, Op.ADD, Op.RESIDUAL_ADD, Op.CONCAT), _dense),
    **dict.fromkeys((Op.ROPE, Op.ATTENTION), _attention),
    **dict.fromkeys((Op.HC_EXPAND, Op.HC_PRE, Op.HC_POST, Op.HC_HEAD_MEAN, Op.LM_HEAD), _hc),
    **dict.fromkeys((Op.KDA_CONV, Op.KDA_GATE, Op.KDA), _kda),
    **dict.fromkeys((Op.DSA_INDEX, Op.MLA_ATTENTION), _dsa),
    **dict.fromkeys((Op.MOE_ROUTER, Op.MOE_EXPERTS), _moe),
}


def _call(g: fx.Graph, root: BaselineModule, node: Node, env: dict) -> object:
    if node.op not in LOWERINGS:
        raise CodegenError(f"the torch baseline has no lowering for {node.op.value} (node "
                           f"{node.outs[0]}); lowered: {', '.join(o.value for o in LOWERINGS)}")
    a = [g.get_attr(_safe(x[1:])) if x.startswith("@") else env[x] for x in node.args]
    return LOWERINGS[node.op](g, root, node, a, node.types[0].dtype.torch)


def lower(graph: Graph, weights: dict[str, torch.Tensor], max_seq_len: int,
          device: torch.device | str, slots: int = 1) -> fx.GraphModule:
    """forward(*inputs but %slot, in graph order) -> the graph's outputs (a tuple), for `slots`
    sequences stepping together: a decoder takes (ids [slots * T], pos [slots * T]), T rows of
    sequence 0, then T rows of sequence 1, ... (a batch's static shape, as HF's static cache)."""
    root = BaselineModule(graph, weights, max_seq_len, torch.device(device), slots)
    g = fx.Graph()
    env = {n: g.placeholder(n[1:]) for n, _ in graph.inputs if n != "%slot"}
    env["%slot"] = None  # a row's slot is its group (attention ignores %slot)
    for node in graph.nodes:
        res = _call(g, root, node, env)
        if len(node.outs) == 1:
            env[node.outs[0]] = res
        else:
            env.update({o: g.call_function(operator.getitem, (res, i))
                        for i, o in enumerate(node.outs)})
    g.output(tuple(env[v] for _, v in graph.outputs))
    module = fx.GraphModule(root, g, class_name=f"Baseline_{graph.name}")
    module.reset = root.reset  # zero the caches between runs
    return module


def run_routed(module: fx.GraphModule, *args) -> tuple[tuple, list[int]]:
    """One call of a lowered module through fx's interpreter: its outputs, and how many distinct
    experts each MoE router chose (graph order), the experts the step must read."""
    chosen: list[int] = []

    class Counting(fx.Interpreter):
        def run_node(self, n: fx.Node):
            out = super().run_node(n)
            if n.target is BM.router:
                chosen.append(out[1].unique().numel())
            return out

    return Counting(module).run(*args), chosen
