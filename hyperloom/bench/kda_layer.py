"""The kda-layer scenario's step (`bench.kda.KDABench.layer`): one decode step of a whole KDA
site through the engine's kernels: its fp32 streams in, hc_pre, the input norm, the model's own
KDA block (projections, conv, gate, recurrence, gated norm, o_proj), hc_post, the streams out,
compiled at the model's width from random weights and random per-sequence states. Work is the
site's weights once plus each sequence's states read and written and its streams in and out."""

from __future__ import annotations

import torch

from hyperloom.bench.scenarios import agree
from hyperloom.codegen.compilation import compile_graph
from hyperloom.errors import InputError
from hyperloom.ir.builder import GraphBuilder, Residual
from hyperloom.ir.graph import Graph
from hyperloom.ir.interpreter import run_graph
from hyperloom.ir.state import StateStore
from hyperloom.ir.types import DType, T, TensorType
from hyperloom.models import Model, blocks
from hyperloom.models.random_weights import random_weights
from hyperloom.runtime.program import Program

POS = 100  # the position of each sequence's row (its conv window is full)


def layer_graph(model: Model, dtype: DType) -> Graph:
    """One KDA site alone with the model's widths (GLM-5.3's layer 0 mixer)."""
    c = model.config
    if not hasattr(c, "linear_num_heads") or c.hc_mult < 2:
        raise InputError(f"kda-layer: {model.family} has no mHC KDA layer (glm5next has)")
    b = GraphBuilder(f"kda_site_{c.linear_num_heads}x{c.linear_head_dim}", dtype)
    rows = b.rows()
    res = Residual(b, c.hc_mult, c.rms_norm_eps, c.hc_eps, c.hc_sinkhorn_iters)
    res.stream = b.input("x", TensorType.make("f32", T, c.hc_mult, c.hidden_size))
    res.site("layer.hc_attn", "layer.input_layernorm.weight",
             lambda x: blocks.kda_block(b, "layer.self_attn.", x, rows, c.linear_num_heads,
                                        c.linear_head_dim, c.linear_conv_kernel_dim,
                                        c.linear_lower_bound, c.rms_norm_eps))
    return b.finish(streams=res.stream)


def layer_bytes(graph: Graph, batch: int) -> float:
    """The site's weights once, each sequence's states read and written once, its streams read
    and written once (the row inputs are a few bytes)."""
    weights = sum(p.type.nbytes() for p in graph.params)
    states = sum(d.type.nbytes() for d in graph.states())
    x = dict(graph.inputs)["%x"]
    streams = int(x.shape[1]) * int(x.shape[2]) * x.dtype.torch.itemsize
    return float(weights + batch * (2 * states + 2 * streams))


class LayerStep:
    """The compiled site for `batch` sequences (slots 0..batch-1, one row each at POS), its
    inputs and states random, and the states it started from (for the check)."""

    def __init__(self, model: Model, dtype: DType, batch: int, device: torch.device,
                 gen: torch.Generator) -> None:
        self.graph, self.batch, self.device = layer_graph(model, dtype), batch, device
        self.weights = random_weights(Model("kda-layer", None, self.graph, None, 0), seed=1)
        self.prog = Program(compile_graph(self.graph, batch), self.weights,
                            StateStore(self.graph.states(), batch, 1, device), device)
        states = self.prog.operands.state.tensors
        for t in states.values():
            t.copy_(torch.randn(t.shape, generator=gen) * 0.1)
        self.start = {k: t.clone() for k, t in states.items()}
        x = torch.randn((batch, *self.prog.inputs["%x"].shape[1:]), generator=gen)
        self.inputs = {"x": x, "ids": torch.zeros(batch, dtype=torch.int64),
                       "pos": torch.full((batch,), POS), "slot": torch.arange(batch)}
        for k, v in self.inputs.items():
            self.prog.inputs["%" + k][:batch].copy_(v)
        self.launches = self.prog.record(batch, 1)

    def run(self) -> None:
        for f in self.launches:
            f()

    def repeat(self, steps: int) -> None:
        """`steps` steps in a row, each from the states the one before it left."""
        for _ in range(steps):
            self.run()

    def check(self, tol: float, name: str) -> float:
        """After one run: the streams and every state against run_graph's (fp32) from the
        starting states, sequence by sequence; the worst relative error."""
        store = StateStore(self.graph.states(), self.batch, 1, self.device, torch.float32)
        for k, t in self.start.items():
            store[k].copy_(t)
        ref_w = {k: v.to(self.device, torch.float32 if v.is_floating_point() else v.dtype)
                 for k, v in self.weights.items()}
        dev = {k: v.to(self.device) for k, v in self.inputs.items()}
        want = run_graph(self.graph, ref_w, dev, store, torch.float32)["streams"]
        got = self.prog.outputs(self.batch)["streams"]
        err = agree(got.float(), want, tol, f"{name}: streams")
        for k, t in self.prog.operands.state.tensors.items():
            err = max(err, agree(t[:self.batch].float(), store[k], tol, f"{name}: state {k}"))
        return err
