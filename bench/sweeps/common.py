"""What the sweeps in this folder share: loading a variant file in place of an emitter module,
timing a step's launches with CUDA events, and the device and activation dtype they run on."""

from __future__ import annotations

import importlib.util
import statistics
import sys
from pathlib import Path
from types import ModuleType

import torch

HERE = Path(__file__).resolve().parent
STEPS = 10  # timed steps a variant


def load_variant(path: str, tag: str, host: ModuleType) -> ModuleType:
    """The API of the variant file at `path` (the host module itself for "committed")."""
    if path == "committed":
        return host
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))  # variant files import `variant`
    spec = importlib.util.spec_from_file_location(f"sweep_variant_{tag}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def device() -> tuple[bool, torch.device, torch.dtype]:
    """(a GPU?, the device, the activations' dtype: bf16 on a GPU, fp32 in the interpreter)."""
    gpu = torch.cuda.is_available()
    return gpu, torch.device("cuda" if gpu else "cpu"), torch.bfloat16 if gpu else torch.float32


class _Timed:
    """A loaded kernel whose launches record CUDA events around themselves into `log`."""

    def __init__(self, kernel, log: list, name: str) -> None:
        self.kernel, self.log, self.name = kernel, log, name

    def __getitem__(self, grid: tuple):
        run = self.kernel[grid]

        def call(*a, **kw):
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            run(*a, **kw)
            end.record()
            self.log.append((self.name, start, end))
        return call


def timed_step(step, kernels, names, prefix: str, bare: str) -> dict:
    """{"total_us": the median µs of step(kernels), then each launch's median µs by its kernel
    name less `prefix` (`bare` for the kernel named `prefix` alone)}, CUDA events, STEPS each."""
    log: list = []
    timed = tuple(_Timed(k, log, n.replace(prefix, "") or bare) for k, n in zip(kernels, names))
    for _ in range(3):
        step(kernels)
    for _ in range(STEPS):
        step(timed)
    torch.cuda.synchronize()
    per: dict[str, list[float]] = {}
    for n, start, end in log:
        per.setdefault(n, []).append(start.elapsed_time(end) * 1e3)
    totals = []
    for _ in range(STEPS):
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        step(kernels)
        end.record()
        torch.cuda.synchronize()
        totals.append(start.elapsed_time(end) * 1e3)
    return {"total_us": statistics.median(totals)} | {
        n: statistics.median(v) for n, v in per.items()}


def graph_us(issue, launches: int, reps: int = 10) -> float:
    """Median µs a launch: issue() (`launches` launches) captured once in a CUDA graph, the
    graph replayed once to warm, then `reps` times between CUDA events (no host cost in it)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        issue()
    graph.replay()
    times = []
    for _ in range(reps):
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / launches)
    return statistics.median(times)


def sweep_rounds(paths: list[str], mods: list, cases: dict, one, key: str,
                 rounds: int) -> list[dict]:
    """one(variant module, tag, case name, case) for every variant on every case, `rounds` times in
    alternation (drift hits every variant alike); a line printed each, and the results with
    {"variant": its path, key: the case's name}."""
    results = []
    for _ in range(rounds):
        for i, (path, mod) in enumerate(zip(paths, mods)):
            for name, case in cases.items():
                r = one(mod, f"v{i}", name, case) | {"variant": path, key: name}
                us = f" {r['us']:.2f} us" if "us" in r else ""
                print(f"[v{i}] {path} {key} {name}: err {r['err']:.2e}{us}", flush=True)
                results.append(r)
    return results

