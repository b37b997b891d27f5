"""A chain of one-row GEMVs whose weight stream starts before the wait for their input (issue
4's decode). The twenty-sixth session's first form (one grid, layers waiting on a counter, L2
prefetches) lost 1.5 µs a boundary against a launch (BENCHMARKS). Here each program streams
its weights through D tiles held in registers, a hand-made pipeline of loads issued D K steps
ahead (the loop unrolled D times, so no register move waits on a load in flight), and issues
its first D tiles before it waits: before the PDL wait of its launch, or (one grid) before the
counter of the layer before reaches its programs. Blocks dispatch in program order, so a
program of the grid waits only on programs resident or done.

Variants, each a chain of LAYERS GEMVs x [1, K] -> [1, K] (llama o's shape), checked against
torch in fp64 first, then timed as a CUDA graph over weight copies that none is in L2 when read:
- `committed`: `matmul.launch_gemm` a layer (its pipelined loads start after the PDL wait);
- `after,D,W` / `before,D,W`: this kernel a layer per launch, its first D tiles loaded after
  or before the PDL wait, W warps;
- `chain,D,W`: one launch for the chain, the first D tiles loaded before the counter's wait;
- `persist,D,W`: one launch of a program a column block, which runs every layer in turn and
  loads the next layer's first D tiles as soon as its own store is counted.
On a CPU (the interpreter runs programs in order, so every wait is already met): checks only,
and `persist` not at all (its first program would wait for the others forever).

    PYTHONPATH=. python3 bench/sweeps/grid_chain.py committed after,8,4 before,8,4 \\
        before,8,8 chain,8,4 chain,8,8"""

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

LAYERS, BLOCK_N, BLOCK_K = 4, 32, 128
REPS, L2_BYTES = 10, 60 << 20
POLL = '''tl.inline_asm_elementwise("ld.acquire.gpu.global.u32 $0, [$1];", "=r,l",
                                         [cnt_ptr + l - 1], dtype=tl.int32, is_pure=False,
                                         pack=1)'''


def _stream(depth: int, w: str, ind: str) -> tuple[str, str, str]:
    """(first x tiles, a K loop body, drain) of `depth` register tiles streamed from the weight
    pointers `w`: each tile used, then reloaded `depth` K steps ahead (`ind`: the body's
    indent; the loop body one level deeper)."""
    def x_at(at: str) -> str:
        return f"tl.load(xp + {at}, cache_modifier=\".cg\").to(tl.float32)"
    use = [f"acc += b{i}.to(tl.float32) * a{i}[:, None]" for i in range(depth)]
    first_x = "".join(f"{ind}a{i} = {x_at(f'{i} * BLOCK_K')}\n" for i in range(depth))
    step = "".join(f"{ind}    {use[i]}\n{ind}    b{i} = tl.load({w} + k0 + {i} * BLOCK_K)\n"
                   f"{ind}    a{i} = {x_at(f'k0 + {i} * BLOCK_K')}\n" for i in range(depth))
    return first_x, step, "".join(f"{ind}{line}\n" for line in use)


def source(depth: int, early: bool) -> str:
    """The kernel's text: `depth` weight tiles in flight; early: the first ones loaded before
    the PDL wait (a chain always loads them before its counter's wait)."""
    first_w = "".join(f"    b{i} = tl.load(wp + {i} * BLOCK_K)\n" for i in range(depth))
    first_x, step, drain = _stream(depth, "wp", "    ")
    poll = "tl.load(cnt_ptr + l - 1, volatile=True)" if CONFIG.interpret else POLL
    wait = pdl("    ")
    pre, post = (first_w + wait, "") if early else (wait, first_w)
    return f'''import triton
import triton.language as tl


@triton.jit
def gemv_chain(x_ptr, w_ptr, y_ptr, cnt_ptr, L0, K: tl.constexpr, NB: tl.constexpr,
               LAYERS: tl.constexpr, CHAIN: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr):
    """y[l] = y[l-1] . w[l]^T (y[-1] = x) for layer l = L0 + program // NB, column block
    program % NB; in a chain, layer l's programs wait for cnt[l-1] to count NB stores."""
    pid = tl.program_id(0)
    l = L0 + pid // NB
    rn = (pid % NB) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    wp = w_ptr + l.to(tl.int64) * K * K + rn[None, :].to(tl.int64) * K + rk[:, None]
{pre}    if CHAIN:
        if l > 0:
            seen = {poll}
            while seen < NB:
                seen = {poll}
{post}    xp = x_ptr + rk
    if l > 0:
        xp = y_ptr + (l - 1) * K + rk
{first_x}    acc = tl.zeros([BLOCK_K, BLOCK_N], tl.float32)
    for k0 in range({depth} * BLOCK_K, K, {depth} * BLOCK_K):  # K: a multiple of D K steps
{step}{drain}    tl.store(y_ptr + l * K + rn, tl.sum(acc, axis=0).to(y_ptr.dtype.element_ty))
    if CHAIN:
        tl.debug_barrier()  # every thread's stores are issued before the count
        ticket = tl.atomic_add(cnt_ptr + l, 1, sem="release")
        if (l == LAYERS - 1) & (ticket == NB - 1):  # done: counts back to 0 for the next launch
            j = tl.arange(0, LAYERS)
            tl.store(cnt_ptr + j, tl.zeros([LAYERS], tl.int32))
'''


