"""llama `bench`'s decode GEMVs as one persistent launch (issue 4's decode; docs/design.md,
"Persistent decode"). `grid_chain.py`'s persistent form won 1.5 µs a boundary on four equal
GEMVs. Here are the real shapes: per layer q/k/v (4096 -> 6144), o (4096 -> 4096), gate + up
with SwiGLU (4096 -> 2 x 12288 -> 12288) and down (12288 -> 4096), each reading the one
before (o reads q/k/v's first 4096 columns: no attention, no hc). There are 16 phases for 4
layers.

Each of 128 programs (16 on a CPU) takes items of 16 weight rows (gate + up: 8 of each), the
same number in every phase, and streams every item's tiles as one flat sequence of [BK, 16]
register tiles, each reloaded D tiles ahead as soon as it is used. Its last tiles of a phase
are the next phase's first weight tiles: those loads start when this program's share is done,
not when the phase's last program is. Then it counts its stores and waits for the phase's
count.

Variants, checked against fp64 torch first (the last phase's output), then timed as a CUDA
graph (the weights, 1.5 GB, are far past L2):
- `committed`: `matmul.launch_gemm` a phase (16 launches, PDL waits);
- `launches,D,W[,BK]`: this kernel a phase per launch (its own first tiles loaded at its
  start), tiles BK deep (256 unless given; D must divide K / BK);
- `persist,D,W[,BK]`: one launch for the 16 phases;
- `flaunches,S,W,D[,BK]` / `fpersist,S,W,D[,BK]`: the flat form (`source_flat`): a program's
  share of the step is one loop pipelined S deep through async copies into `tl.dot`, as the
  committed GEMVs stream, with x loaded D tiles ahead in registers (`,p` or `,r` after BK:
  the diagnostic x modes of `source_flat`).
The K-outer form (each x chunk loaded once for a round of items, tiles summed over K in their
warps) ran at a048fff: 612-620 µs a step on the H100, against 546 committed; deleted
(BENCHMARKS, twenty-seventh section).
On a CPU: `launches` checked at small widths; `persist` GPU only (the interpreter runs programs
one after another, so the first would wait for the others forever).

    PYTHONPATH=. python3 bench/sweeps/persist_layers.py committed launches,8,8 persist,8,8"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from hyperloom.bench.scenarios import rel_err
from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters import matmul
from hyperloom.codegen.emitters.ints import next_power_of_2
from hyperloom.codegen.emitters.matmul import MatmulSpec
from hyperloom.codegen.emitters.text import pdl
from hyperloom.config import CONFIG

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

LAYERS, ROWS = 4, 16
GRID = {True: (128, 256), False: (16, 64)}  # a GPU or not: (programs, K step)
REPS = 10
KINDS = ("qkv", "o", "gate_up", "down")
POLL = ('tl.inline_asm_elementwise("ld.acquire.gpu.global.u32 $0, [$1];", "=r,l", '
        '[cnt_ptr + PH - 1], dtype=tl.int32, is_pure=False, pack=1)')


def widths(gpu: bool) -> dict[str, tuple[int, int, bool]]:
    """kind: (K, weight rows, SwiGLU) at llama `bench`'s size (a GPU) or a small one."""
    h, q, i = (4096, 6144, 12288) if gpu else (512, 768, 1536)  # 12 gate + up items: 2 rounds
    return {"qkv": (h, q, False), "o": (h, h, False), "gate_up": (h, 2 * i, True),
            "down": (i, h, False)}


ROWS_TEXT = '''
@triton.jit
def _rows(item, SWI: tl.constexpr, HALF: tl.constexpr):
    """The item's 16 weight rows (SwiGLU: 8 of gate's, then the same 8 of up's)."""
    j = tl.arange(0, 16)
    if SWI:
        return tl.where(j < 8, item * 8 + j, HALF + item * 8 + j - 8).to(tl.int64)
    return (item * 16 + j).to(tl.int64)

'''


