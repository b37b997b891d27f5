"""A Program: one graph compiled for one device. It takes a Compilation (the PIPELINE's graph,
the arena and kernel plans, the kernel sources), binds weights, allocates the arena and the
static row inputs, and turns the kernel plan into a launch list. `record(rows, seq_rows)` fixes
a step's launches (replayed as is on the CPU, captured into a CUDA graph on the GPU); `step`
runs a step of Python launches (prefill), replaying a shape's recorded kernels where
CONFIG.eager_replay allows."""

from __future__ import annotations

from collections.abc import Callable

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
from hyperloom.runtime.launchers import BUILDERS, Operands


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
        self._replays: dict[tuple[int, int], list | None] = {}  # eager replays by shape

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

    def record(self, rows: int, seq_rows: int) -> list[Callable[[], None]]:
        return [lambda f=f: f(rows, seq_rows) for f in self.launches]

    def step(self, rows: int, seq_rows: int) -> None:
        """One step of Python launches. With CONFIG.eager_replay on a GPU, a shape's first step
        records its launches (`cache.recording`) and later steps of that shape replay them,
        unless the first ran what a replay would skip (a torch op that is not a view, a kernel
        without a compiled form): then every step launches as usual."""
        key, replay = (rows, seq_rows), replayable(self.device)
        if replay and key not in self._replays:
            self._replays[key] = recorded(lambda: [f() for f in self.record(rows, seq_rows)])
            return
        for f in (self._replays.get(key) if replay else None) or self.record(rows, seq_rows):
            f()

    def outputs(self, rows: int) -> dict[str, torch.Tensor]:
        return {label: self.operands[v][:rows].clone() for label, v in self.graph.outputs}


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
