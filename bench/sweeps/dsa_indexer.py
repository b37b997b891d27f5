"""Sweep variants of the DSA indexer (`hyperloom.codegen.emitters.dsa`) at a decode step's size:
the bench's scenario (`hyperloom.bench.dsa.DSABench`: GLM-5.3-Flash's indexer, B sequences at
context C, the caches rotated out of L2). Each variant's kernels take the bench's place, its
step is checked as the bench checks it (the selection as sets, the attention against the
reference; `--no-check` for diagnostics that compute something else), and on a GPU the kernel
groups "indexer", "score" and "scored" (score + select) are timed as the bench times them, in
alternating rounds. A variant is "committed" or a file defining the module's API, most simply
through `variant.make(..., host=dsa)`.

    python bench/sweeps/dsa_indexer.py --batch 16 --ctx 131072 committed my_variant.py

On a CPU it runs GLM tiny's indexer at a small context through the interpreter: checks only."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

import hyperloom
from hyperloom.bench import dsa as bench_dsa
from hyperloom.bench.kernels import load_emitters
from hyperloom.bench.measure import measure_limits
from hyperloom.codegen.emitters import dsa

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # variant files import `variant`
import common  # noqa: E402

TIMED = ("indexer", "score", "scored")


def load_variant(path: str, tag: str):
    return common.load_variant(path, f"dsa_{tag}", dsa)


def sweep_one(mod, tag: str, bench: bench_dsa.DSABench, st, check: bool) -> dict:
    """{"tag", "near_ties"} and, on a GPU, each timed group's µs."""
    (ours,) = load_emitters(bench.device, (mod, bench.index, f"sweep_{tag}"))
    saved = bench.kernels, dsa.launch
    bench.kernels, dsa.launch = (ours, saved[0][1]), mod.launch
    try:
        with torch.no_grad():
            bench._launch(st, bench.kernels, 0)
            ties = bench._check(f"variant {tag}", st)[1] if check else None
            res = {"tag": tag, "near_ties": ties}
            if bench.device.type == "cuda":
                res |= {g: bench._time(st, bench_dsa.GROUPS[g]) * 1e6 for g in TIMED}
    finally:
        bench.kernels, dsa.launch = saved
    return res


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+", help='"committed" or variant files')
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--ctx", type=int)
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--no-check", action="store_true",
                    help="time variants without checking them (diagnostics)")
    args = ap.parse_args(argv)
    gpu, dev, dtype = common.device()
    bench = bench_dsa.DSABench(hyperloom.build("llama", "tiny"), dev, dtype,
                               2e-2 if gpu else 1e-4, measure_limits(dev))
    st = bench.scenario(args.batch, args.ctx or (131072 if gpu else 100))[0]
    mods = [load_variant(p, f"v{i}") for i, p in enumerate(args.variants)]
    results = []
    for _ in range(args.rounds or (2 if gpu else 1)):
        for i, (path, mod) in enumerate(zip(args.variants, mods)):
            r = sweep_one(mod, f"v{i}", bench, st, not args.no_check) | {"variant": path}
            times = ", ".join(f"{g} {r[g]:.1f}" for g in TIMED if g in r)
            print(f"[v{i}] {path}: near ties {r['near_ties']}{' | ' + times if times else ''}",
                  flush=True)
            results.append(r)
    return results


if __name__ == "__main__":
    main()