def _helpers(depth: int) -> str:
    tiles = ", ".join(f"b{i}" for i in range(depth))
    step = "".join(f"        acc += b{i}.to(tl.float32) * a{i}[:, None]\n"
                   f"        b{i} = tl.load(wp + {i} * BK, mask=wm, other=0.0)\n"
                   f"        a{i} = tl.load(xp + {i} * BK, mask=here, other=0.0, "
                   "cache_modifier=\".cg\").to(tl.float32)\n" for i in range(depth))
    load_w = "".join(f"    b{i} = tl.load(wp + {i} * BK)\n" for i in range(depth))
    load_a = "".join(f"    a{i} = tl.load(xp + {i} * BK, cache_modifier=\".cg\")"
                     ".to(tl.float32)\n" for i in range(depth))
    poll = "tl.load(cnt_ptr + PH - 1, volatile=True)" if CONFIG.interpret else POLL
    return ROWS_TEXT + f'''

@triton.jit
def _first(w_ptr, K: tl.constexpr, SWI: tl.constexpr, HALF: tl.constexpr, BK: tl.constexpr):
    """This program's first {depth} weight tiles of a phase."""
    rk = tl.arange(0, BK)
    wp = w_ptr + _rows(tl.program_id(0), SWI, HALF)[None, :] * K + rk[:, None]
{load_w}    return {tiles}


@triton.jit
def _phase(x_ptr, w_ptr, o_ptr, wn_ptr, cnt_ptr, PH, has_next, {tiles}, K: tl.constexpr,
           ITEMS: tl.constexpr, SWI: tl.constexpr, HALF: tl.constexpr, KN: tl.constexpr,
           NSWI: tl.constexpr, NHALF: tl.constexpr, CHAIN: tl.constexpr,
           NPROG: tl.constexpr, BK: tl.constexpr):
    """One phase for this program: wait for phase PH - 1's count (CHAIN), stream its items,
    the last tiles being the next phase's first (has_next), count. Returns those tiles."""
    pid = tl.program_id(0)
    rk = tl.arange(0, BK)
    if CHAIN:
        if PH > 0:
            seen = {poll}
            while seen < NPROG:
                seen = {poll}
    S: tl.constexpr = K // BK
    G: tl.constexpr = (ITEMS // NPROG) * S // {depth}
    xp = x_ptr + rk
{load_a}    acc = tl.zeros([BK, 16], tl.float32)
    for g in range(G):
        t = (g + 1) * {depth}
        here = g + 1 < G  # else the next phase's first weight tiles (has_next), no x
        k0 = (t % S) * BK
        wp = tl.where(here, w_ptr + _rows(pid + (t // S) * NPROG, SWI, HALF)[None, :] * K
                      + rk[:, None] + k0,
                      wn_ptr + _rows(pid, NSWI, NHALF)[None, :] * KN + rk[:, None])
        wm = here | has_next
        xp = x_ptr + k0 + rk
{step}        if t % S == 0:  # an item is done
            item = pid + ((t - 1) // S) * NPROG
            y = tl.sum(acc, axis=0)
            if SWI:
                y2 = tl.reshape(y, [2, 8])
                half = tl.arange(0, 2)[:, None]
                gate = tl.sum(tl.where(half == 0, y2, 0.0), axis=0)
                up = tl.sum(tl.where(half == 1, y2, 0.0), axis=0)
                h = gate / (1.0 + tl.exp(-gate)) * up
                tl.store(o_ptr + item * 8 + tl.arange(0, 8), h.to(o_ptr.dtype.element_ty))
            else:
                tl.store(o_ptr + item * 16 + tl.arange(0, 16), y.to(o_ptr.dtype.element_ty))
            acc = tl.zeros([BK, 16], tl.float32)
    if CHAIN:
        tl.debug_barrier()  # every thread's stores are issued before the count
        tl.atomic_add(cnt_ptr + PH, 1, sem="release")
    return {tiles}
'''


