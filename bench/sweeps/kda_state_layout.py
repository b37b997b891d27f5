"""Time KDA's recurrent decode step (`hyperloom.codegen.emitters.kda`) with each sequence's fp32
state in the committed layout, each head's S stored transposed ([dv, dk]), against S as it is,
[dk, dv]. A program owns BV state columns (dv) of a head: stored transposed those are one
contiguous block of BV * 128 * 4 bytes; as they are, 128 strided pieces of BV * 4 bytes (the
layout before 2026-12-06's twenty-first session). A variant is the committed kernel with its
state pointer's two strides as the layout has them, so everything else (tiling, PDL, cache
hints) stays. Variants `LAYOUT:BVxW` (LAYOUT vdk or kdv, BV columns a program, W warps); `fla`
adds fla's fused_recurrent_kda where it imports. Two skeletons bound what any recurrence of
this grid can reach: `copy-LAYOUT:BVxW` loads each program's state block and stores it back
unchanged (the slot load and PDL placement of the kernel, no math), `launch:BVxW` loads the
slot alone. Their check is that the state comes back unchanged.

Each variant's output and final state are checked against the reference recurrence first. On a
GPU each batch is timed as the bench times its KDA step (`bench.kda`: one CUDA graph of a step
on each of enough state copies that none is found in L2, the time per step), in alternating
rounds; on a CPU: a tiny width, checks only.

    python bench/sweeps/kda_state_layout.py vdk:8x1 kdv:16x1 copy-vdk:8x1 launch:8x1 fla"""

from __future__ import annotations

import argparse
import statistics

import torch

from hyperloom.bench import kda as bench_kda
from hyperloom.bench.measure import median_seconds
from hyperloom.bench.scenarios import rel_err
from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters import kda
from hyperloom.codegen.emitters.kda import KDASpec
from hyperloom.codegen.emitters.text import pdl_if

COMMITTED_PTR = "kk[:, None] + c[None, :] * D"
LAYOUT_PTR = {"vdk": COMMITTED_PTR, "kdv": "kk[:, None] * D + c[None, :]"}


def kernel(spec: KDASpec, layout: str, device: torch.device):
    """The recurrent kernel reading and writing the state in `layout`."""
    source = kda._recurrent("sweep_kda", spec, f"sweep: KDA state {layout}")
    if source.count(COMMITTED_PTR) != 1:
        raise ValueError("the committed kernel's state pointer is not where this sweep expects")
    return load(source.replace(COMMITTED_PTR, LAYOUT_PTR[layout]), "sweep_kda", device)


SKELETONS = ("copy", "launch")


def bare(variant: str) -> bool:
    """A skeleton, not a recurrence."""
    return variant.partition(":")[0].partition("-")[0] in SKELETONS


def skeleton(kind: str, device: torch.device):
    """A kernel of the recurrence's signature and grid that moves its state block unchanged
    (`copy-LAYOUT`) or touches no state (`launch`)."""
    kind, _, layout = kind.partition("-")
    move = ("    tl.store(st, S, cache_modifier=\".cs\")\n" if kind == "copy" else "")
    load_state = ("    S = tl.load(st, mask=(s >= 0) & (kk[:, None] < D), other=0.0, "
                  "eviction_policy=\"evict_first\")\n" if kind == "copy" else "")
    source = f'''import triton
import triton.language as tl


@triton.jit
def sweep_kda(q_ptr, k_ptr, v_ptr, g_ptr, b_ptr, slot_ptr, state_ptr, o_ptr, rows,
        sq, sk, sv, sg, sb, so, st_slot, st_head, D: tl.constexpr = 128, BV: tl.constexpr = 16,
        SINGLE: tl.constexpr = True, EARLY: tl.constexpr = False):
{pdl_if("    ", "not EARLY")}    r = tl.program_id(0)
    h = tl.program_id(1)
    c = tl.program_id(2) * BV + tl.arange(0, BV)
    kk = tl.arange(0, D)
    s = tl.load(slot_ptr + r)
    st = state_ptr + s * st_slot + h * st_head + {LAYOUT_PTR.get(layout, COMMITTED_PTR)}
{load_state}{pdl_if("    ", "EARLY")}{move}'''
    return load(source, "sweep_kda", device)


