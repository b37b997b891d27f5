"""Sweep variants of the sparse MLA attention (`hyperloom.codegen.emitters.mla`) over a prefill:
one sequence's N prompt tokens in one step at GLM-5.3-Flash's sizes (64 heads, rank 512, qk and
v 256, index_topk 2048 over pools of 4), its index in the DSA layout from the reference's
selection on random pool scores (every earlier token while N <= topk). The rows below topk take
the dense form (the prompt is one run), the later ones the split form. The GLM-5.3-Flash
prefill of 2048 tokens spent 8.0 of 26.9 ms in this attention at 7c05218, all of it in the
split form (the dense form came after). Each variant's launch
(latent write + absorbed query, attention, merge + value projection) is checked on sampled
rows against the fp32 reference and, on a GPU, timed as a CUDA graph (the launch alone), in
alternating rounds. A variant is "committed" or a file built with `variant.make(..., host=mla)`.

    python bench/sweeps/mla_prefill.py --tokens 2048,8192 committed my_variant.py

On a CPU it runs small sizes through the interpreter: checks only."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from hyperloom.bench.scenarios import rel_err
from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters import mla
from hyperloom.codegen.emitters.mla import MLASpec
from hyperloom.ir import ops
from hyperloom.ir.semantics import Ctx
from hyperloom.ir.semantics import attention as attn_sem
from hyperloom.ir.semantics import dsa as dsa_sem
from hyperloom.ir.state import segments

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # variant files import `variant`
import common  # noqa: E402

GPU_SIZES = dict(heads=64, dk=256, dv=256, rank=512, topk=2048, pool=4, dense_rows=None)
CPU_SIZES = dict(heads=4, dk=16, dv=16, rank=32, topk=16, pool=4, dense_rows=2)
SAMPLED = 24  # rows checked against the reference a step (the first, the last, spread between)
LAUNCHES, REPS = 5, 5


class Case:
    """One sequence's prefill of `tokens` rows: inputs, the DSA index, the output buffers."""

    def __init__(self, sizes: dict, tokens: int, dev, dtype, seed: int) -> None:
        h, dk, dv, r, topk, p = (sizes[k] for k in ("heads", "dk", "dv", "rank", "topk", "pool"))
        gen = torch.Generator().manual_seed(seed)
        self.index_at = ops.DSAIndexAttrs(1, 1, topk, p, True, "ix")
        self.spec = MLASpec(h, dk, dv, r, dk ** -0.5, self.index_at.width, head=topk)
        self.at = ops.MLAAttrs(h, dk, dv, r, dk ** -0.5, "m", index_topk=topk)
        self.pos = torch.arange(tokens)
        scores = torch.randn(tokens, tokens // p, generator=gen)
        self.index = dsa_sem.select(self.index_at, scores, self.pos).to(dev)
        self.q = torch.randn(tokens, h * dk, generator=gen).to(dev, dtype)
        self.c = torch.randn(tokens, r, generator=gen).to(dev, dtype)
        self.wkvb = (torch.randn(h * (dk + dv), r, generator=gen) * r ** -0.5).to(dev, dtype)
        self.slot = torch.zeros(tokens, dtype=torch.int64, device=dev)
        self.pos = self.pos.to(dev)
        self.latent = torch.zeros(1, tokens + 16, r, device=dev, dtype=dtype)
        self.out = torch.empty(tokens, h * dv, device=dev, dtype=dtype)
        self.rows, self.dev, self.dtype = tokens, dev, dtype
        self.dense_rows = sizes["dense_rows"]  # None: the launch's default (mla.DENSE_ROWS)

    def want(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(sampled row ids, their fp32 reference outputs on this index)."""
        n = self.rows
        rows = torch.linspace(0, n - 1, min(SAMPLED, n)).round().long().unique()
        store = {"m.latent": torch.zeros(1, n + 16, self.spec.rank, device=self.dev)}
        store["m.latent"][0, :n] = self.c.float()
        outs = []
        for r in rows.tolist():  # one row at its position over the whole prompt's latents
            ctx = Ctx(torch.float32, store, segments(self.slot[r:r + 1], self.pos[r:r + 1]))
            outs.append(attn_sem.mla_attention(ctx, self.at, self.q[r:r + 1].float(),
                                               self.c[r:r + 1].float(), self.wkvb.float(),
                                               self.slot[r:r + 1], self.pos[r:r + 1],
                                               self.index[r:r + 1]))
        return rows, torch.cat(outs)

    def run(self, mod, kernels, work) -> None:
        mod.launch(kernels, self.spec, q=self.q, c=self.c, wkvb=self.wkvb, slot=self.slot,
                   pos=self.pos, index=self.index, latent=self.latent, out=self.out,
                   work=work, rows=self.rows, seq_rows=self.rows, dense_rows=self.dense_rows)


def sweep_one(mod, tag: str, case: Case, want) -> dict:
    name = f"mla_{tag}"
    src = mod.source(name, case.spec, header="sweep")
    kernels = tuple(load(src, n, case.dev, name) for n in mod.kernel_names(name))
    work = mod.scratch(case.spec, case.rows, case.dtype, case.dev, mod.MAX_SPLITS)
    case.out.fill_(float("nan"))
    case.run(mod, kernels, work)
    rows, ref = want
    err = rel_err(case.out[rows.to(case.dev)].float(), ref)
    if case.dev.type != "cuda":
        return {"err": err}

    def issue() -> None:
        for _ in range(LAUNCHES):
            case.run(mod, kernels, work)
    return {"err": err, "us": common.graph_us(issue, LAUNCHES, REPS)}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+", help='"committed" or variant files')
    ap.add_argument("--tokens", default=None, help="prompt lengths (GPU: 2048,8192; CPU: 12,40)")
    ap.add_argument("--rounds", type=int)
    args = ap.parse_args(argv)
    gpu, dev, dtype = common.device()
    sizes = GPU_SIZES if gpu else CPU_SIZES
    tokens = [int(t) for t in (args.tokens or ("2048,8192" if gpu else "12,40")).split(",")]
    cases = {n: Case(sizes, n, dev, dtype, i) for i, n in enumerate(tokens)}
    wants = {n: c.want() for n, c in cases.items()}
    mods = [common.load_variant(p, f"v{i}", mla) for i, p in enumerate(args.variants)]
    return common.sweep_rounds(args.variants, mods, cases,
                               lambda mod, tag, n, c: sweep_one(mod, tag, c, wants[n]),
                               "tokens", args.rounds or (2 if gpu else 1))


if __name__ == "__main__":
    main()