def source(depth: int, dims: dict) -> str:
    """The kernel: phases PH0..PH1 - 1 of the 4-phase layers in turn."""
    tiles = ", ".join(f"b{i}" for i in range(depth))
    kinds = [(layer, kind) for layer in range(LAYERS) for kind in KINDS]
    body = []
    for p, (layer, kind) in enumerate(kinds):
        k, n, swi = dims[kind]
        nk, nn, nswi = dims[kinds[(p + 1) % len(kinds)][1]]
        items = n // ROWS
        x, w, o, wn = _operands(layer, kind, kinds[(p + 1) % len(kinds)], dims)
        body.append(
            f"    if (PH0 <= {p}) & ({p} < PH1):\n"
            f"        if PH0 == {p}:\n"
            f"            {tiles} = _first({w}, {k}, {swi}, {n // 2}, BK)\n"
            f"        {tiles} = _phase({x}, {w}, {o}, {wn}, cnt_ptr, {p}, {p + 1} < PH1, "
            f"{tiles}, {k}, {items}, {swi}, {n // 2}, {nk}, {nswi}, {nn // 2}, CHAIN, NPROG, "
            "BK)\n")
    return f"import triton\nimport triton.language as tl\n\n{_helpers(depth)}\n" + _entry(
        "persist_layers", depth, body)


def _entry(name: str, most: int, body: list[str]) -> str:
    """The kernel that runs phases PH0..PH1 - 1 (`body`: each phase's lines) over `most`
    register tiles, and in a chain clears every count after the last."""
    zeros = "".join(f"    b{i} = tl.zeros([BK, 16], wq_ptr.dtype.element_ty)\n"
                    for i in range(most))
    return f'''
@triton.jit
def {name}(x_ptr, wq_ptr, wo_ptr, wg_ptr, wd_ptr, q_ptr, o_ptr, h_ptr, d_ptr, cnt_ptr,
        PH0, PH1, CHAIN: tl.constexpr, NPROG: tl.constexpr, BK: tl.constexpr):
    """Phases PH0..PH1 - 1 (CHAIN: in one launch, each waiting for the one before)."""
{pdl("    ")}{zeros}{"".join(body)}{_clear_counts()}'''


def _clear_counts() -> str:
    """A chain's last lines: the last count of all sets every phase's count back to 0."""
    phases = LAYERS * len(KINDS)
    width = next_power_of_2(phases + 1)
    return f"""    if CHAIN:  # the last count of all sets every count back to 0
        if tl.atomic_add(cnt_ptr + {phases}, 1, sem="acq_rel") == NPROG - 1:
            z = tl.arange(0, {width})
            tl.store(cnt_ptr + z, tl.zeros([{width}], tl.int32), mask=z <= {phases})
"""


