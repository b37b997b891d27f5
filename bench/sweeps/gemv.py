"""Time GEMV tilings of the projection GEMM (`hyperloom.codegen.emitters.matmul`, one row: the
decode step's weight stream) at the engine's decode shapes: llama's qkv, o, gate_up (SwiGLU),
down and LM head, and GLM-5.3's KDA front projections and o_proj. Each tiling is checked against
torch first; on a GPU each shape is then timed as a CUDA graph of launches over enough weight
copies that none is in L2 when read (median of REPS replays), in alternating rounds, with the
share of the copy bandwidth it reaches (the bytes: the weights once).

A variant is "committed" (`matmul_tiles.tiles`) or `W,S,N,K`: W weight rows a program (w_rows;
SwiGLU: W/2 of gate's and of up's), S stages, N warps, K-deep steps (fewer stages, then
shallower steps, where shared memory would not hold them, as committed tiles are fitted). On a
CPU: small shapes, checks only.

    python bench/sweeps/gemv.py committed 64,6,4,128 32,8,8,128"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from unittest import mock

import torch

from hyperloom.bench.measure import measure_limits
from hyperloom.bench.scenarios import rel_err
from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters import matmul, matmul_launch, matmul_tiles
from hyperloom.codegen.emitters.matmul import MatmulSpec, Tiles

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

# name: (K, N, epilogue) at real width; on a CPU the same epilogues at (64, 96)
SHAPES = {"llama qkv": (4096, 6144, "store"), "llama o": (4096, 4096, "store"),
          "llama gate_up": (4096, 2 * 12288, "swiglu"), "llama down": (12288, 4096, "store"),
          "llama lm_head": (4096, 32000, "store"), "glm kda front": (4096, 3 * 8192 + 320, "store"),
          "glm o": (8192, 4096, "store")}
REPS, L2_BYTES = 10, 60 << 20  # the H200's L2 is 50 MB: copies fill more than twice that


def tiling(text: str):
    """None (committed) or the Tiles a `W,S,N,K` variant gives every one-row launch."""
    if text == "committed":
        return None
    w_rows, stages, warps, bk = (int(v) for v in text.split(","))

    def one_row(spec: MatmulSpec, rows: int, x_bytes: int = 2, w_bytes: int = 2) -> Tiles:
        if rows != 1:
            raise ValueError("the GEMV sweep runs one row")
        swiglu = spec.epilogue == "swiglu"
        t = Tiles(16, w_rows // 2 if swiglu else w_rows, bk, 1, warps, stages, gemv=True)
        return matmul_tiles._fit_smem(spec, t, x_bytes, w_bytes)  # as the committed tiles
    return one_row


class Case:
    """One shape: x [1, K], `copies` weight copies [N, K], the output, the reference."""

    def __init__(self, name: str, k: int, n: int, epilogue: str, dev, dtype, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.spec = MatmulSpec(k=k, n=n, epilogue=epilogue)
        self.x = torch.randn((1, k), generator=gen).to(dev, dtype)
        w = (torch.randn((n, k), generator=gen) * k ** -0.5).to(dev, dtype)
        size = w.numel() * w.element_size()
        self.copies = 1 if dev.type != "cuda" else 1 + -(-L2_BYTES // size)
        self.w = [w] + [w.clone() for _ in range(self.copies - 1)]
        self.out = torch.empty((1, self.spec.n_out), device=dev, dtype=dtype)
        y = self.x.double() @ w.double().T
        if epilogue == "swiglu":
            gate, up = y[:, : n // 2], y[:, n // 2:]
            y = torch.nn.functional.silu(gate) * up
        self.want, self.bytes, self.name = y, size, name

    def run(self, kernel, copy: int) -> None:
        matmul_launch.launch_gemm(kernel, self.spec, x=self.x, w=self.w[copy], out=self.out, rows=1)


def sweep_one(variant: str, case: Case, dev) -> dict:
    name = f"gemv_{case.spec.epilogue}"
    kernel = load(matmul.source(name, case.spec, header="sweep"), name, dev)
    fn = tiling(variant)
    t = (fn or matmul.tiles)(case.spec, 1)
    used = {"tiles": (t.block_n, t.num_stages, t.num_warps, t.block_k)}
    with mock.patch.object(matmul, "tiles", fn) if fn else contextlib.nullcontext():
        case.run(kernel, 0)
        err = rel_err(case.out.float(), case.want.float())
        if dev.type != "cuda":
            return {"err": err} | used

        def issue() -> None:  # captured with the variant's tiles
            for c in range(case.copies):
                case.run(kernel, c)
        return {"err": err, "us": common.graph_us(issue, case.copies, REPS)} | used


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+", help='"committed" or W,S,N,K')
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--shapes", help="comma-separated names of SHAPES (default: all)")
    args = ap.parse_args(argv)
    gpu, dev, dtype = common.device()
    names = args.shapes.split(",") if args.shapes else list(SHAPES)
    cases = [Case(n, *(SHAPES[n][:2] if gpu else (64, 96)), SHAPES[n][2], dev, dtype, i)
             for i, n in enumerate(names)]
    return sweep(args.variants, cases, sweep_one, args.rounds, dev)


def sweep(variants: list[str], cases: list[Case], one, rounds: int | None, dev) -> list[dict]:
    """one(variant, case, dev) for every variant on every case, `rounds` times in alternation
    (2 on a GPU, 1 on a CPU), a line printed each with the share of the copy bandwidth."""
    bw = measure_limits(dev).bandwidth if dev.type == "cuda" else None
    results = []
    for _ in range(rounds or (2 if dev.type == "cuda" else 1)):
        for i, variant in enumerate(variants):
            for case in cases:
                r = one(variant, case, dev) | {"variant": variant, "shape": case.name}
                timing = ""
                if "us" in r:
                    r["fraction"] = case.bytes / (r["us"] * 1e-6) / bw
                    timing = f" {r['us']:.2f} us, {100 * r['fraction']:.1f}% of copy"
                print(f"[v{i}] {variant} {case.name}: err {r['err']:.2e}{timing}", flush=True)
                results.append(r)
    return results


if __name__ == "__main__":
    main()
