"""Time the mHC site scenario (`hyperloom bench`'s site: hc_pre's projection, apply and gates,
then hc_post, at `--rows` rows) with each walk order of the hc_post kernel (`hc_post.ORDER`)
and each program size (`--blocks`: columns x warps, `hc_post.BLOCK_D` x `hc_post.WARPS`), in
alternating rounds, one process and one card; with `--prefill N` also the model's prefill of N
tokens (where hc_post runs apart after each wide GEMM). Each run is checked against the PyTorch
lowering first, as the bench checks it. On a CPU: the tiny config, checks only.

    PYTHONPATH=. python bench/sweeps/site_order.py [--rows 4096] [--rounds 3]
        [--orders columns,rows_last] [--blocks 1024x4,4096x16] [--prefill 2048]"""

from __future__ import annotations

import argparse
import itertools
import statistics

import torch

import hyperloom
from hyperloom.bench.measure import measure_limits
from hyperloom.bench.scenarios import TOLERANCE, Bench
from hyperloom.codegen.emitters import hc_post


def _blocks(text: str) -> list[tuple[int, int]]:
    """"1024x4,4096x16" -> [(1024, 4), (4096, 16)]: an hc_post program's columns and warps."""
    return [tuple(int(v) for v in item.split("x")) for item in text.split(",")]


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    gpu = torch.cuda.is_available()
    p.add_argument("--rows", type=int, default=4096 if gpu else 8)
    p.add_argument("--rounds", type=int, default=3 if gpu else 1)
    p.add_argument("--orders", default=",".join(hc_post.ORDERS))
    p.add_argument("--blocks", default=f"{hc_post.BLOCK_D}x{hc_post.WARPS}",
                   help="columns x warps of an hc_post program, comma-separated")
    p.add_argument("--prefill", type=int, default=0, help="also time a prefill of N tokens")
    args = p.parse_args(argv)
    device = torch.device("cuda" if gpu else "cpu")
    dtype = torch.bfloat16 if gpu else torch.float32
    model = hyperloom.build("llama", "bench" if gpu else "tiny-hc", None, dtype)
    limits = measure_limits(device)
    bench = Bench(model, device, dtype, TOLERANCE[dtype], compile_modes=False)
    orders, sizes = args.orders.split(","), _blocks(args.blocks)
    times: dict[str, list[float]] = {}
    saved = hc_post.ORDER, hc_post.BLOCK_D, hc_post.WARPS
    try:
        for _ in range(args.rounds):
            for order, (cols, warps) in itertools.product(orders, sizes):
                hc_post.ORDER, hc_post.BLOCK_D, hc_post.WARPS = order, cols, warps
                name = order if len(sizes) == 1 else f"{order} {cols}x{warps}"
                runs = [bench.site(args.rows)] + ([bench.prefill(args.prefill)]
                                                  if args.prefill else [])
                for r in runs:
                    times.setdefault(f"{name} {r.scenario}", []).append(r.ours_s * 1e6)
                    print(f"{name:18s} {r.scenario:16s} {r.ours_s * 1e6:9.1f} us  "
                          f"{r.fraction(limits):6.1%} of the limit  (rel err {r.rel_err:.2e})",
                          flush=True)
    finally:
        hc_post.ORDER, hc_post.BLOCK_D, hc_post.WARPS = saved
    for name, ts in times.items():
        print(f"{name:35s} median {statistics.median(ts):9.1f} us over {len(ts)} runs")
    return times


if __name__ == "__main__":
    main()
