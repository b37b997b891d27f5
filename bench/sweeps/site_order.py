"""Time the mHC site scenario (`hyperloom bench`'s site: hc_pre's projection, apply and gates,
then hc_post, at `--rows` rows) with each walk order of the hc_post kernel (`hc_post.ORDER`),
in alternating rounds, one process and one card; with `--prefill N` also the model's prefill of
N tokens (where hc_post runs apart after each wide GEMM). Each run is checked against the PyTorch
lowering first, as the bench checks it. On a CPU: the tiny config, checks only.

    python bench/sweeps/site_order.py [--rows 4096] [--rounds 3] [--orders columns,rows_last]
        [--prefill 2048]"""

from __future__ import annotations

import argparse
import statistics

import torch

import hyperloom
from hyperloom.bench.measure import measure_limits
from hyperloom.bench.scenarios import TOLERANCE, Bench
from hyperloom.codegen.emitters import hc_post


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    gpu = torch.cuda.is_available()
    p.add_argument("--rows", type=int, default=4096 if gpu else 8)
    p.add_argument("--rounds", type=int, default=3 if gpu else 1)
    p.add_argument("--orders", default=",".join(hc_post.ORDERS))
    p.add_argument("--prefill", type=int, default=0, help="also time a prefill of N tokens")
    args = p.parse_args(argv)
    device = torch.device("cuda" if gpu else "cpu")
    dtype = torch.bfloat16 if gpu else torch.float32
    model = hyperloom.build("llama", "bench" if gpu else "tiny-hc", None, dtype)
    limits = measure_limits(device)
    bench = Bench(model, device, dtype, TOLERANCE[dtype], compile_modes=False)
    times: dict[str, list[float]] = {}
    saved = hc_post.ORDER
    try:
        for _ in range(args.rounds):
            for order in args.orders.split(","):
                hc_post.ORDER = order
                runs = [bench.site(args.rows)] + ([bench.prefill(args.prefill)]
                                                  if args.prefill else [])
                for r in runs:
                    times.setdefault(f"{order} {r.scenario}", []).append(r.ours_s * 1e6)
                    print(f"{order:10s} {r.scenario:16s} {r.ours_s * 1e6:9.1f} us  "
                          f"{r.fraction(limits):6.1%} of the limit  (rel err {r.rel_err:.2e})",
                          flush=True)
    finally:
        hc_post.ORDER = saved
    for order, ts in times.items():
        print(f"{order:27s} median {statistics.median(ts):9.1f} us over {len(ts)} runs")
    return times


if __name__ == "__main__":
    main()
