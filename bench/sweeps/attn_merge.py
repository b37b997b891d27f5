"""Decode attention's split merge moved into the o GEMV (issue 4's decode), timed against the
committed pair on one row.

Committed ("ticket"): the split-KV kernel stores each split's partials (m, l, acc), and the
last split of a (row, kv head) by ticket merges them into o; then the o GEMV reads o.
Variant ("in o"): the split kernel stops after its partials (no ticket, no merge), and the o
GEMV merges them itself, one head per K step of head_dim columns, while its weights stream.
Every o program merges every head again (L2 reads, beside its share of the weights), and the
attention's serial tail (ticket, merge loads, store) leaves the step.

Both forms run llama `bench`'s layer shapes (32 x 128 query heads, 8 kv heads, o 4096 x 4096)
at batch 1, on COPIES copies of the KV cache and o's weights taken in turn so that no step
finds them in L2, each step as a CUDA graph of STEPS launches pairs, rounds alternating. The
variant's o is checked against the committed one first. On a CPU: tiny shapes, checks only.

    PYTHONPATH=. python3 bench/sweeps/attn_merge.py [--ctx 1024] [--rounds 3]"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

import torch

from hyperloom.bench.scenarios import TOLERANCE, rel_err
from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters import attention, matmul
from hyperloom.codegen.emitters.ints import next_power_of_2
from hyperloom.codegen.emitters.text import pdl
from hyperloom.config import CONFIG

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

STEPS, COPIES = 20, 4
CUT = "    # every thread's partials are written before the ticket"  # the split kernel's merge


def o_merged_source() -> str:
    dot = "tl.dot(x16, tl.trans(w), acc)"
    if CONFIG.interpret:  # the interpreter mis-computes low-precision dots: upcast both
        dot = "tl.dot(x16.to(tl.float32), tl.trans(w.to(tl.float32)), acc)"
    return f'''import triton
import triton.language as tl

{attention._CHUNK}

@triton.jit
def o_merged(acc_ptr, ml_ptr, pos_ptr, w_ptr, out_ptr, splits, H: tl.constexpr,
             HD: tl.constexpr, SP: tl.constexpr, CHUNK_N: tl.constexpr, BLOCK_N: tl.constexpr):
    """out[0, rn] = x . w[rn, :] for row 0, x its attention output merged from the split
    partials (m, l, acc [head, split]) head by head: a K step of HD columns is one head."""
{pdl("    ")}    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    d = tl.arange(0, HD)
    sp = tl.arange(0, SP)
    n_keys = tl.load(pos_ptr) + 1
    live = sp < tl.cdiv(n_keys, _chunk(n_keys, splits, CHUNK_N))
    i = tl.arange(0, 16)
    acc = tl.zeros([16, BLOCK_N], tl.float32)  # row 0 live: tl.dot's smallest M
    for h in range(H):
        m = tl.load(ml_ptr + h * 2 * splits + sp, mask=live, other=-1e30)
        wgt = tl.exp2(m - tl.max(m, axis=0))
        l_sum = tl.sum(tl.load(ml_ptr + (h * 2 + 1) * splits + sp, mask=live, other=0.0) * wgt,
                       axis=0)
        a = tl.load(acc_ptr + (h * splits + sp)[:, None] * HD + d[None, :], mask=live[:, None],
                    other=0.0)
        # rounded to the weights' dtype, as the committed form stores o
        x = tl.sum(a * wgt[:, None], axis=0) / l_sum
        x16 = tl.where(i[:, None] == 0, x[None, :], 0.0).to(w_ptr.dtype.element_ty)
        w = tl.load(w_ptr + rn[:, None] * (H * HD) + h * HD + d[None, :])
        acc = {dot}
    tl.store(out_ptr + rn, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))
'''


class Layer:
    """One decode layer's attention and o at batch 1 over COPIES cache and weight copies."""

    def __init__(self, gpu: bool, dev, dtype, ctx: int, copies: int) -> None:
        heads, kv, hd = (32, 8, 128) if gpu else (4, 2, 32)
        self.spec = attention.AttentionSpec(heads, kv, hd, 1 / math.sqrt(hd))
        cap = max(1024, next_power_of_2(ctx))
        g = torch.Generator().manual_seed(0)

        def rand(*shape, scale=1.0):
            return (torch.randn(shape, generator=g) * scale).to(dev, dtype)
        self.q, self.k, self.v = rand(1, heads * hd), rand(1, kv * hd), rand(1, kv * hd)
        self.inv = (1.0 / 10000 ** (torch.arange(0, hd, 2) / hd)).float().to(dev)
        self.caches = [(rand(1, cap, kv, hd), rand(1, cap, kv, hd)) for _ in range(copies)]
        self.ws = [rand(heads * hd, heads * hd, scale=heads ** -0.5 * hd ** -0.5)
                   for _ in range(copies)]
        self.pos = torch.tensor([ctx - 1], device=dev)
        self.slot = torch.zeros(1, dtype=torch.int64, device=dev)
        self.part = attention.scratch(self.spec, 1, cap, dev)
        self.splits = attention.launch_splits(self.part[0].shape[2], 1, kv)
        self.o = torch.empty((1, heads * hd), device=dev, dtype=dtype)
        self.out = torch.empty((1, heads * hd), device=dev, dtype=dtype)
        src = attention.source("am", self.spec)
        split = attention.kernel_names("am")[2]
        self.ticket = load(src, split, dev, base="am")
        self.parts_only = load(src[:src.index(CUT)], split, dev, base="am")
        self.gemv_spec = matmul.MatmulSpec(heads * hd, heads * hd)
        self.gemv = tuple(load(matmul.source("amo", self.gemv_spec), n, dev, base="amo")
                          for n in matmul.kernel_names("amo", self.gemv_spec))
        self.merged = load(o_merged_source(), "o_merged", dev)

    def attend(self, kernel, i: int) -> None:
        kc, vc = self.caches[i]
        attention.launch_split(kernel, self.spec, q=self.q, k=self.k, v=self.v, inv_freq=self.inv,
                               k_cache=kc, v_cache=vc, pos=self.pos, slot=self.slot, o=self.o,
                               rows=1, part=self.part)

    def committed(self, i: int) -> None:
        self.attend(self.ticket, i)
        matmul.launch(self.gemv, self.gemv_spec, x=self.o, w=self.ws[i], out=self.out, rows=1)

    def in_o(self, i: int, stages: int = 6) -> None:
        self.attend(self.parts_only, i)
        s = self.spec
        n = self.ws[i].shape[0]
        block = 32
        self.merged[(n // block,)](self.part[0], self.part[1], self.pos, self.ws[i], self.out,
                                   self.splits, H=s.heads, HD=s.head_dim,
                                   SP=next_power_of_2(self.splits), CHUNK_N=attention.SPLIT_N,
                                   BLOCK_N=block, num_warps=4, num_stages=stages)


# the variant's pipelined stages (sm_90: 54 KB of shared memory at 4, 87 KB at 6; a stage is
# one head's weights and partials)
FORMS = {"ticket (committed)": Layer.committed, "in o": Layer.in_o,
         "in o, 4 stages": lambda layer, i: layer.in_o(i, 4)}


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ctx", type=int, default=None, help="keys of the row (GPU 1024, CPU 300)")
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv)
    gpu, dev, dtype = common.device()
    layer = Layer(gpu, dev, dtype, a.ctx or (1024 if gpu else 300), COPIES if gpu else 1)
    outs = {}
    for name, form in FORMS.items():
        form(layer, 0)
        outs[name] = layer.out.clone()
    err = max(rel_err(outs[name].double(), outs["ticket (committed)"].double())
              for name in FORMS)
    print(f"in o against the committed pair: rel err {err:.2e} ({layer.splits} splits)")
    if err > TOLERANCE[dtype]:
        raise AssertionError(f"the merge in o disagrees: rel err {err:.2e}")
    times: dict[str, list[float]] = {"err": [err]}
    if not gpu:
        return times
    for _ in range(a.rounds):
        for name, form in FORMS.items():
            us = common.graph_us(lambda: [form(layer, i % COPIES) for i in range(STEPS)], STEPS)
            times.setdefault(name, []).append(us)
            print(f"{name:20s} {us:7.2f} us a layer (attention + o)", flush=True)
    parts = {"attention with its merge": lambda i: layer.attend(layer.ticket, i),
             "attention, partials only": lambda i: layer.attend(layer.parts_only, i),
             "o alone (committed GEMV)": lambda i: matmul.launch(
                 layer.gemv, layer.gemv_spec, x=layer.o, w=layer.ws[i], out=layer.out, rows=1),
             "o alone, merging": layer.in_o}
    for name, part in parts.items():  # each launch alone, for where the difference lies
        us = common.graph_us(lambda: [part(i % COPIES) for i in range(STEPS)], STEPS)
        times[name] = [us]
        print(f"{name:26s} {us:7.2f} us", flush=True)
    for name in FORMS:
        print(f"{name:20s} median {statistics.median(times[name]):7.2f} us over {a.rounds}")
    return times


if __name__ == "__main__":
    main()
