"""Time `hyperloom bench`'s decode scenario under each of several knob settings (`--variants`:
`;`-separated, each a `,`-separated list of KNOB=VALUE as `--set` takes them, "" for the
defaults), in alternating rounds in one process on one card. Each run builds its engine under
its knobs and is checked against the PyTorch lowering first, as the bench checks it. On a CPU:
llama's tiny-hc config, checks only.

    PYTHONPATH=. python bench/sweeps/knob_decode.py --variants "head_mean=true;head_mean=false"
        [--ctx 1024,16x1024] [--rounds 3]"""

from __future__ import annotations

import argparse
import itertools
import statistics

import torch

import hyperloom
from hyperloom.bench.measure import measure_limits
from hyperloom.bench.scenarios import TOLERANCE, Bench
from hyperloom.cli import _decode_shapes
from hyperloom.config import knobs, overrides


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    gpu = torch.cuda.is_available()
    p.add_argument("--variants", required=True, help='e.g. "head_mean=true;head_mean=false"')
    p.add_argument("--ctx", default="1024" if gpu else "12,3x12")
    p.add_argument("--rounds", type=int, default=3 if gpu else 1)
    args = p.parse_args(argv)
    variants = [(text, knobs([i for i in text.split(",") if i])) for text in
                args.variants.split(";")]
    device = torch.device("cuda" if gpu else "cpu")
    dtype = torch.bfloat16 if gpu else torch.float32
    model = hyperloom.build("llama", "bench" if gpu else "tiny-hc", None, dtype)
    limits = measure_limits(device)
    bench = Bench(model, device, dtype, TOLERANCE[dtype], compile_modes=False)
    times: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for (text, set_), (batch, ctx) in itertools.product(variants, _decode_shapes(args.ctx)):
            with overrides(**set_):
                r = bench.decode(ctx, batch)
            key = f"{text or 'defaults'} | {r.scenario}"
            times.setdefault(key, []).append(r.ours_s * 1e6)
            print(f"{key:45s} {r.ours_s * 1e6:9.1f} us  {r.fraction(limits):6.1%} of the limit  "
                  f"{r.kernels} kernels  (rel err {r.rel_err:.2e})", flush=True)
    for key, ts in times.items():
        print(f"{key:45s} median {statistics.median(ts):9.1f} us over {len(ts)} runs")
    return times


if __name__ == "__main__":
    main()
