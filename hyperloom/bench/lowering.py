"""The baseline: an IR graph lowered to a torch.fx GraphModule of plain torch ops, for a fixed
batch of sequences stepping together, with static KV caches (module buffers, one slot per
sequence). Built from the same spec and weights as the engine, it runs eager or under
torch.compile, as a user would run their own PyTorch model."""

from __future__ import annotations

import operator

import torch
import torch.fx as fx

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
        for name, buf in self.named_buffers():
            if name.endswith(("__k", "__v")):
                buf.zero_()


def _call(g: fx.Graph, root: BaselineModule, node: Node, env: dict) -> object:
    at, dt = node.attrs, node.types[0].dtype.torch
    a = [g.get_attr(_safe(x[1:])) if x.startswith("@") else env[x] for x in node.args]
    op = node.op
    if op is Op.EMBEDDING:
        return g.call_function(B.embedding, (a[0], a[1]), {"dtype": dt})
    if op is Op.CAST:
        return g.call_function(B.cast, (a[0],), {"dtype": dt})
    if op is Op.RMSNORM:
        return g.call_function(B.rmsnorm, (a[0], a[1]), {"eps": at.eps, "dtype": dt})
    if op is Op.LINEAR:
        return g.call_function(B.linear, (a[0], a[1]), {"dtype": dt})
    if op is Op.ROPE:
        cos, sin = (g.get_attr(n) for n in root.rope_tables(node))
        return g.call_function(B.rope, (a[0], a[1], cos, sin),
                               {"head_dim": at.head_dim, "dtype": dt})
    if op is Op.ATTENTION:
        kc, vc = g.get_attr(_safe(at.state + ".k")), g.get_attr(_safe(at.state + ".v"))
        return g.call_function(B.attention, (a[0], a[1], a[2], a[4], kc, vc), {
            "heads": at.heads, "kv_heads": at.kv_heads, "head_dim": at.head_dim,
            "scale": at.scale, "dtype": dt})
    if op is Op.SWIGLU:
        return g.call_function(B.swiglu, (a[0], a[1]), {"limit": at.limit, "dtype": dt})
    if op in (Op.ADD, Op.RESIDUAL_ADD):
        return g.call_function(B.add, (a[0], a[1]), {"dtype": dt})
    if op is Op.HC_EXPAND:
        return g.call_function(B.hc_expand, (a[0],), {"n": at.n, "dtype": dt})
    if op is Op.HC_PRE:
        return g.call_function(B.hc_pre, tuple(a), {"n": at.n, "norm_eps": at.norm_eps,
                                                    "hc_eps": at.hc_eps, "iters": at.iters})
    simple = {Op.HC_POST: B.hc_post, Op.HC_HEAD_MEAN: B.hc_head_mean, Op.LM_HEAD: B.lm_head}
    if op in simple:
        return g.call_function(simple[op], tuple(a))
    raise CodegenError(f"the torch baseline has no lowering for {op.value} (node {node.outs[0]}); "
                       f"lowered: {', '.join(o.value for o in LOWERED)}")


LOWERED = (Op.EMBEDDING, Op.CAST, Op.RMSNORM, Op.LINEAR, Op.ROPE, Op.ATTENTION, Op.SWIGLU,
           Op.ADD, Op.RESIDUAL_ADD, Op.HC_EXPAND, Op.HC_PRE, Op.HC_POST, Op.HC_HEAD_MEAN,
           Op.LM_HEAD)


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
