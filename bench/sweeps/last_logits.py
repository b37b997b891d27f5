"""GLM-5.3-Flash's first 4 layers prefill 2048 tokens in one step with every row's logits and
with the last row's only (`prefill(..., logits="last")`: the LM head on one copied row).
Checks that the kept row matches the full prefill's last, then prints the median of each step
(CUDA events, the same engine and prompt). Run from the repository root:
`PYTHONPATH=. python3 bench/sweeps/last_logits.py [N]`."""

from __future__ import annotations

import sys

import torch

import hyperloom
from hyperloom.bench.measure import median_seconds
from hyperloom.bench.scenarios import EXPERT_SPREAD
from hyperloom.models.random_weights import random_weights


def main(n: int) -> None:
    gpu = torch.cuda.is_available()
    dev, dtype = torch.device("cuda" if gpu else "cpu"), torch.bfloat16 if gpu else torch.float32
    config, layers = ("glm-5.3-flash", 4) if gpu else ("tiny", 2)
    spec = hyperloom.build("glm5next", config, layers, dtype=dtype)
    weights = random_weights(spec, 0, dev, expert_spread=EXPERT_SPREAD)
    eng = hyperloom.compile(spec, weights, dev, dtype, max_seq_len=n + 16, prefill_chunk=n)
    ids = torch.randint(0, spec.vocab_size, (n,), generator=torch.Generator().manual_seed(3))
    full = eng.prefill(eng.new_sequence(), ids)
    last = eng.prefill(eng.new_sequence(), ids, logits="last")
    err = ((last.float() - full[-1:].float()).norm() / full[-1:].float().norm()).item()
    print(f"last row vs the full prefill's: rel {err:.3e}, shapes {tuple(last.shape)} "
          f"{tuple(full.shape)}")
    runner = eng.runners["main"]
    t_all = median_seconds(lambda: runner.run(n, n), dev, reps=10)
    t_last = median_seconds(lambda: runner.run(n, n, keep=1), dev, reps=10)
    print(f"prefill {n}: every row's logits {t_all * 1e3:.3f} ms, the last row's "
          f"{t_last * 1e3:.3f} ms ({t_all / t_last:.3f}x)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2048)
