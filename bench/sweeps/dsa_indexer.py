"""Sweep variants of the DSA indexer (`hyperloom.codegen.emitters.dsa`) at a decode step's size:
the bench's scenario (`hyperloom.bench.dsa.DSABench`: GLM-5.3-Flash's indexer, B sequences at
context C, the caches rotated out of L2). Each variant's kernels take the bench's place, its
step is checked as the bench checks it (the selection as sets, the attention against the
reference; `--no-check` for diagnostics that compute something else), and on a GPU the kernel
groups "indexer", "score" and "scored" (score + select) are timed as the bench times them, in
alternating rounds. A variant is "committed" or a file defining the module's API, most simply
through `variant.make(..., host=dsa)`. With `--mla` the variants are of the sparse MLA attention
(`emitters.mla`, `host=mla`; a variant's MAX_SPLITS sizes its scratch), and the groups "attend"
and "mla" (absorb + attend + merge) are timed. `--group NAME=MASK` times one more group of the
indexer's kernels (MASK: a 0/1 digit a kernel in `dsa.kernel_names` order, say cands=010010 for
score + cands) as a diagnostic of where a step's time goes.

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
from hyperloom.codegen.emitters import dsa, mla

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # variant files import `variant`
import common  # noqa: E402

TIMED = {dsa: ("indexer", "score", "scored"), mla: ("attend", "mla")}


def load_variant(path: str, tag: str, host=dsa):
    return common.load_variant(path, f"{host.__name__.rsplit('.', 1)[1]}_{tag}", host)


def sweep_one(mod, tag: str, bench: bench_dsa.DSABench, st, check: bool, host=dsa,
              extra: dict | None = None) -> dict:
    """{"tag", "near_ties"} and, on a GPU, each timed group's µs: the variant `mod` of the
    emitter `host` (dsa: the indexer, mla: the attention) in the bench's place; extra: more
    groups {name: the indexer's 0/1 mask}."""
    part = 0 if host is dsa else 1
    spec = (bench.index, bench.attn)[part]
    (ours,) = load_emitters(bench.device, (mod, spec, f"sweep_{tag}"))
    saved = bench.kernels, host.launch, st.work
    kernels = list(bench.kernels)
    kernels[part] = ours
    bench.kernels, host.launch = tuple(kernels), mod.launch
    if part and mod.MAX_SPLITS != mla.MAX_SPLITS:  # the variant's partials
        st.work = mod.scratch(spec, st.batch, bench.dtype, bench.device, mod.MAX_SPLITS)
    if part == 0:  # what the variant leaves unwritten cannot pass as an earlier run's values
        st.select.scores.fill_(float("nan"))
        st.index.fill_(-7)
    try:
        with torch.no_grad():
            bench._launch(st, bench.kernels, 0)
            ties = bench._check(f"variant {tag}", st)[1] if check else None
            res = {"tag": tag, "near_ties": ties}
            if bench.device.type == "cuda":
                groups = {g: bench_dsa.GROUPS[g] for g in TIMED[host]} | {
                    g: (m, (0,) * 4) for g, m in (extra or {}).items()}
                res |= {g: bench._time(st, m) * 1e6 for g, m in groups.items()}
                st.select.hist.zero_()  # a group without the write leaves its counts there
    finally:
        bench.kernels, host.launch, st.work = saved
    return res


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+", help='"committed" or variant files')
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--ctx", type=int)
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--no-check", action="store_true",
                    help="time variants without checking them (diagnostics)")
    ap.add_argument("--mla", action="store_true", help="variants of the MLA attention")
    ap.add_argument("--group", action="append", default=[], metavar="NAME=MASK",
                    help="also time the indexer kernels of MASK (0/1 each, kernel_names order)")
    args = ap.parse_args(argv)
    extra = {}
    for g in args.group:
        name, _, mask = g.partition("=")
        if args.mla or len(mask) != 6 or set(mask) - {"0", "1"}:
            ap.error(f"--group {g!r}: NAME=MASK with six 0/1 digits, indexer variants only")
        extra[name] = tuple(int(b) for b in mask)
    host = mla if args.mla else dsa
    gpu, dev, dtype = common.device()
    bench = bench_dsa.DSABench(hyperloom.build("llama", "tiny"), dev, dtype,
                               2e-2 if gpu else 1e-4, measure_limits(dev))
    st = bench.scenario(args.batch, args.ctx or (131072 if gpu else 100))[0]
    mods = [load_variant(p, f"v{i}", host) for i, p in enumerate(args.variants)]
    results = []
    for _ in range(args.rounds or (2 if gpu else 1)):
        for i, (path, mod) in enumerate(zip(args.variants, mods)):
            r = sweep_one(mod, f"v{i}", bench, st, not args.no_check, host, extra) | {
                "variant": path}
            times = ", ".join(f"{g} {r[g]:.1f}" for g in (*TIMED[host], *extra) if g in r)
            print(f"[v{i}] {path}: near ties {r['near_ties']}{' | ' + times if times else ''}",
                  flush=True)
            results.append(r)
    return results


if __name__ == "__main__":
    main()
