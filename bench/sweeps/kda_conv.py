"""Time variants of KDA's causal conv (`hyperloom.codegen.emitters.kda_conv`) on the step shapes
the engine gives it, at GLM-5.3's width (64 heads x 128: 8192 channels each of q, k, v, kernel
4): prefill steps of one sequence, decode rows of 1 and 16 sequences, a verify step of 4
sequences x 4 rows. Each variant's outputs and windows are checked against the reference
(`semantics.kda.kda_conv`) first; on a GPU each shape is then timed as a CUDA graph of 20
launches (no host cost in it; median of 10 replays), in alternating rounds. On a CPU: a tiny
width, checks only. A variant `tile:BTxBCxW` is the committed tiled form on every step, tiled BT
rows by BC channels on W warps; `runs` is the committed run-walking form on every step.

    python bench/sweeps/kda_conv.py committed runs tile:16x128x4"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

from hyperloom.bench.kda import conv_reference
from hyperloom.bench.scenarios import rel_err
from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters import kda_conv
from hyperloom.codegen.emitters.kda_conv import ConvSpec

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

SHAPES = {"prefill 256": [0] * 256, "prefill 2048": [0] * 2048, "decode b1": [0],
          "decode b16": list(range(16)), "verify 4x4": [i for i in range(4) for _ in range(4)]}
LAUNCHES, REPS = 20, 10


def load_variant(path: str, tag: str):
    """A variant file, or one of the committed forms on every step (`runs`, `tile:..`)."""
    if path == "runs":
        launch = functools.partial(kda_conv.launch, serial_rows=1 << 62)
    elif path.startswith("tile:"):
        bt, bc, warps = (int(n) for n in path[5:].split("x"))
        launch = functools.partial(kda_conv.launch, tile=kda_conv.Tile(bt, bc, warps),
                                   serial_rows=0)
    else:
        return common.load_variant(path, f"conv_{tag}", kda_conv)
    return SimpleNamespace(source=kda_conv.source, kernel_names=kda_conv.kernel_names,
                           launch=launch)


class Case:
    """One step shape's inputs (q, k, v as column views of one buffer), windows and weights."""

    def __init__(self, spec: ConvSpec, slot: list[int], dev, dtype, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        t, c, kn = len(slot), spec.channels, spec.kernel
        qkv = torch.randn((t, 3 * c), generator=gen).to(dev, dtype)
        self.x = [qkv[:, i * c: (i + 1) * c] for i in range(3)]
        self.w = [(torch.randn((c, 1, kn), generator=gen) * 0.5).to(dev) for _ in range(3)]
        self.slot = torch.tensor(slot, dtype=torch.int64, device=dev)
        self.seq_rows = max(slot.count(s) for s in set(slot))
        self.window = torch.randn((max(slot) + 1, 3 * c, kn - 1), generator=gen).to(dev)
        self.spec, self.dev, self.dtype = spec, dev, dtype

    def want(self) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        return conv_reference(self.spec, [t.float() for t in self.x], self.w, self.slot,
                              self.window)

    def run(self, mod, kernel, window: torch.Tensor, out: list[torch.Tensor]) -> None:
        mod.launch(kernel, self.spec, q=self.x[0], k=self.x[1], v=self.x[2], wq=self.w[0],
                   wk=self.w[1], wv=self.w[2], slot=self.slot, window=window, oq=out[0],
                   ok=out[1], ov=out[2], rows=len(self.slot), seq_rows=self.seq_rows)


def sweep_one(mod, tag: str, case: Case, want) -> dict:
    name = f"conv_{tag}"
    src = mod.source(name, case.spec, header="sweep")
    kernel = tuple(load(src, n, case.dev, name) for n in mod.kernel_names(name))
    window = case.window.clone()
    out = [torch.empty_like(x) for x in case.x]
    case.run(mod, kernel, window, out)
    err = max(max(rel_err(o.float(), w) for o, w in zip(out, want[0])),
              rel_err(window, want[1]))
    if case.dev.type != "cuda":
        return {"err": err}
    def issue() -> None:
        for _ in range(LAUNCHES):
            case.run(mod, kernel, window, out)
    return {"err": err, "us": common.graph_us(issue, LAUNCHES, REPS)}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+", help='"committed" or variant files')
    ap.add_argument("--rounds", type=int)
    args = ap.parse_args(argv)
    gpu, dev, dtype = common.device()
    spec = ConvSpec(8192 if gpu else 16, 4)
    cases = {n: Case(spec, s if gpu else s[:300], dev, dtype, i)
             for i, (n, s) in enumerate(SHAPES.items())}
    wants = {n: c.want() for n, c in cases.items()}
    mods = [load_variant(p, f"v{i}") for i, p in enumerate(args.variants)]
    return common.sweep_rounds(args.variants, mods, cases,
                               lambda mod, tag, n, c: sweep_one(mod, tag, c, wants[n]),
                               "shape", args.rounds or (2 if gpu else 1))


if __name__ == "__main__":
    main()
