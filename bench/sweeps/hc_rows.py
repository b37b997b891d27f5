"""Time hc_pre's two-launch step (projection + a finish program a row) at the few-row decode
shapes (2 to 256 rows: a batch of sequences, a verify step), in variants of the finish (the
"streams" form's warps and columns, the "row" form's warps and row tile), the wide form
(projection + apply + gates), the projection alone, and with one Sinkhorn round (what its 20
rounds cost). Each variant is checked against `semantics.hc.hc_pre` first; on a GPU each is
timed as a CUDA graph of LAUNCHES steps with X in L2 (as at decode, where the GEMM before the
site has just written the streams).

    python bench/sweeps/hc_rows.py [--rows 2,16,64,256] [--n 4 --d 4096] [--variants A;B]
    python bench/sweeps/hc_rows.py --wide --rows 4096   # the wide projection's tilings"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import sys
from pathlib import Path
from unittest import mock

import torch

from hyperloom.bench.scenarios import rel_err
from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters import hc_pre, hc_pre_launch
from hyperloom.ir import ops
from hyperloom.ir.semantics import Ctx, hc

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

LAUNCHES = 20  # steps a graph
WIDE_ROWS = 512  # the GPU's hc_pre.WIDE_ROWS (the interpreter's is 1: it takes the wide form)
SKIP = "skip finish"  # a variant's key: launch the projection alone (no finish, apply, gates)
GATES = "gates alone"  # a variant's key: time the wide form's gates launch alone (after one
# whole step has filled the scratch it reads)
# name: the hc_pre module constants it patches (and the Sinkhorn rounds, None: the spec's)
VARIANTS = {
    "committed": ({}, None),
    "committed, 1 Sinkhorn round": ({}, 1),
    "streams at every row count": ({"FEW_ROWS": 512}, None),
    "streams, 8 warps": ({"FEW_WARPS": 8}, None),
    "streams, 2048 columns": ({"FEW_COLS": 2048}, None),
    "row (16 warps, 16384 elements)": ({"FEW_ROWS": 0, "FINISH_WARPS": 16, "FINISH_TILE": 16384},
                                       None),
    "row, 8 warps, 4096 elements": ({"FEW_ROWS": 0}, None),
    "row, 1 Sinkhorn round": ({"FEW_ROWS": 0}, 1),
    "wide (apply + gates)": ({"WIDE_ROWS": 1}, None),
    "projection alone": ({SKIP: True}, None),
    "row, projection alone": ({"FEW_ROWS": 0, SKIP: True}, None),
}
_READ = "{acc} += tl.sum({x}, axis=1)[:, None]\n"
# the wide form's projection alone (rows > WIDE_ROWS), in variants of its tiling and wave
WIDE = {
    "wide projection": {},
    "wide projection, 2 stages": {"PROJ_STAGES": 2},
    "wide projection, 4 stages": {"PROJ_STAGES": 4},
    "wide projection, 8 warps": {"PROJ_WARPS": 8},
    "wide projection, 32 rows": {"PROJ_ROWS": 32},
    "wide projection, 128 rows, 8 warps": {"PROJ_ROWS": 128, "PROJ_WARPS": 8},
    "wide projection, 1 resident": {"PROJ_RESIDENT": 1},
    "wide projection, 3 resident": {"PROJ_RESIDENT": 3},
    "wide projection, 4 resident": {"PROJ_RESIDENT": 4},
    "wide projection, K 64": {"PROJ_K": 64},
    "wide projection, K 64, 4 stages": {"PROJ_K": 64, "PROJ_STAGES": 4},
    "wide projection, K 256, 2 stages": {"PROJ_K": 256, "PROJ_STAGES": 2},
    "wide projection, 32 rows, 4 stages": {"PROJ_ROWS": 32, "PROJ_STAGES": 4},
    "wide projection, 32 rows, 4 stages, 3 resident": {"PROJ_ROWS": 32, "PROJ_STAGES": 4,
                                                       "PROJ_RESIDENT": 3},
    "wide projection, 32 rows, 5 stages": {"PROJ_ROWS": 32, "PROJ_STAGES": 5},
    "wide projection, K 64, 6 stages": {"PROJ_K": 64, "PROJ_STAGES": 6},
    # the read alone, at the committed tiling: the dot replaced by a row sum (err meaningless)
    "wide projection's X read alone": {"_GPU_DOT": _READ, "_INTERPRET_DOT": _READ},
    "wide projection's X read alone, 32 rows, 4 stages": {"_GPU_DOT": _READ,
                                                         "_INTERPRET_DOT": _READ,
                                                         "PROJ_ROWS": 32, "PROJ_STAGES": 4},
}
VARIANTS |= {k: (v | {SKIP: True}, None) for k, v in WIDE.items()}
# the wide form's gates launch alone (post and comb: a program's RB rows, each Sinkhorn cell an
# [RB] vector), in tilings of rows, warps and splits summed at once (4096 rows: 4 splits) a
# program
GATE_TILES = {f"wide gates, {rb} rows, {w} warps, {sg} splits":
              {"GATE_ROWS": rb, "GATE_WARPS": w, "GATE_SPLITS": sg}
              for rb, w, sg in ((16, 2, 16), (16, 2, 4), (16, 1, 4), (8, 1, 4), (32, 1, 4),
                                (32, 2, 4), (64, 2, 4), (64, 4, 4))}
VARIANTS |= {k: (v | {"WIDE_ROWS": 1, GATES: True}, None) for k, v in GATE_TILES.items()}
WIDE |= GATE_TILES


def operands(spec: hc_pre.HCPreSpec, rows: int, dev, dtype, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    n, d, j = spec.n, spec.d, (2 + spec.n) * spec.n
    return {"x": (torch.randn((rows, n, d), generator=g) * 1.7).to(dev),
            "fn": (torch.randn((j, n * d), generator=g) / math.sqrt(n * d)).to(dev, dtype),
            "base": (torch.randn(j, generator=g) * 0.5).to(dev),
            "scale": (torch.rand(3, generator=g) + 0.5).to(dev),
            "y": torch.empty((rows, d), device=dev, dtype=dtype),
            "post": torch.empty((rows, n), device=dev),
            "comb": torch.empty((rows, n, n), device=dev)}


class _Skip:
    """A kernel that launches nothing (the projection timed alone)."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def reference(spec: hc_pre.HCPreSpec, o: dict) -> torch.Tensor:
    at = ops.HCPreAttrs(n=spec.n, norm_eps=spec.norm_eps, hc_eps=spec.hc_eps, iters=spec.iters,
                        out_eps=spec.out_eps)
    y, post, comb = hc.hc_pre(Ctx(torch.float64, None, ()), at, o["x"].double(),
                              o["fn"].double(), o["base"].double(), o["scale"].double())
    return torch.cat([y.flatten(), post.flatten(), comb.flatten()])


