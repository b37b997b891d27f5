"""A Program: one graph compiled for one device. It takes a Compilation (the PIPELINE's graph,
the arena and kernel plans, the kernel sources), binds weights, allocates the arena and the
static row inputs, and turns the kernel plan into a launch list. `record(rows, seq_rows)` fixes
a step's launches (replayed as is on the CPU, captured into a CUDA graph on the GPU); `step`
runs a step of Python launches (prefill), replaying a shape's recorded kernels where
CONFIG.eager_replay allows."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from hyperloom.codegen.cache import launching, recording
from hyperloom.config import CONFIG
from hyperloom.ir.derive import bind
from hyperloom.ir.graph import Graph
from hyperloom.ir.state import StateStore
from hyperloom.codegen.compilation import Compilation
from hyperloom.passes.arena import ArenaPlan
from hyperloom.passes.kernel_plan import KernelPlan
from hyperloom.runtime.launchers import BUILDERS
from hyperloom.runtime.operands import Operands


class Program:
    def __init__(self, comp: Compilation, weights: dict[str, torch.Tensor], state: StateStore,
                 device: torch.device):
        self.compilation, self.graph = comp, comp.graph
        self.max_rows, self.device = comp.arena.max_rows, device
        self.arena: ArenaPlan = comp.arena
        self.plan: KernelPlan = comp.plan
        self.buffer = torch.empty(self.arena.total_bytes, dtype=torch.uint8, device=device)
        groups = self._views()
        self.inputs = {n: torch.zeros((self.max_rows, *[int(s) for s in t.shape[1:]]),
                                      dtype=t.dtype.torch, device=device)
                       for n, t in self.graph.inputs}
        self.operands = Operands(groups | self.inputs, _bound(self.graph, weights, device),
                                 self._groups, state, self.graph.value_types(),
                                 sources=comp.sources)
        self.launches = [BUILDERS[k.emitter](k, self.operands, device) for k in self.plan.kernels]
        self.capturable = not self.plan.fallbacks
        self._head_at, self._heads = _head_at(self.plan, self.graph), None
        self._replays: dict[tuple[int, ...], list | None] = {}  # eager replays by shape (and keep)

    def _views(self) -> dict[str, torch.Tensor]:
        from hyperloom.ir.types import DType

        buffers, views, self._groups = {}, {}, {}
        for b in self.arena.buffers:
            dt = DType.of(b.dtype).torch
            raw = self.buffer[b.offset: b.offset + b.nbytes].view(dt)
            buffers[b.name] = raw.view(self.max_rows, b.row_elems)
        for value, p in self.arena.values.items():
            buf = buffers[p.buffer]
            width = 1
            for s in p.shape:
                width *= s
            views[value] = buf[:, p.col: p.col + width].view(self.max_rows, *p.shape) \
                if width == buf.shape[1] else buf[:, p.col: p.col + width]
            if buf.shape[1] != width:
                self._groups[value] = buf  # a column slice of a multi-split result
        return views

    def record(self, rows: int, seq_rows: int,
               keep: int | None = None) -> list[Callable[[], None]]:
        """A step's launches. With `keep`, the logits' kernel runs on the step's last `keep`
        rows only (none with 0), copied ahead of it into rows of its own (`_head`)."""
        if keep is None or self._head_at is None:
            return [lambda f=f: f(rows, seq_rows) for f in self.launches]
        out = [lambda f=f: f(rows, seq_rows) for i, f in enumerate(self.launches)
               if i != self._head_at]
        if keep:
            head = self._head(keep)
            out.insert(self._head_at, lambda: head.launch(keep, 1))
            out.insert(self._head_at, lambda: head.x[:keep].copy_(head.src[rows - keep: rows]))
        return out

    def _head(self, keep: int) -> _Head:
        """The logits' kernel on buffers of its own: input rows copied in, logits rows out
        (sized for the most rows kept so far)."""
        if self._heads is None or self._heads.x.shape[0] < keep:
            entry = self.plan.kernels[self._head_at]
            src = self.operands[entry.node.args[0]]
            x = torch.empty((keep, *src.shape[1:]), dtype=src.dtype, device=self.device)
            logits = self.operands[entry.node.outs[0]]
            out = torch.empty((keep, *logits.shape[1:]), dtype=logits.dtype, device=self.device)
            o = self.operands
            bound = Operands(o.values | {entry.node.args[0]: x, entry.node.outs[0]: out},
                             o.weights, {k: v for k, v in o.groups.items()
                                         if k not in entry.node.outs}, o.state, o.types,
                             o.scratch, o.sources)
            # its own rows: not the stream mean the GEMM before stores for the step's rows
            alone = dataclasses.replace(entry, meaned=False)
            self._heads = _Head(src, x, out, BUILDERS[entry.emitter](alone, bound, self.device))
        return self._heads

    def step(self, rows: int, seq_rows: int, keep: int | None = None) -> None:
        """One step of Python launches. With CONFIG.eager_replay on a GPU, a shape's first step
        records its launches (`cache.recording`) and later steps of that shape replay them,
        unless the first ran what a replay would skip (a torch op that is not a view, a kernel
        without a compiled form): then every step launches as usual."""
        key = (rows, seq_rows) + (() if keep is None else (keep,))
        replay = replayable(self.device)
        if replay and key not in self._replays:
            self._replays[key] = recorded(lambda: [f() for f in self.record(*key)])
            return
        for f in (self._replays.get(key) if replay else None) or self.record(*key):
            f()

    def outputs(self, rows: int, keep: int | None = None) -> dict[str, torch.Tensor]:
        """The step's results; with `keep` (and a head kernel), the logits of its last `keep`
        rows, from the head's own buffer."""
        out = {}
        for label, v in self.graph.outputs:
            value = self.operands[v][:rows]
            if label == "logits" and keep is not None and self._head_at is not None:
                value = self._head(keep).out[:keep] if keep else value[:0]
            out[label] = value.clone()
        return out


