"""CompiledEngine: the engine API on generated Triton kernels. One Program per graph (main,
MTP); prefill runs in sub-chunks of `prefill_chunk` rows; decode steps replay recordings per
row bucket. Inputs are checked and refused before anything launches (base Engine)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from hyperloom.codegen.compilation import compile_graph, write_dump
from hyperloom.config import CONFIG
from hyperloom.errors import InputError
from hyperloom.ir.engine import Engine
from hyperloom.ir.graph import Graph
from hyperloom.ir.ops import Op
from hyperloom.ir.state_decls import state_decls
from hyperloom.ir.state import StateStore
from hyperloom.ir.types import DType, S, StateDecl
from hyperloom.passes.kernel_plan import EMITTER_OF
from hyperloom.runtime.paged import PagedStateStore
from hyperloom.runtime.program import Program
from hyperloom.runtime.runner import Runner

# ops whose kernels read and write their token caches through block tables
PAGED_OPS = (Op.ROPE_ATTENTION, Op.DSA_INDEX, Op.MLA_ATTENTION)


class CompiledEngine(Engine):
    def __init__(self, graphs: dict[str, Graph], weights: dict[str, torch.Tensor],
                 vocab_size: int, *, device: str | torch.device, max_seq_len: int,
                 max_sequences: int, prefill_chunk: int, model: object = None):
        self.device = torch.device(device)
        if self.device.type == "cpu" and not CONFIG.interpret:
            raise InputError("the compiled backend runs on the CPU only through Triton's "
                             "interpreter: set TRITON_INTERPRET=1 before importing hyperloom")
        self.prefill_chunk = prefill_chunk
        max_rows = self.max_step_rows = max(prefill_chunk, max_sequences)
        comps = {n: compile_graph(g, max_rows) for n, g in graphs.items()}
        if CONFIG.dump_dir:
            for n, c in comps.items():
                write_dump(c, Path(CONFIG.dump_dir), "" if n == "main" else f"{n}_")
        decls = tuple(s for c in comps.values() for s in _storage(c.graph))
        state = _state_store(comps, decls, max_sequences, max_seq_len, self.device)
        super().__init__(graphs, state, vocab_size, max_seq_len, max_sequences, model)
        self.programs = {n: Program(c, weights, state, self.device) for n, c in comps.items()}
        self.runners = {n: Runner(p, max_sequences) for n, p in self.programs.items()}

    def _run(self, graph: str, inputs: dict[str, torch.Tensor],
             keep: int | None = None) -> dict[str, torch.Tensor]:
        prog, rows = self.programs[graph], len(inputs["ids"])
        for name, value in inputs.items():
            prog.inputs["%" + name][:rows].copy_(value)
        seq_rows = int(torch.unique(inputs["slot"], return_counts=True)[1].max())
        runner = self.runners[graph]
        if keep is not None and (keep > self.max_sequences + 1
                                 or (seq_rows == 1 and runner.bucket(rows) is not None)):
            keep = None  # a replayed decode shape, or more kept rows than a head buffer holds
            # (a decode row per sequence and a prompt's last): the arena's head on every row
        runner.run(rows, seq_rows, keep)
        return prog.outputs(rows, keep)


def _state_store(comps: dict, decls: tuple[StateDecl, ...], slots: int, capacity: int,
                 device: torch.device) -> StateStore:
    """Paged blocks for the token caches that kernels own (one row per position: not the DSA
    pooled keys, one row per pool); contiguous state for the rest, sized for whole blocks (the
    positions a slot's block table spans; the engine still refuses lengths past max_seq_len)."""
    bs = CONFIG.kv_block_size
    paged = {d.name for c in comps.values() for n in c.graph.nodes if n.op in PAGED_OPS
             for d in decls if d.name.startswith(n.state + ".") and d.type.shape[0] == S} \
        if bs else set()
    if not paged:
        return StateStore(decls, slots, capacity, device)
    capacity = -(-capacity // bs) * bs
    blocks = CONFIG.kv_blocks or slots * capacity // bs
    return PagedStateStore(decls, paged, slots, capacity, bs, blocks, device)


def _storage(graph: Graph) -> tuple[StateDecl, ...]:
    """State in its declared dtype, except the state of ops that still run on the interpreter,
    which stays fp32 (their reference semantics compute in fp32)."""
    types, out = graph.value_types(), []
    for node in graph.nodes:
        decls = state_decls(node.op, node.attrs, [types[a] for a in node.args])
        if node.op not in EMITTER_OF:
            decls = tuple(dataclasses.replace(d, type=d.type.with_dtype(DType.F32))
                          if d.type.dtype.is_float else d for d in decls)
        out += decls
    return tuple(out)