def parse(variant: str) -> tuple[str, int, int]:
    layout, tile = variant.split(":")
    bv, warps = (int(n) for n in tile.split("x"))
    kind, _, of = layout.partition("-")
    if layout not in LAYOUT_PTR and not (kind in SKELETONS and (of in LAYOUT_PTR or not of)):
        raise ValueError(f"layout {layout!r}: one of {sorted(LAYOUT_PTR)}, copy-LAYOUT, launch")
    return layout, bv, warps


def ours(spec: KDASpec, x: bench_kda.Inputs, copies: int, variant: str,
         device: torch.device) -> bench_kda.Path:
    """A Path of our kernel in the variant's layout and tiling; `first` returns the state in
    the committed layout."""
    layout, bv, warps = parse(variant)
    run = skeleton(layout, device) if bare(layout) else kernel(spec, layout, device)
    h, d = spec.heads, spec.head_dim
    transposed = layout == "vdk"  # as the engine stores it (`bench.kda.stored`)
    pool = (bench_kda.stored(x.state) if transposed else x.state).repeat(copies, 1, 1, 1)
    slots = [x.slot + c * x.batch for c in range(copies)]
    out = torch.empty_like(x.q)

    def launch(slot: torch.Tensor) -> None:
        run[(x.rows, h, d // bv)](x.q, x.k, x.v, x.g, x.b, slot, pool, out, x.rows,
                                  x.q.stride(0), x.k.stride(0), x.v.stride(0), x.g.stride(0),
                                  x.b.stride(0), out.stride(0), pool.stride(0), pool.stride(1),
                                  D=d, BV=bv, SINGLE=True, EARLY=copies > 1, num_warps=warps)

    def first() -> tuple[torch.Tensor, torch.Tensor]:
        launch(slots[0])
        state = pool[:x.batch]
        return out, bench_kda.stored(state) if transposed else state

    def steps() -> None:
        for slot in slots:
            launch(slot)

    return bench_kda.Path(variant, 1, first, steps, copies)


def paths(spec: KDASpec, x: bench_kda.Inputs, copies: int, variants: list[str],
          device: torch.device) -> dict[str, bench_kda.Path]:
    got = {}
    for v in variants:
        if v != "fla":
            got[v] = ours(spec, x, copies, v, device)
            continue
        fla, why = bench_kda.import_fla()
        if fla is None:
            print(f"fla: {why}")
            continue
        got[v] = bench_kda.fla_paths(fla, spec, x, False, copies)["fla fused_recurrent_kda"]
    return got


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    gpu = torch.cuda.is_available()
    dev = torch.device("cuda" if gpu else "cpu")
    dtype = torch.bfloat16 if gpu else torch.float32
    spec = KDASpec(*(bench_kda.GLM_WIDTH if gpu else bench_kda.CPU_WIDTH))
    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        x = bench_kda.make_inputs(spec, batch, 1, dev, dtype, torch.Generator().manual_seed(0))
        want = bench_kda.reference(spec, x)
        copies = bench_kda.rotation(spec, batch, gpu)
        found = paths(spec, x, copies, args.variants, dev)
        times: dict[str, list[float]] = {v: [] for v in found}
        for v, p in found.items():
            out, state = p.first()
            err = (rel_err(state.float(), x.state) if bare(v) else
                   max(rel_err(out.float().reshape(batch, -1), want[0].reshape(batch, -1)),
                       rel_err(state.float(), want[1])))
            rows.append({"batch": batch, "variant": v, "err": err})
            print(f"b{batch} {v}: max rel err {err:.2e}", flush=True)
        if not gpu:
            continue
        replays = {v: bench_kda.graphed(p.steps, dev) for v, p in found.items()}
        for _ in range(args.rounds):
            for v, fn in replays.items():
                times[v].append(median_seconds(fn, dev) / found[v].copies)
        mb = bench_kda.kda_bytes(spec, batch, 1, dtype) / 1e6
        for v, ts in times.items():
            us = statistics.median(ts) * 1e6
            rows.append({"batch": batch, "variant": v, "us": us})
            print(f"b{batch} {v}: {us:.2f} us ({', '.join(f'{t * 1e6:.2f}' for t in ts)}), "
                  f"{mb / us:.2f} TB/s on {mb:.1f} MB", flush=True)
    return rows


if __name__ == "__main__":
    main()