def _partials_err(spec: hc_pre.HCPreSpec, rows: int, o: dict, part: torch.Tensor) -> float:
    """The projection alone: its partials summed over the splits against X_flat @ fn^T."""
    j, jp = hc_pre.projections(spec)
    _, _, rows_pad, nsplit = hc_pre_launch.layout(spec, rows, fused=False)
    m = part[:nsplit * rows_pad * jp].view(nsplit, rows_pad, jp).double().sum(0)[:rows, :j]
    return rel_err(m, o["x"].double().flatten(1) @ o["fn"].double().T)


def one(spec: hc_pre.HCPreSpec, rows: int, patch: dict, iters: int | None, dev, dtype) -> dict:
    spec = spec if iters is None else dataclasses.replace(spec, iters=iters)
    skip, gates_alone = patch.get(SKIP, False), patch.get(GATES, False)
    with contextlib.ExitStack() as stack:
        for key, value in patch.items():
            if key not in (SKIP, GATES):
                stack.enter_context(mock.patch.object(hc_pre, key, value))
        src = hc_pre.source("sweep_hc", spec, header=f"sweep {patch} {iters}")
        kernels = tuple(load(src, k, dev) for k in hc_pre.kernel_names("sweep_hc"))
        if skip:
            kernels = kernels[:2] + (_Skip(),) * 3
        part, count = hc_pre_launch.scratch(spec, rows, dev)
        o = operands(spec, rows, dev, dtype)

        def issue() -> None:
            hc_pre_launch.launch(kernels, spec, **o, part=part, count=count, rows=rows, fused=False)

        issue()
        if gates_alone:  # (one, proj, finish, gates, apply): the gates re-read the scratch
            kernels = (kernels[0], _Skip(), kernels[2], kernels[3], _Skip())
        got = torch.cat([o["y"].flatten().double(), o["post"].flatten().double(),
                         o["comb"].flatten().double()])
        if hc_pre._GPU_DOT == _READ:  # the read alone computes no projection
            err = float("nan")
        elif skip:
            err = _partials_err(spec, rows, o, part)
        else:
            err = rel_err(got, reference(spec, o))
        us = common.graph_us(lambda: [issue() for _ in range(LAUNCHES)], LAUNCHES) \
            if dev.type == "cuda" else float("nan")
    return {"err": err, "us": us}


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", default=None, help="GPU: 2,16,64,256; CPU: 4,20")
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--d", type=int, default=4096, help="GPU only (the CPU's is 96)")
    p.add_argument("--variants", default=None, help="names, ;-separated (default: all but "
                   "the wide projection's, or with --wide those alone)")
    p.add_argument("--wide", action="store_true", help="the wide projection's variants")
    a = p.parse_args(argv)
    gpu, dev, dtype = common.device()
    d = a.d if gpu else 96
    rows = [int(r) for r in (a.rows or ("2,16,64,256" if gpu else "4,20")).split(",")]
    spec = hc_pre.HCPreSpec(a.n, d, 1e-6, 1e-6, 20, out_eps=1e-5)
    results = []
    if a.wide and gpu:  # what a library reduction reads X at
        for r in rows:
            x = torch.randn((r, a.n, d), device=dev)
            us = common.graph_us(lambda: [x.sum(0) for _ in range(LAUNCHES)], LAUNCHES)
            print(f"rows {r:4d} torch x.sum(0) {us:8.2f} us {x.numel() * 4 / us / 1e6:5.2f} "
                  "TB/s of X", flush=True)
    names = a.variants or ";".join(k for k in VARIANTS if (k in WIDE) == a.wide)
    for r in rows:
        for name in (v for v in names.split(";") if v):
            patch, iters = VARIANTS[name]
            res = one(spec, r, {"WIDE_ROWS": WIDE_ROWS} | patch, iters, dev, dtype)
            rate = r * a.n * d * 4 / res["us"] / 1e6  # X's fp32 bytes read once, TB/s
            print(f"rows {r:4d} {name:48s} err {res['err']:.2e} {res['us']:8.2f} us "
                  f"{rate:5.2f} TB/s of X", flush=True)
            results.append(res | {"rows": r, "variant": name})
    return results


if __name__ == "__main__":
    main()