def persist_source(depth: int) -> str:
    """One program a column block for every layer: after its store and count, a program loads
    the next layer's first `depth` tiles (HBM idles while the layer's last programs finish),
    then waits for the layer's count."""
    ind = " " * 8
    first_x, step, drain = _stream(depth, "wl", ind)
    first_w = "".join(f"    b{i} = tl.load(wp + {i} * BLOCK_K)\n" for i in range(depth))
    next_w = "".join(f"{ind}b{i} = tl.load(wn + {i} * BLOCK_K, mask=more, other=0.0)\n"
                     for i in range(depth))
    poll = "tl.load(cnt_ptr + l - 1, volatile=True)" if CONFIG.interpret else POLL
    return f'''import triton
import triton.language as tl


@triton.jit
def gemv_persist(x_ptr, w_ptr, y_ptr, cnt_ptr, K: tl.constexpr, NB: tl.constexpr,
                 LAYERS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Column block program_id of y[l] = y[l-1] . w[l]^T for every layer l in turn; layer l
    waits for cnt[l-1] to count NB stores."""
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    wp = w_ptr + rn[None, :].to(tl.int64) * K + rk[:, None]
{first_w}{pdl("    ")}    for l in range(LAYERS):
        wl = wp + l * K * K
        xp = x_ptr + rk
        if l > 0:
            seen = {poll}
            while seen < NB:
                seen = {poll}
            xp = y_ptr + (l - 1) * K + rk
{first_x}        acc = tl.zeros([BLOCK_K, BLOCK_N], tl.float32)
        for k0 in range({depth} * BLOCK_K, K, {depth} * BLOCK_K):
{step}{drain}        tl.store(y_ptr + l * K + rn, tl.sum(acc, axis=0).to(y_ptr.dtype.element_ty))
        tl.debug_barrier()  # every thread's stores are issued before the count
        ticket = tl.atomic_add(cnt_ptr + l, 1, sem="release")
        more = l + 1 < LAYERS
        wn = wp + (l + 1) * K * K
{next_w}        if (l == LAYERS - 1) & (ticket == NB - 1):  # done: counts back to 0
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

    def ours(self, kernel, copy: int, chain: bool, warps: int) -> None:
        meta = dict(K=self.k, NB=self.nb, LAYERS=LAYERS, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                    num_warps=warps, num_stages=1)
        if chain:
            kernel[(LAYERS * self.nb,)](self.x, self.w[copy], self.y, self.cnt, 0, CHAIN=True,
                                        **meta)
            return
        for layer in range(LAYERS):
            kernel[(self.nb,)](self.x, self.w[copy], self.y, self.cnt, layer, CHAIN=False, **meta)

    def persist(self, kernel, copy: int, warps: int) -> None:
        kernel[(self.nb,)](self.x, self.w[copy], self.y, self.cnt, K=self.k, NB=self.nb,
                           LAYERS=LAYERS, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=warps,
                           num_stages=1)

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
    elif variant.startswith("persist"):
        depth, warps = (int(v) for v in variant.split(",")[1:])
        kernel = load(persist_source(depth), "gemv_persist", dev)

        def one(c: int) -> None:
            case.persist(kernel, c, warps)
    else:
        form, depth, warps = variant.split(",")
        kernel = load(source(int(depth), form != "after"), "gemv_chain", dev)

        def one(c: int) -> None:
            case.ours(kernel, c, form == "chain", int(warps))
    case.y.fill_(float("nan"))  # a variant that stores nothing fails its check
    one(0)
    err = rel_err(case.y[-1:].float(), case.want.float())
    if dev.type != "cuda":
        return {"err": err}
    return {"err": err, "us": common.graph_us(lambda: [one(c) for c in range(case.copies)],
                                              case.copies, REPS)}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+", help='"committed", after|before|chain,D,W')
    ap.add_argument("--rounds", type=int)
    args = ap.parse_args(argv)
    gpu, dev, dtype = common.device()
    case = Chain(4096 if gpu else 1024, dev, dtype)
    return common.persistent_rounds(args.variants, case, sweep_one, args.rounds, "a chain")


if __name__ == "__main__":
    main()