def source_flat(dims: dict, nprog: int, bk: int, ahead: int, xmode: str = "v") -> str:
    """The flat form: a program's whole share of phases PH0..PH1 - 1 is one software-pipelined
    loop (`tl.range`, STAGES deep) of [BK, 16] weight tiles fed to `tl.dot` through async
    copies, as the committed GEMVs are, so the pipeline runs on across phase boundaries: a
    phase's first weight tiles are in flight while the program waits for the phase before.
    The x chunks are register tiles loaded `ahead` tiles ahead with volatile loads (kept out
    of the pipeline, which would read a phase's x before its writers are counted); a phase's
    first chunks are loaded after its wait. Diagnostic `xmode`s: "r", the same ring of plain
    loads; "p", x loaded in the loop beside its weights (pipelined: launches only, as a
    persistent launch would read a phase's x early)."""
    tiles = flat_tiles(dims, nprog, bk)
    starts = flat_starts(dims, nprog, bk)[:len(KINDS) + 1]  # a layer's phases; its length
    at = starts[-1]
    k_of = [dims[kind][0] for kind in KINDS]
    h, q, i = dims["o"][0], dims["qkv"][1], dims["down"][0]
    size = {kind: k * n for kind, (k, n, _) in dims.items()}

    def dot(a: str) -> str:
        up = ".to(tl.float32)" if CONFIG.interpret else ""  # the interpreter's low-precision dot
        return f"tl.dot({a}{up}, w{up}, acc)"
    zeros = "".join(f"    a{i} = tl.zeros([16, BK], x_ptr.dtype.element_ty)\n"
                    for i in range(ahead))
    first = "\n".join(f"            a{i} = tl.load(xb + {i} * BK + rk[None, :] + 0 * r[:, None], "
                      "mask=top, other=0.0, volatile=True)" for i in range(ahead))
    shift = "".join(f"        a{i} = a{i + 1}\n" for i in range(ahead - 1))
    ring = (f"{shift}        nks = ks + {ahead}  # x is one row: every item reads the same "
            f"chunks\n        nks = tl.where(nks >= steps, nks - steps, nks)\n"
            f"        a{ahead - 1} = tl.load(xb + nks * BK + rk[None, :] + 0 * "
            f"r[:, None],\n                    mask=top & (v + {ahead} < tiles), other=0.0, "
            "volatile=True)\n")
    x = "a0"
    if xmode == "p":
        zeros, first, ring = "", "            pass", ""
        x = "tl.load(xb + ks * BK + rk[None, :] + 0 * r[:, None], mask=top, other=0.0)"
    elif xmode == "r":
        first, ring = (t.replace(", volatile=True)", ")") for t in (first, ring))
    # the wait: a loop in PTX (a loop of the kernel's own would keep the pipeliner off it)
    spin = ("while tl.load(cnt_ptr + ph - 1, volatile=True) < NPROG:\n"
            "                        pass" if CONFIG.interpret else
            'tl.inline_asm_elementwise("{ .reg .pred p; spin: ld.acquire.gpu.global.u32 $0, '
            f'[$1]; setp.lt.u32 p, $0, {nprog}; @p bra spin; }}", "=r,l", [cnt_ptr + ph - 1], '
            "dtype=tl.int32, is_pure=False, pack=1)")
    barrier = "tl.debug_barrier()" if CONFIG.interpret else (  # gpu.barrier: pipeliner off
        'tl.inline_asm_elementwise("bar.sync 0; mov.u32 $0, 0;", "=r", [], dtype=tl.int32, '
        "is_pure=False, pack=1)")
    bound = ": tl.constexpr" if CONFIG.interpret else ""  # its ranges take Python ints only
    return f"""import triton
import triton.language as tl


@triton.jit
def _pick(kind, a, b, c, d):
    return tl.where(kind == 0, a, tl.where(kind == 1, b, tl.where(kind == 2, c, d)))


@triton.jit
def persist_flat(x_ptr, wq_ptr, wo_ptr, wg_ptr, wd_ptr, q_ptr, o_ptr, h_ptr, d_ptr, cnt_ptr,
        T0{bound}, T1{bound}, CHAIN: tl.constexpr, NPROG: tl.constexpr, BK: tl.constexpr,
        STAGES: tl.constexpr):
    \"\"\"Tiles T0..T1 - 1 of this program's flat sequence (phases start at `flat_starts`).\"\"\"
{pdl("    ")}    pid = tl.program_id(0)
    rk = tl.arange(0, BK)
    r = tl.arange(0, 16)
    top = (r == 0)[:, None]  # x's one row in a 16-row dot operand
    acc = tl.zeros([16, 16], tl.float32)
{zeros}    layer = T0 // {at}  # T0 starts a phase; the loop counts on from there (no divisions)
    u = T0 - layer * {at}
    kind = tl.where(u >= {starts[3]}, 3, tl.where(u >= {starts[2]}, 2,
                                                  tl.where(u >= {starts[1]}, 1, 0)))
    v = u * 0  # the tile of the phase, its item and its K step
    j = u * 0
    ks = u * 0
    for t in tl.range(T0, T1, num_stages=STAGES):
        kdim = _pick(kind, {", ".join(str(k) for k in k_of)})
        steps = _pick(kind, {", ".join(str(k // bk) for k in k_of)})
        tiles = _pick(kind, {", ".join(str(tiles[kind]) for kind in KINDS)})
        item = pid + j * NPROG
        swi = kind == 2
        rows = (tl.where(swi, item * 8, item * 16) + r
                + tl.where(swi & (r >= 8), {dims['gate_up'][1] // 2 - 8}, 0)).to(tl.int64)
        lw = layer.to(tl.int64)
        wl = _pick(kind, wq_ptr + lw * {size['qkv']}, wo_ptr + lw * {size['o']},
                   wg_ptr + lw * {size['gate_up']}, wd_ptr + lw * {size['down']})
        w = tl.load(wl + rows[None, :] * kdim + (ks * BK + rk)[:, None])
        xb = _pick(kind, tl.where(layer == 0, x_ptr, d_ptr + (layer - 1) * {h}),
                   q_ptr + layer * {q}, o_ptr + layer * {h}, h_ptr + layer * {i})
        ph = layer * 4 + kind
        if v == 0:  # a phase's first tile: its x is the phase before's output
            if CHAIN:
                if ph > 0:
                    {spin}
{first}
        acc = {dot(x)}
{ring}        if ks == steps - 1:  # an item is done
            y = tl.sum(tl.where(top, acc, 0.0), axis=0)
            ob = _pick(kind, q_ptr + layer * {q}, o_ptr + layer * {h}, h_ptr + layer * {i},
                       d_ptr + layer * {h})
            if kind == 2:
                y2 = tl.reshape(y, [2, 8])
                half = tl.arange(0, 2)[:, None]
                gate = tl.sum(tl.where(half == 0, y2, 0.0), axis=0)
                up = tl.sum(tl.where(half == 1, y2, 0.0), axis=0)
                tl.store(ob + item * 8 + tl.arange(0, 8),
                         (gate / (1.0 + tl.exp(-gate)) * up).to(ob.dtype.element_ty))
            else:
                tl.store(ob + item * 16 + r, y.to(ob.dtype.element_ty))
            acc = tl.zeros([16, 16], tl.float32)
        if CHAIN:
            if v == tiles - 1:
                {barrier}  # every thread's stores are issued before the count
                tl.atomic_add(cnt_ptr + ph, 1, sem="release")
        ks += 1
        wrap = ks == steps
        ks = tl.where(wrap, 0, ks)
        j = tl.where(wrap, j + 1, j)
        v += 1
        done = v == tiles  # the next tile starts a phase
        v = tl.where(done, 0, v)
        j = tl.where(done, 0, j)
        layer = tl.where(done & (kind == 3), layer + 1, layer)
        kind = tl.where(done, (kind + 1) & 3, kind)
{_clear_counts()}"""


