"""Sweep variants of the routed experts (`hyperloom.codegen.emitters.moe_experts`) at a prefill's
size: the bench's random router, weights and rows (`hyperloom.bench.moe.MoEBench`), the rows
routed once by the committed router; each variant's output is checked against the committed
kernels' and the torch loop's, then (on a GPU) each of its five launches is timed with CUDA
events (median of 10 steps) and the whole step too, in alternating rounds. A variant is
"committed" or a file defining the module's API, most simply through
`variant.make(..., host=moe_experts)`.

    python bench/sweeps/moe_experts.py 4096 committed my_variant.py

On a CPU it runs the interpreter on a tiny layer (8 experts) and only checks: a dry run of the
variants before a device call."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

import hyperloom
from hyperloom.bench.kernels import load_emitters
from hyperloom.bench.moe import MoEBench
from hyperloom.bench.scenarios import rel_err
from hyperloom.codegen.emitters import moe_experts, moe_router

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # variant files import `variant`
import common  # noqa: E402


def load_variant(path: str, tag: str, host=moe_experts):
    """The host's API of a variant file (or the package module for "committed")."""
    return common.load_variant(path, f"moe_{tag}", host)


def routed(bench: MoEBench, rows: int):
    """(x, weights, ids, torch loop's output) for `rows` random rows routed by the committed
    router."""
    r = bench.router
    x = bench._randn(rows, r.hidden, scale=1.0)
    weights = torch.empty((rows, r.top_k), device=bench.device)
    ids = torch.empty((rows, r.top_k), dtype=torch.int32, device=bench.device)
    (kr,) = load_emitters(bench.device, (moe_router, r, "sweep_moe_router"))
    moe_router.launch(kr, r, x=x, w=bench.w_ours, bias=bench.bias, weights=weights, ids=ids,
                      part=moe_router.scratch(r, rows, bench.device), rows=rows)
    return x, weights, ids, bench._baseline(x)


def sweep_one(mod, tag: str, bench: MoEBench, inputs, want: torch.Tensor | None) -> dict:
    """{"tag", "err" (against the torch loop), "out"} and, on a GPU, "total_us" and each
    launch's median µs."""
    x, weights, ids, loop = inputs
    spec, name = bench.experts, f"sweep_{tag}"
    (kernels,) = load_emitters(x.device, (mod, spec, name))
    work = mod.scratch(spec, x.shape[0], x.dtype, x.device)
    out = torch.empty_like(x)
    wg, wu, wd = bench.packed

    def step(ks) -> None:
        mod.launch(ks, spec, x=x, weights=weights, ids=ids, wg=wg, wu=wu, wd=wd, out=out,
                   rows=x.shape[0], work=work)

    step(kernels)
    res = {"tag": tag, "err": rel_err(out.float(), loop.float()), "out": out.clone(),
           "vs_committed": 0.0 if want is None else rel_err(out.float(), want.float())}
    if x.device.type != "cuda":
        return res
    return res | common.timed_step(step, kernels, mod.kernel_names(name), name, "_combine")


def sweep_router(mod, tag: str, bench: MoEBench, inputs, want) -> dict:
    """The router's launches alone: {"tag", "err" (weights against the committed router's),
    "ids_equal"} and, on a GPU, the timings."""
    x, weights0, ids0, _ = inputs
    r, name, rows = bench.router, f"sweep_router_{tag}", x.shape[0]
    (kernels,) = load_emitters(x.device, (mod, r, name))
    weights, ids = torch.empty_like(weights0), torch.empty_like(ids0)
    part = torch.empty(16 * rows * r.experts, device=x.device)  # room for 16 H splits

    def step(ks) -> None:
        mod.launch(ks, r, x=x, w=bench.w_ours, bias=bench.bias, weights=weights, ids=ids,
                   part=part, rows=rows)

    step(kernels)
    res = {"tag": tag, "err": rel_err(weights, weights0), "out": None,
           "vs_committed": float((ids != ids0).sum())}
    if x.device.type != "cuda":
        return res
    return res | common.timed_step(step, kernels, mod.kernel_names(name), name, "_select")


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", type=int)
    ap.add_argument("variants", nargs="+", help='"committed" or variant files')
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--router", action="store_true",
                    help="the variants are of moe_router (the router's launches timed alone)")
    args = ap.parse_args(argv)
    gpu, dev, dtype = common.device()
    bench = MoEBench(hyperloom.build("llama", "tiny"), dev, dtype, tol=2e-2 if gpu else 1e-4)
    inputs = routed(bench, args.rows)
    host, one = (moe_router, sweep_router) if args.router else (moe_experts, sweep_one)
    mods = [load_variant(p, f"v{i}", host) for i, p in enumerate(args.variants)]
    results, want = [], None
    for _ in range(args.rounds or (2 if gpu else 1)):
        for i, (path, mod) in enumerate(zip(args.variants, mods)):
            r = one(mod, f"v{i}", bench, inputs, want)
            want = r["out"] if want is None else want
            times = ", ".join(f"{k} {v:.1f}" for k, v in r.items() if k.startswith("_"))
            total = f" total {r['total_us']:.1f} us | {times}" if "total_us" in r else ""
            print(f"[v{i}] {path}: err {r['err']:.3e} vs committed {r['vs_committed']:.3e}{total}",
                  flush=True)
            results.append({k: v for k, v in r.items() if k != "out"} | {"variant": path})
    return results


if __name__ == "__main__":
    main()
