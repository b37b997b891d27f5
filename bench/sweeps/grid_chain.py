"""A chain of one-row GEMVs in one grid (issue 4's decode): layer l's programs wait, by a counter
in global memory, for layer l-1's programs of the same launch, instead of a launch boundary.
The H200 fit of the committed GEMVs (BENCHMARKS, twenty-fourth section) gives each launch about
4.2 µs fixed: the launch, the first loads' latency and the tail. In one grid the next layer's
programs are resident while the last one drains, and may start their weight stream first: each
program prefetches the first P K steps of its weight rows into L2 before it waits. Blocks are
dispatched in program order, so a program waits only on programs already resident or done.

Variants, each a chain of LAYERS GEMVs x [1, K] -> [1, K] (llama o's shape) checked against
torch in fp64 first, then timed as a CUDA graph over weight copies that none is in L2 when read:
- `committed`: `matmul.launch_gemm` a layer, each launch waiting on the one before (PDL);
- `launches,P`: this file's kernel a layer per launch, P K steps prefetched before the wait;
- `chain,P,S`: one launch for the chain; S > 0 sleeps S ns between polls of the counter.
On a CPU (the interpreter runs programs in order, so every wait is already met): checks only.

    PYTHONPATH=. python3 bench/sweeps/grid_chain.py committed launches,0 chain,0,0 chain,8,0 \\
        chain,32,0 chain,8,100"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from hyperloom.bench.scenarios import rel_err
from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters import matmul
from hyperloom.codegen.emitters.ints import cdiv
from hyperloom.codegen.emitters.matmul import MatmulSpec
from hyperloom.codegen.emitters.text import pdl
from hyperloom.config import CONFIG

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

LAYERS, BLOCK_N, BLOCK_K, STAGES = 4, 32, 128, 8
REPS, L2_BYTES = 10, 60 << 20


def source(sleep: int = 0) -> str:
    """The kernel's text; a chain's wait sleeps `sleep` ns between polls (0: none)."""
    nap = ""
    if sleep:
        nap = (f'                tl.inline_asm_elementwise("nanosleep.u32 {sleep};\\n mov.u32 $0, 0;", '
               '"=r,r", [seen],\n                                          dtype=tl.int32, '
               'is_pure=False, pack=1)\n')
    dot = "tl.dot(a, b, acc)"
    if CONFIG.interpret:  # the interpreter mis-computes low-precision dots: upcast both
        dot = "tl.dot(a.to(tl.float32), b.to(tl.float32), acc)"
    return f'''import triton
import triton.language as tl


@triton.jit
def gemv_chain(x_ptr, w_ptr, y_ptr, cnt_ptr, L0, K: tl.constexpr, NB: tl.constexpr,
               LAYERS: tl.constexpr, CHAIN: tl.constexpr, PREF: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """y[l] = y[l-1] . w[l]^T (y[-1] = x) for layer l = L0 + program // NB, column block
    program % NB; in a chain, layer l's programs wait for cnt[l-1] to count NB stores."""
    pid = tl.program_id(0)
    l = L0 + pid // NB
    rn = (pid % NB) * BLOCK_N + tl.arange(0, BLOCK_N)
    w = w_ptr + l.to(tl.int64) * K * K
    if PREF > 0:  # this program's first PREF K steps into L2, one prefetch a 128-byte line
        line = tl.arange(0, PREF * BLOCK_K // 64) * 64
        ptrs = w + rn[:, None].to(tl.int64) * K + line[None, :]
        tl.inline_asm_elementwise("prefetch.global.L2 [$1];\\n mov.u32 $0, 0;", "=r,l", [ptrs],
                                  dtype=tl.int32, is_pure=False, pack=1)
{pdl("    ")}    if CHAIN:
        if l > 0:
            seen = tl.load(cnt_ptr + l - 1, volatile=True)
            while seen < NB:
{nap}                seen = tl.load(cnt_ptr + l - 1, volatile=True)
            tl.atomic_add(cnt_ptr + l - 1, 0, sem="acquire")
    src = x_ptr
    if l > 0:
        src = y_ptr + (l - 1) * K
    rk = tl.arange(0, BLOCK_K)
    i = tl.arange(0, 16)
    acc = tl.zeros([16, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(src + i[:, None] * 0 + kk[None, :], mask=(i == 0)[:, None], other=0.0,
                    cache_modifier=".cg")
        b = tl.load(w + rn[None, :].to(tl.int64) * K + kk[:, None])
        acc = {dot}
    tl.store(y_ptr + l * K + rn, tl.sum(acc, axis=0).to(y_ptr.dtype.element_ty))
    if CHAIN:
        tl.debug_barrier()  # every thread's stores are issued before the count
        if tl.atomic_add(cnt_ptr + l, 1, sem="release") == NB - 1:
            if l == LAYERS - 1:  # the chain is done: every count back to 0 for the next launch
                j = tl.arange(0, LAYERS)
                tl.store(cnt_ptr + j, tl.zeros([LAYERS], tl.int32))
'''


class Chain:
    """x [1, K], `copies` weight stacks [LAYERS, K, K], the outputs y [LAYERS, K], the
    reference (fp64)."""

    def __init__(self, k: int, dev, dtype) -> None:
        gen = torch.Generator().manual_seed(0)
        self.k, self.nb = k, cdiv(k, BLOCK_N)
        self.x = torch.randn((1, k), generator=gen).to(dev, dtype)
        w = (torch.randn((LAYERS, k, k), generator=gen) * k ** -0.5).to(dev, dtype)
        size = w.numel() * w.element_size()
        self.copies = 1 if dev.type != "cuda" else 1 + -(-L2_BYTES // size)
        self.w = [w] + [w.clone() for _ in range(self.copies - 1)]
        self.y = torch.empty((LAYERS, k), device=dev, dtype=dtype)
        self.cnt = torch.zeros(LAYERS, dtype=torch.int32, device=dev)
        want = self.x.double()
        for layer in range(LAYERS):
            want = want @ w[layer].double().T
        self.want, self.bytes = want, size

    def ours(self, kernel, copy: int, chain: bool, pref: int) -> None:
        meta = dict(K=self.k, NB=self.nb, LAYERS=LAYERS, PREF=pref, BLOCK_N=BLOCK_N,
                    BLOCK_K=BLOCK_K, num_warps=4, num_stages=STAGES)
        if chain:
            kernel[(LAYERS * self.nb,)](self.x, self.w[copy], self.y, self.cnt, 0, CHAIN=True,
                                        **meta)
            return
        for layer in range(LAYERS):
            kernel[(self.nb,)](self.x, self.w[copy], self.y, self.cnt, layer, CHAIN=False, **meta)

    def committed(self, kernel, copy: int) -> None:
        spec = MatmulSpec(k=self.k, n=self.k, epilogue="store")
        src = self.x
        for layer in range(LAYERS):
            out = self.y[layer: layer + 1]
            matmul.launch_gemm(kernel, spec, x=src, w=self.w[copy][layer], out=out, rows=1)
            src = out


def sweep_one(variant: str, case: Chain, dev) -> dict:
    if variant == "committed":
        spec = MatmulSpec(k=case.k, n=case.k, epilogue="store")
        kernel = load(matmul.source("gemv_store", spec, header="sweep"), "gemv_store", dev)

        def one(c: int) -> None:
            case.committed(kernel, c)
    else:
        form, *nums = variant.split(",")
        pref, sleep = (int(v) for v in (nums + ["0"])[:2])
        if dev.type != "cuda":  # no PTX in the interpreter: prefetch and sleep are GPU-only
            pref = sleep = 0
        kernel = load(source(sleep), "gemv_chain", dev)

        def one(c: int) -> None:
            case.ours(kernel, c, form == "chain", pref)
    case.y.fill_(float("nan"))  # a variant that stores nothing fails its check
    one(0)
    err = rel_err(case.y[-1:].float(), case.want.float())
    if dev.type != "cuda":
        return {"err": err}
    return {"err": err, "us": common.graph_us(lambda: [one(c) for c in range(case.copies)],
                                              case.copies, REPS)}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+", help='"committed", launches,P or chain,P,S')
    ap.add_argument("--rounds", type=int)
    args = ap.parse_args(argv)
    gpu, dev, dtype = common.device()
    case = Chain(4096 if gpu else 256, dev, dtype)
    floor = None
    if gpu:
        from hyperloom.bench.measure import measure_limits
        floor = case.bytes / measure_limits(dev).bandwidth * 1e6
        print(f"chain of {LAYERS}: {case.bytes / 1e6:.1f} MB, {floor:.2f} us at the copy rate")
    results = []
    for _ in range(args.rounds or (3 if gpu else 1)):
        for i, variant in enumerate(args.variants):
            r = sweep_one(variant, case, dev) | {"variant": variant}
            timing = f" {r['us']:.2f} us a chain" if "us" in r else ""
            if floor:
                timing += f", {100 * floor / r['us']:.1f}% of copy"
            print(f"[v{i}] {variant}: err {r['err']:.2e}{timing}", flush=True)
            results.append(r)
    return results


if __name__ == "__main__":
    main()