def flat_tiles(dims: dict, nprog: int, bk: int) -> dict[str, int]:
    """kind: the [BK, 16] tiles a program streams in a phase of that kind."""
    return {kind: n // ROWS // nprog * (k // bk) for kind, (k, n, _) in dims.items()}


def flat_starts(dims: dict, nprog: int, bk: int) -> list[int]:
    """Where each phase (and the end) starts in a program's flat sequence of tiles."""
    tiles = flat_tiles(dims, nprog, bk)
    out = [0]
    for _ in range(LAYERS):
        for kind in KINDS:
            out.append(out[-1] + tiles[kind])
    return out


class _ByPhase:
    """The flat kernel launched by phases PH0..PH1 - 1, as `_runner` launches the others."""

    def __init__(self, kernel, starts: list[int]) -> None:
        self.kernel, self.starts = kernel, starts

    def __getitem__(self, grid: tuple):
        run = self.kernel[grid]
        return lambda *a, **kw: run(*a[:-2], self.starts[a[-2]], self.starts[a[-1]], **kw)


def _weights(layer: int, kind: str, dims: dict) -> str:
    k, n, _ = dims[kind]
    return f"w{kind[0]}_ptr + {layer * k * n}"


def _operands(layer: int, kind: str, nxt: tuple[int, str], dims: dict) -> tuple[str, ...]:
    """(x, w, out, next phase's w) pointer expressions of a phase."""
    h, q, i = dims["o"][0], dims["qkv"][1], dims["down"][0]
    out = {"qkv": f"q_ptr + {layer * q}", "o": f"o_ptr + {layer * h}",
           "gate_up": f"h_ptr + {layer * i}", "down": f"d_ptr + {layer * h}"}
    x = {"qkv": "x_ptr" if layer == 0 else f"d_ptr + {(layer - 1) * h}", "o": out["qkv"],
         "gate_up": out["o"], "down": out["gate_up"]}
    return x[kind], _weights(layer, kind, dims), out[kind], _weights(*nxt, dims)


class Layers:
    """Inputs, weights [LAYERS, rows, K] per kind, outputs per kind, the fp64 reference."""

    def __init__(self, dims: dict, dev, dtype) -> None:
        gen = torch.Generator().manual_seed(0)
        self.dims = dims
        h = dims["o"][0]
        self.x = torch.randn((1, h), generator=gen).to(dev, dtype)
        self.w = {kind: (torch.randn((LAYERS, n, k), generator=gen) * k ** -0.5).to(dev, dtype)
                  for kind, (k, n, _) in dims.items()}
        self.out = {kind: torch.empty((LAYERS, n // 2 if swi else n), device=dev, dtype=dtype)
                    for kind, (_, n, swi) in dims.items()}
        self.cnt = torch.zeros(64, dtype=torch.int32, device=dev)
        self.want = self._reference()
        self.bytes = sum(w.numel() * w.element_size() for w in self.w.values())

    def _reference(self) -> torch.Tensor:
        x = self.x.double()
        for layer in range(LAYERS):
            qkv = x @ self.w["qkv"][layer].double().T
            o = qkv[:, : self.dims["o"][0]] @ self.w["o"][layer].double().T
            gu = o @ self.w["gate_up"][layer].double().T
            g, u = gu.chunk(2, dim=1)
            x = (torch.nn.functional.silu(g) * u) @ self.w["down"][layer].double().T
        return x

    def args(self) -> tuple:
        return (self.x, *(self.w[k] for k in KINDS), *(self.out[k] for k in KINDS), self.cnt)

    def committed(self, kernels: dict) -> None:
        x = self.x
        for layer in range(LAYERS):
            for kind in KINDS:
                k, n, swi = self.dims[kind]
                spec = MatmulSpec(k=k, n=n, epilogue="swiglu" if swi else "store")
                out = self.out[kind][layer: layer + 1]
                matmul.launch_gemm(kernels[kind], spec, x=x[:, :k], w=self.w[kind][layer],
                                   out=out, rows=1)
                x = out


def _committed_kernels(dims: dict, dev) -> dict:
    kernels = {}
    for kind, (k, n, swi) in dims.items():
        spec = MatmulSpec(k=k, n=n, epilogue="swiglu" if swi else "store")
        name = "gemv_swiglu" if swi else "gemv_store"
        kernels[kind] = load(matmul.source(name, spec, header="sweep"), name, dev)
    return kernels


def _runner(kernel, case: Layers, chain: bool, nprog: int, meta: dict):
    """One step of a kernel of either form: one launch (chain), or a launch a phase."""
    phases = LAYERS * len(KINDS)

    def one() -> None:
        if chain:
            kernel[(nprog,)](*case.args(), 0, phases, CHAIN=True, **meta)
            return
        for p in range(phases):
            kernel[(nprog,)](*case.args(), p, p + 1, CHAIN=False, **meta)
    return one


def sweep_one(variant: str, case: Layers, dev) -> dict:
    form, *fields = variant.split(",")
    nprog, bk = GRID[dev.type == "cuda"]
    if form == "committed":
        kernels = _committed_kernels(case.dims, dev)

        def one() -> None:
            case.committed(kernels)
    elif form in ("flaunches", "fpersist"):
        stages, warps, ahead, *rest = fields
        if rest and dev.type == "cuda":
            bk = int(rest[0])
        xmode = rest[1] if len(rest) > 1 else "v"
        kernel = _ByPhase(load(source_flat(case.dims, nprog, bk, int(ahead), xmode),
                               "persist_flat", dev),
                          flat_starts(case.dims, nprog, bk))
        one = _runner(kernel, case, form == "fpersist", nprog,
                      dict(NPROG=nprog, BK=bk, STAGES=int(stages), num_warps=int(warps),
                           num_stages=int(stages)))
    else:
        depth, warps, *k_step = fields
        if k_step and dev.type == "cuda":  # a GPU variant's K step (the CPU's widths keep 64)
            bk = int(k_step[0])
        kernel = load(source(int(depth), case.dims), "persist_layers", dev)
        one = _runner(kernel, case, form == "persist", nprog,
                      dict(NPROG=nprog, BK=bk, num_warps=int(warps), num_stages=1))
    for out in case.out.values():
        out.fill_(float("nan"))  # a variant that stores nothing fails its check
    one()
    err = rel_err(case.out["down"][-1:].float(), case.want.float())
    if dev.type != "cuda":
        return {"err": err}
    return {"err": err, "us": common.graph_us(one, 1, REPS)}


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+", help='"committed", launches,D,W or persist,D,W')
    ap.add_argument("--rounds", type=int)
    args = ap.parse_args(argv)
    gpu, dev, dtype = common.device()
    case = Layers(widths(gpu), dev, dtype)
    return common.persistent_rounds(args.variants, case, sweep_one, args.rounds, "a step")


if __name__ == "__main__":
    main()
