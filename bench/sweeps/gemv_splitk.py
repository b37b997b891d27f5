"""One-row GEMVs split over K (issue 4's decode): the one-wave GEMVs (o, down and q/k/v: 128,
128 and 96 programs on 132 multiprocessors) read their weights at 64 to 86% of the copy rate
on the H100 at f9e6750, against 97% for gate_up's 384 programs. Here each of S splits of K runs
as programs of its own, storing fp32 partials; the last program of a column block (by ticket)
sums them and stores the row. The weight tiles are the committed GEMV's: weight rows a program
(`matmul_tiles.tiles`) and 128-deep K steps.

A variant is "committed" (`matmul.launch_gemm` with its tiles) or `S,G`: S splits at G
pipelined stages. Shapes, weight copies (none in L2 when read), the check against torch and the
timing are `gemv.py`'s. On a CPU: small shapes, checks only.

    PYTHONPATH=. python3 bench/sweeps/gemv_splitk.py committed 1,8 2,8 3,4 3,8 4,4 \\
        --shapes "llama o,llama down,llama qkv\""""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from hyperloom.bench.scenarios import rel_err
from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters import matmul
from hyperloom.codegen.emitters.ints import cdiv, next_power_of_2
from hyperloom.codegen.emitters.loops import runtime_loop
from hyperloom.codegen.emitters.text import pdl
from hyperloom.config import CONFIG

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import gemv  # noqa: E402

BLOCK_K = 128


def source() -> str:
    dot = "tl.dot(a, b, acc)"
    if CONFIG.interpret:  # the interpreter mis-computes low-precision dots: upcast both
        dot = "tl.dot(a.to(tl.float32), b.to(tl.float32), acc)"
    head, tail = runtime_loop("k0", "s * KS", "tl.minimum(s * KS + KS, K)", "BLOCK_K", "    ")
    return f'''import triton
import triton.language as tl


@triton.jit
def gemv_splitk(x_ptr, w_ptr, out_ptr, part_ptr, cnt_ptr, K: tl.constexpr, N: tl.constexpr,
                KS: tl.constexpr, SPLITS: tl.constexpr, SP: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """out[0, rn] = x[0] . w[rn]: program (column block, split s) over K columns s * KS.. of
    row 0 (a 16-row tile for tl.dot, rows past 0 masked); the block's last split sums them."""
{pdl("    ")}    pid_n = tl.program_id(0)
    s = tl.program_id(1)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = rn < N
    rk = tl.arange(0, BLOCK_K)
    i = tl.arange(0, 16)
    acc = tl.zeros([16, BLOCK_N], tl.float32)
{head}        kk = k0 + rk
        a = tl.load(x_ptr + i[:, None] * 0 + kk[None, :],
                    mask=(i == 0)[:, None] & (kk < K)[None, :], other=0.0)
        b = tl.load(w_ptr + rn[None, :].to(tl.int64) * K + kk[:, None],
                    mask=(kk < K)[:, None] & n_ok[None, :], other=0.0)
        acc = {dot}
{tail}    y = tl.sum(acc, axis=0)
    if SPLITS == 1:
        tl.store(out_ptr + rn, y.to(out_ptr.dtype.element_ty), mask=n_ok)
    else:
        tl.store(part_ptr + s * N + rn, y, mask=n_ok)
        tl.debug_barrier()  # every thread's partials are written before the ticket
        if tl.atomic_add(cnt_ptr + pid_n, 1, sem="acq_rel") == SPLITS - 1:
            tl.store(cnt_ptr + pid_n, 0)
            sp = tl.arange(0, SP)
            p = tl.load(part_ptr + sp[:, None] * N + rn[None, :],
                        mask=(sp < SPLITS)[:, None] & n_ok[None, :], other=0.0,
                        cache_modifier=".cg")
            tl.store(out_ptr + rn, tl.sum(p, axis=0).to(out_ptr.dtype.element_ty), mask=n_ok)
'''


def run_split(kernel, case: gemv.Case, copy: int, splits: int, stages: int, part, count) -> None:
    k, n = case.spec.k, case.spec.n
    block_n = matmul.tiles(case.spec, 1).block_n
    ks = cdiv(cdiv(k, splits), BLOCK_K) * BLOCK_K
    kernel[(cdiv(n, block_n), splits)](case.x, case.w[copy], case.out, part, count, K=k, N=n,
                                       KS=ks, SPLITS=splits, SP=next_power_of_2(splits),
                                       BLOCK_N=block_n, BLOCK_K=BLOCK_K, num_warps=4,
                                       num_stages=stages)


def sweep_one(variant: str, case: gemv.Case, dev) -> dict:
    if variant == "committed":
        name = "gemv_store"
        kernel = load(matmul.source(name, case.spec, header="sweep"), name, dev)

        def one(c: int) -> None:
            case.run(kernel, c)
    else:
        splits, stages = (int(v) for v in variant.split(","))
        kernel = load(source(), "gemv_splitk", dev)
        part = torch.empty((splits, case.spec.n), device=dev)
        count = torch.zeros(cdiv(case.spec.n, 16), dtype=torch.int32, device=dev)

        def one(c: int) -> None:
            run_split(kernel, case, c, splits, stages, part, count)
    case.out.fill_(float("nan"))  # a variant that stores nothing fails its check
    one(0)
    err = rel_err(case.out.float(), case.want.float())
    if dev.type != "cuda":
        return {"err": err}
    return {"err": err, "us": common.graph_us(lambda: [one(c) for c in range(case.copies)],
                                              case.copies, gemv.REPS)}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+", help='"committed" or S,G')
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--shapes", default="llama o,llama down,llama qkv")
    args = ap.parse_args(argv)
    gpu, dev, dtype = common.device()
    cases = [gemv.Case(n, *(gemv.SHAPES[n][:2] if gpu else (384, 96)), "store", dev, dtype, i)
             for i, n in enumerate(args.shapes.split(","))]
    return gemv.sweep(args.variants, cases, sweep_one, args.rounds, dev)


if __name__ == "__main__":
    main()
