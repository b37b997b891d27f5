"""Sweep variants of the chunked KDA prefill (`hyperloom.codegen.emitters.kda_chunk`): each
variant's output and final state are checked against the fp32 reference of `hyperloom.bench.kda`
on the same inputs, then (on a GPU) each of its six launches is timed with CUDA events (median of
10 steps) and the whole step too, in alternating rounds. A variant is "committed" (the package
module) or a file defining the module's API, most simply through `variant.make`.

    python bench/sweeps/kda_chunk.py 8192 committed bench/sweeps/my_variant.py

On a CPU it runs Triton's interpreter at a small size (--heads 2 --head-dim 16, fp32) and only
checks: a dry run of the variants before a device call."""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
from pathlib import Path

import torch

from hyperloom.bench import kda as kb
from hyperloom.bench.kernels import load_emitters
from hyperloom.bench.scenarios import rel_err
from hyperloom.codegen.emitters import kda_chunk
from hyperloom.codegen.emitters.kda import KDASpec

HERE = Path(__file__).resolve().parent
STEPS = 10


def load_variant(path: str, tag: str):
    """The kda_chunk API of a variant file (or the package module for "committed")."""
    if path == "committed":
        return kda_chunk
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))  # variant files import `variant`
    spec = importlib.util.spec_from_file_location(f"kda_chunk_variant_{tag}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def sweep_one(mod, tag: str, x, want, heads: int, head_dim: int) -> dict:
    """{"tag", "out_err", "state_err"} and, on a GPU, "total_us" and each launch's median µs."""
    spec = mod.KDAChunkSpec(heads, head_dim)
    name = f"sweep_{tag}"
    names = mod.kernel_names(name)
    (kernels,) = load_emitters(x.q.device, (mod, spec, name))
    work = mod.scratch(spec, x.rows, x.batch, x.q.device, x.q.dtype)
    state, out = x.state.clone(), torch.empty_like(x.q)

    def step(ks) -> None:
        state.copy_(x.state)
        mod.launch(ks, spec, q=x.q, k=x.k, v=x.v, g=x.g, b=x.b, slot=x.slot, state=state,
                   out=out, rows=x.rows, work=work)

    step(kernels)
    res = {"tag": tag, "out_err": rel_err(out, want[0]), "state_err": rel_err(state, want[1])}
    if x.q.device.type != "cuda":
        return res
    log: list = []
    timed = tuple(_Timed(k, log, n.replace(name, "") or "_walk") for k, n in zip(kernels, names))
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
    return res | {"total_us": statistics.median(totals)} | {
        n: statistics.median(v) for n, v in per.items()}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tokens", type=int)
    ap.add_argument("variants", nargs="+", help='"committed" or variant files')
    ap.add_argument("--heads", type=int)
    ap.add_argument("--head-dim", type=int)
    ap.add_argument("--rounds", type=int)
    args = ap.parse_args(argv)
    gpu = torch.cuda.is_available()
    dev = torch.device("cuda" if gpu else "cpu")
    heads, head_dim = args.heads or (64 if gpu else 2), args.head_dim or (128 if gpu else 16)
    kspec = KDASpec(heads, head_dim)
    x = kb.make_inputs(kspec, 1, args.tokens, dev, torch.bfloat16 if gpu else torch.float32,
                       torch.Generator().manual_seed(0))
    want = kb.reference(kspec, x)
    mods = [load_variant(p, f"v{i}") for i, p in enumerate(args.variants)]
    results = []
    for _ in range(args.rounds or (2 if gpu else 1)):
        for i, (path, mod) in enumerate(zip(args.variants, mods)):
            r = sweep_one(mod, f"v{i}", x, want, heads, head_dim)
            times = ", ".join(f"{k} {v:.1f}" for k, v in r.items() if k.startswith("_"))
            total = f" total {r['total_us']:.1f} us | {times}" if "total_us" in r else ""
            print(f"[v{i}] {path}: out err {r['out_err']:.3e} state err {r['state_err']:.3e}"
                  f"{total}", flush=True)
            results.append(r | {"variant": path})
    return results


if __name__ == "__main__":
    main()
