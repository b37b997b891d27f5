"""Timing and the hardware limits, measured in the benchmark's own process: a median over many
event-timed runs after warm-up; HBM bandwidth from a large device-to-device copy (bytes read +
written) and the bf16 matmul peak from a large torch.mm; and, on request, a torch.profiler
breakdown of a step by kernel."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.autograd import DeviceType


# off a GPU (the interpreter: timings mean nothing) a few runs show the code path works
CPU_WARMUP, CPU_REPS = 1, 3
# on a GPU each timed function first runs for this long, call by call, so that each is timed
# after the same load (ours used to be timed right after its check, the baselines after long
# runs); on an H100 llama decode b1 / b16 timed 0.3 / 0.7% faster so (BENCHMARKS, twentieth)
WARM_S = 0.25


def median_seconds(fn: Callable[[], object], device: torch.device, warmup: int = 3,
                   reps: int = 20) -> float:
    if device.type != "cuda":
        return _host_median(fn, min(warmup, CPU_WARMUP), min(reps, CPU_REPS))
    for _ in range(warmup):
        fn()
    _busy(fn, device, WARM_S)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(reps)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events) / 1e3


def _host_median(fn: Callable[[], object], warmup: int, reps: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _busy(fn: Callable[[], object], device: torch.device, seconds: float) -> None:
    """Runs fn until `seconds` have passed, each call waited for (the host never queues more
    than one call ahead of the card)."""
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        torch.cuda.synchronize(device)


def host_seconds(fn: Callable[[], object], device: torch.device, reps: int = 20) -> float:
    """The host's time to issue one call of fn (a step of Python launches), the device not
    waited for: when it is near the device's own time the step is host-bound."""
    reps = reps if device.type == "cuda" else min(reps, CPU_REPS)
    fn()
    _sync(device)
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    took = (time.perf_counter() - t) / reps
    _sync(device)
    return took


@dataclass(frozen=True)
class Limits:
    bandwidth: float  # bytes / s, read + written
    matmul_peak: float  # FLOP / s (bf16 on a GPU, fp32 on the CPU)

    def as_dict(self) -> dict:
        return {"hbm_bytes_per_s": self.bandwidth, "matmul_flop_per_s": self.matmul_peak}


def measure_limits(device: torch.device) -> Limits:
    gpu = device.type == "cuda"
    n = (2 << 30) if gpu else (64 << 20)
    src = torch.empty(n, dtype=torch.uint8, device=device).random_(0, 255)
    dst = torch.empty_like(src)
    bw = 2 * n / median_seconds(lambda: dst.copy_(src), device, reps=10)
    size, dt = (8192, torch.bfloat16) if gpu else (512, torch.float32)
    a = torch.randn(size, size, device=device, dtype=dt)
    b = torch.randn(size, size, device=device, dtype=dt)
    peak = 2 * size ** 3 / median_seconds(lambda: torch.mm(a, b), device, reps=10)
    return Limits(bw, peak)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def profile_top(fn: Callable[[], object], device: torch.device, steps: int,
                top: int = 30) -> list[dict]:
    """The kernels (CPU ops off a GPU) that take the most time over `steps` runs of fn under
    torch.profiler, per step: name, calls, microseconds and share of the profiled step."""
    from torch.profiler import ProfilerActivity, profile

    gpu = device.type == "cuda"
    fn()  # warm: no first-run work in the profile
    _sync(device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    with profile(activities=acts) as prof:
        t = time.perf_counter()
        for _ in range(steps):
            fn()
        _sync(device)
        wall = time.perf_counter() - t
    return top_ops(prof.key_averages(), gpu, steps, wall * 1e6 / steps)[:top]


def add_weights(profile: list[dict], weights: dict[str, int]) -> list[dict]:
    """The profile's rows with `weight_bytes`, a step's weight bytes that kernel reads
    (`work.kernel_weights`), where it reads any."""
    return [row | ({"weight_bytes": weights[row["name"]]} if row["name"] in weights else {})
            for row in profile]


def top_ops(averages, gpu: bool, steps: int, step_us: float) -> list[dict]:
    """Rows of profiler averages by time, largest first: device time of the device's events
    (kernels, copies) on a GPU, else self CPU time of the CPU ops (nesting counted once)."""
    if gpu:
        rows = [(e.key, e.count, e.device_time_total) for e in averages
                if e.device_type != DeviceType.CPU]
    else:
        rows = [(e.key, e.count, e.self_cpu_time_total) for e in averages]
    rows.sort(key=lambda r: -r[2])
    return [{"name": name, "calls_per_step": count / steps, "us_per_step": us / steps,
             "share": us / steps / step_us} for name, count, us in rows if us > 0]
