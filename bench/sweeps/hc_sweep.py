"""Where hc_pre's sweep (`hc_sweep_splits`) spends its time at llama bench's site (n 4, D 4096,
4096 rows): the committed three launches, the sweep, and the sweep with its finishing program
cut down (no y rows; no gates and no y: the K splits and tickets alone), at several splits and
warps. Each variant is checked against the three-launch result first (when it writes y), then
timed as a CUDA graph of 10 launches (median of 10 replays).

    python bench/sweeps/hc_sweep.py"""

from __future__ import annotations

import math

import torch

from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters import hc_pre
from hyperloom.config import overrides

SPEC = hc_pre.HCPreSpec(4, 4096, 1e-6, 1e-6, 20, 1e-5)
ROWS, LAUNCHES, REPS = 4096, 10, 10


def operands(dev):
    g = torch.Generator().manual_seed(0)
    n, d, j = SPEC.n, SPEC.d, (2 + SPEC.n) * SPEC.n
    ops = {"x": torch.randn((ROWS, n, d), generator=g).to(dev),
           "fn": (torch.randn((j, n * d), generator=g) / math.sqrt(n * d)).to(dev, torch.bfloat16),
           "base": (torch.randn(j, generator=g) * 0.5).to(dev),
           "scale": (torch.rand(3, generator=g) + 0.5).to(dev),
           "y": torch.empty((ROWS, d), dtype=torch.bfloat16, device=dev),
           "post": torch.empty((ROWS, n), device=dev),
           "comb": torch.empty((ROWS, n, n), device=dev)}
    ops["part"], ops["count"] = hc_pre.scratch(SPEC, ROWS, dev)
    return ops


def variant(cut: str, warps: int):
    """Kernels of the sweep with its finish cut: "" (whole), "y" (no y rows), "all"."""
    call = hc_pre._helper_call

    def cut_call(helper, at, spec, sweep, indent):
        if sweep and (cut == "all" or (cut == "y" and helper == "_apply_row")):
            return " " * indent + "pass"
        return call(helper, at, spec, sweep, indent)
    hc_pre._helper_call, hc_pre.SWEEP_WARPS = cut_call, warps
    try:
        src = hc_pre.source("hc", SPEC, header=f"sweep cut {cut} warps {warps}")
    finally:
        hc_pre._helper_call = call
    return tuple(load(src, k, "cuda") for k in hc_pre.kernel_names("hc"))


def time_us(fn) -> float:
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(LAUNCHES):
            fn()
    times = []
    for _ in range(REPS):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        graph.replay()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) * 1e3 / LAUNCHES)
    return sorted(times)[len(times) // 2]


def main() -> None:
    ops = operands("cuda")
    want = None
    for splits, cut, warps in [(0, "", 8), (8, "", 8), (8, "", 4), (8, "y", 8), (8, "all", 8),
                               (4, "all", 8), (16, "all", 8), (8, "all", 4), (32, "", 8)]:
        with overrides(hc_sweep_splits=splits):
            kernels = variant(cut, warps)
            ops["part"], ops["count"] = hc_pre.scratch(SPEC, ROWS, "cuda")  # the splits' size
            ops["y"].fill_(float("nan"))

            def run():
                hc_pre.launch(kernels, SPEC, rows=ROWS, fused=False, **ops)
            run()
            torch.cuda.synchronize()
            err = float("nan")
            if want is None:
                want = ops["y"].float().clone()
            elif not cut:
                err = float(((ops["y"].float() - want).norm() / want.norm()))
            print(f"splits {splits:3d} cut {cut or '-':4s} warps {warps}: {time_us(run):7.1f} us"
                  f"  rel err vs three launches {err:.2e}", flush=True)


if __name__ == "__main__":
    main()
