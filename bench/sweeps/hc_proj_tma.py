"""hc_pre's wide projection (m = X_flat @ fn^T, the partials of the apply + gates step) with X
and fn loaded through tensor descriptors (TMA on Hopper) instead of pointer tiles, against the
committed `_partials` at the same grid. Each variant's partials are checked against X_flat @
fn^T first; on a GPU each is timed as a CUDA graph of LAUNCHES launches (X far larger than L2).

    python bench/sweeps/hc_proj_tma.py [--rows 4096] [--n 4 --d 4096]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from hyperloom.bench.scenarios import rel_err
from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters import hc_pre

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import hc_rows  # noqa: E402

LAUNCHES = 20


@triton.jit
def _partials_tma(x_desc, fn_desc, part_ptr, rows_pad, kb_split, nkb,
                  JP: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr,
                  STAGES: tl.constexpr, HI_LO: tl.constexpr):
    """The committed projection's work for one (row block, split): X_flat's [BLOCK_T, BLOCK_K]
    tiles and fn's [JP, BLOCK_K] tiles by descriptor (rows past the ends read zeros)."""
    t0 = tl.program_id(0) * BLOCK_T
    b_lo = tl.program_id(1) * kb_split
    b_hi = tl.minimum(b_lo + kb_split, nkb)
    acc = tl.zeros((BLOCK_T, JP), tl.float32)
    if HI_LO:  # the GPU: bf16 hi + lo parts of X, pipelined
        for b in tl.range(b_lo, b_hi, num_stages=STAGES):
            x = x_desc.load([t0, b * BLOCK_K])
            wt = tl.trans(fn_desc.load([0, b * BLOCK_K]))
            x_hi = x.to(tl.bfloat16)
            acc = tl.dot(x_hi, wt, acc)
            acc = tl.dot((x - x_hi.to(tl.float32)).to(tl.bfloat16), wt, acc)
    else:  # the interpreter: fp32, a while loop (its range() takes no tensor bound)
        b = b_lo
        while b < b_hi:
            x = x_desc.load([t0, b * BLOCK_K])
            acc = tl.dot(x, tl.trans(fn_desc.load([0, b * BLOCK_K])).to(tl.float32), acc)
            b += 1
    t = t0 + tl.arange(0, BLOCK_T)
    j = tl.arange(0, JP)
    at = part_ptr + (tl.program_id(1) * rows_pad + t.to(tl.int64)) * JP
    tl.store(at[:, None] + j[None, :], acc)


def tma(spec, rows: int, o: dict, part: torch.Tensor, block: int, k: int, stages: int,
        warps: int, splits: int):
    """The launch closure of `_partials_tma` over `splits` K splits of `block`-row programs."""
    _, jp = hc_pre.projections(spec)
    nkb = spec.n * spec.d // k
    kb_split = triton.cdiv(nkb, splits)
    rows_pad = triton.cdiv(rows, block) * block
    xd = TensorDescriptor.from_tensor(o["x"].view(rows, -1), [block, k])
    fd = TensorDescriptor.from_tensor(o["fn"], [jp, k])
    gpu = o["x"].is_cuda

    def issue() -> None:
        _partials_tma[(rows_pad // block, splits)](
            xd, fd, part, rows_pad, kb_split, nkb, JP=jp, BLOCK_T=block, BLOCK_K=k,
            STAGES=stages, HI_LO=gpu, num_warps=warps)
    return issue, rows_pad


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=None, help="GPU: 4096; CPU: 600")
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--d", type=int, default=4096, help="GPU only (the CPU's is 128)")
    a = p.parse_args(argv)
    gpu, dev, dtype = common.device()
    d, rows = (a.d, a.rows or 4096) if gpu else (128, a.rows or 600)
    spec = hc_pre.HCPreSpec(a.n, d, 1e-6, 1e-6, 20, out_eps=1e-5)
    o = hc_rows.operands(spec, rows, dev, dtype)
    want = o["x"].double().flatten(1) @ o["fn"].double().T
    j, jp = hc_pre.projections(spec)
    part = torch.empty(64 * rows * jp, device=dev)
    # committed: the wide launch itself, projection alone
    kernels = tuple(load(hc_pre.source("sweep_tma", spec), k_, dev)
                    for k_ in hc_pre.kernel_names("sweep_tma"))
    kernels = kernels[:2] + (hc_rows._Skip(),) * 3
    _, _, rows_pad, nsplit = hc_pre.layout(spec, rows, fused=False)
    count = torch.zeros(rows, dtype=torch.int32, device=dev)

    def committed() -> None:
        hc_pre.launch(kernels, spec, **o, part=part, count=count, rows=rows, fused=False)
    cases = [("committed", committed, rows_pad, nsplit)]
    for block, k, stages, warps, res in ((64, 128, 3, 4, 2), (64, 128, 4, 4, 1),
                                         (64, 64, 4, 4, 2), (64, 64, 6, 4, 2),
                                         (128, 64, 4, 8, 1), (128, 128, 3, 8, 1),
                                         (64, 128, 2, 4, 2), (64, 64, 3, 4, 3)):
        blocks = triton.cdiv(rows, block)
        splits = max(1, min(spec.n * d // k, res * 132 // blocks))
        issue, pad = tma(spec, rows, o, part, block, k, stages, warps, splits)
        cases.append((f"tma {block} rows, K {k}, {stages} stages, {warps} warps, {splits} "
                      f"splits", issue, pad, splits))
    results = []
    for name, issue, pad, splits in cases:
        try:
            issue()
        except Exception as e:  # a variant over the shared memory
            print(f"{name:56s} failed: {str(e).splitlines()[0][:100]}", flush=True)
            continue
        m = part[:splits * pad * jp].view(splits, pad, jp).double().sum(0)[:rows, :j]
        err = rel_err(m, want)
        us = common.graph_us(lambda: [issue() for _ in range(LAUNCHES)], LAUNCHES) \
            if gpu else float("nan")
        rate = rows * spec.n * d * 4 / us / 1e6
        print(f"{name:56s} err {err:.2e} {us:8.2f} us {rate:5.2f} TB/s of X", flush=True)
        results.append({"variant": name, "err": err, "us": us})
    return results


if __name__ == "__main__":
    main()