@dataclass(frozen=True)
class _Head:
    src: torch.Tensor  # the logits kernel's input rows in the arena
    x: torch.Tensor  # the kept rows, copied
    out: torch.Tensor  # their logits
    launch: Callable[[int, int], None]


def _head_at(plan: KernelPlan, graph: Graph) -> int | None:
    """The plan position of the GEMM that writes the graph's logits, if one does."""
    logits = dict(graph.outputs).get("logits")
    return next((i for i, k in enumerate(plan.kernels)
                 if k.emitter == "matmul" and k.node.outs[0] == logits), None)


def replayable(device: torch.device) -> bool:
    """Whether steps of Python launches on `device` replay their recorded kernels."""
    return CONFIG.eager_replay and device.type == "cuda" and not CONFIG.interpret


def recorded(run: Callable[[], object]) -> list[Callable[[], None]] | None:
    """Runs `run` (Python launches) once, recording them: the thunks that replay its kernels,
    or None where a replay would skip part of it (a torch op that is not a view, a kernel
    without a compiled form)."""
    with recording() as rec, _TorchOps() as ops:
        run()
    return None if ops.seen or None in rec else rec


class _TorchOps(TorchDispatchMode):
    """Notes whether any torch op other than a view ran inside it (a replay would skip it)."""

    seen = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen = self.seen or not (func.is_view or launching())
        return func(*args, **(kwargs or {}))


def _bound(graph: Graph, weights: dict[str, torch.Tensor], device) -> dict[str, torch.Tensor]:
    """Parameters in their declared dtypes, then the derived weights, all on `device`; only
    what a node reads stays (a parameter read only through derived weights is let go)."""
    params = {p.name: weights[p.name].to(device, p.type.dtype.torch) for p in graph.params}
    read = {a[1:] for n in graph.nodes for a in n.args if a.startswith("@")}
    return {k: v.contiguous() for k, v in bind(graph, params).items() if k in read}
