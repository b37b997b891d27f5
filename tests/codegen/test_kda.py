"""The KDA recurrence emitter against semantics.kda.kda (fp64): runs of 1 to 5 tokens of
several sequences in one step (decode rows, verify rows, a prefill in recurrent form; a step
of one row a sequence takes the SINGLE form), padding rows, state columns split over programs,
the state read and written in place with the other slots untouched, and a run split over two
steps equal to one step. CPU: Triton's interpreter in fp32; GPU (`gpu` mark): bf16 inputs at
GLM-5.3 width (64 heads x 128) on the H200."""

from __future__ import annotations

import pytest
import torch

from hyperloom.bench.kda import conv_reference
from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters import kda_conv
from hyperloom.codegen.emitters.kda import KDASpec, Norm, launch, norm_scratch, source
from hyperloom.codegen.emitters.kda_gate import KDAGateSpec
from hyperloom.codegen.emitters.kda_conv import CONV_TILE, SERIAL_ROWS, ConvSpec, Tile, \
    kernel_names
from hyperloom.codegen.emitters.kda_conv import launch as conv_launch
from hyperloom.codegen.emitters.kda_conv import source as conv_source
from hyperloom.ir import ops
from hyperloom.ir.semantics import Ctx, fused, kda
from hyperloom.ir.state import StateStore, segments
from hyperloom.ir.types import StateDecl, StateKind, TensorType
from tests.tolerances import assert_close, assert_rel

SLOTS = 5


class Step:
    """Fresh random inputs (g in (-5, 0), as GLM's gate gives) and a random fp32 state."""

    def __init__(self, spec: KDASpec, slot: list[int], device: str, dtype: torch.dtype,
                 seed: int) -> None:
        self.spec, self.device = spec, device
        gen = torch.Generator().manual_seed(seed)
        t, hd = len(slot), spec.heads * spec.head_dim

        def rand(*shape, scale=1.0):
            return (torch.randn(shape, generator=gen) * scale).to(device, dtype)

        self.q, self.k, self.v = rand(t, hd), rand(t, hd), rand(t, hd)
        self.g = (-5 * torch.sigmoid(torch.randn((t, hd), generator=gen))).to(device, dtype)
        self.b = rand(t, spec.heads, scale=2.0)
        self.slot = torch.tensor(slot, dtype=torch.int64, device=device)
        self.slots = max(SLOTS, max(slot) + 1)
        self.state = (torch.randn((self.slots, spec.heads, spec.head_dim, spec.head_dim),
                                  generator=gen) * 0.3).to(device)
        self.out = torch.full((t, hd), float("nan"), dtype=dtype, device=device)
        self.norm, self.run_norm = None, False  # a carried gated norm's operands (spec.rank)
        if getattr(spec, "rank", 0):  # (kda_chunk's specs carry none)
            ga = rand(t, spec.rank + 7)[:, 3: 3 + spec.rank]  # a column slice, as g_a's output
            wg = rand(hd, spec.rank, scale=spec.rank ** -0.5)
            h = torch.full((t, hd), float("nan"), dtype=dtype, device=device)
            self.norm = Norm(ga, wg, rand(spec.head_dim), h, *norm_scratch(spec, t, device))
            self.run_norm = True

    def run(self, state: torch.Tensor, rows: slice | None = None, early: bool = False) -> None:
        rows = rows or slice(0, self.q.shape[0])
        kernel = load(source("kda", self.spec, header="test"), "kda", self.device)
        slot = self.slot[rows]
        live = slot[slot >= 0]
        seq_rows = int(live.unique(return_counts=True)[1].max()) if len(live) else 1
        launch(kernel, self.spec, q=self.q[rows], k=self.k[rows], v=self.v[rows],
               g=self.g[rows], b=self.b[rows], slot=slot, state=state,
               out=self.out[rows], rows=rows.stop - rows.start, seq_rows=seq_rows,
               early_state=early, norm=self.norm, run_norm=self.run_norm)

    def norm_reference(self, out: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """h of the live rows: g_b's GEMM + gated norm (semantics) over the reference's out."""
        s, n, live = self.spec, self.norm, self.slot >= 0
        at = ops.GatedNormAttrs(s.eps, s.head_dim)
        return fused.linear_gated_norm(Ctx(dtype, None, ()), at, n.ga[live].to(dtype),
                                       n.wg.to(dtype), out.to(dtype), n.nw.to(dtype))

    def reference(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(out of the live rows, the state after the step)."""
        s, live = self.spec, self.slot >= 0
        slot = self.slot[live]
        pos = torch.zeros_like(slot)
        for i in range(1, len(slot)):  # consecutive positions within each run
            pos[i] = pos[i - 1] + 1 if slot[i] == slot[i - 1] else 0
        decl = TensorType.make(torch.float32, s.heads, s.head_dim, s.head_dim)
        store = StateStore((StateDecl("a.recurrent", StateKind.FIXED, decl),), self.slots, 1,
                           self.device, dtype)
        store["a.recurrent"].copy_(self.state)
        at = ops.KDAAttrs(s.heads, s.head_dim, "a")
        args = [t[live].to(dtype) for t in (self.q, self.k, self.v, self.g, self.b)]
        out = kda.kda(Ctx(dtype, store, segments(slot, pos)), at, *args, slot, pos)
        return out, store["a.recurrent"]


# runs: slot 2 x3 (verify rows), 0 x1, padding, 4 x5 (a prefill), 1 x1; slot 3 untouched
SLOT_ROWS = [2, 2, 2, 0, 4, 4, 4, 4, 4, 1, -1]
DECODE_ROWS = [2, 0, -1, 4, 1, -1]  # one row a sequence (the SINGLE form), padding between
LONG_ROWS = [2] * 40 + [-1] + [0] * 3 + [4] * 33  # runs found past one 32-slot load


@pytest.mark.parametrize("heads,head_dim", [(2, 16), (3, 64)])  # one and two column blocks
@pytest.mark.parametrize("slots", [SLOT_ROWS, DECODE_ROWS, LONG_ROWS])
def test_kda_recurrence(heads: int, head_dim: int, slots: list[int]) -> None:
    step = Step(KDASpec(heads, head_dim), slots, "cpu", torch.float32, seed=heads + len(slots))
    state = step.state.clone()
    step.run(state)
    out, want = step.reference(torch.float64)
    live = step.slot >= 0
    assert_close(step.out[live], out, torch.float32, "out")
    assert_close(state, want, torch.float32, "state")
    assert step.out[~live].isnan().all(), "a padding row was written"
    assert torch.equal(state[3], step.state[3]), "an idle slot's state changed"


def test_kda_run_split_over_two_steps() -> None:
    # slot 4's five rows as 2 + 3 rows in two launches == one launch of all five
    spec = KDASpec(2, 32)
    step = Step(spec, [4] * 5, "cpu", torch.float32, seed=9)
    whole = step.state.clone()
    step.run(whole)
    one = step.out.clone()
    parts = step.state.clone()
    step.run(parts, slice(0, 2))
    step.run(parts, slice(2, 5))
    assert_close(step.out, one, torch.float32, "out over two steps")
    assert_close(parts, whole, torch.float32, "state over two steps")


@pytest.mark.parametrize("heads,head_dim", [(3, 64), (2, 128)])  # 8 and 16 programs a head
@pytest.mark.parametrize("slots", [[0], [3, 1], DECODE_ROWS, SLOT_ROWS])
def test_kda_carries_the_gated_norm(heads: int, head_dim: int, slots: list[int]) -> None:
    """With spec.rank the launch also writes h = gated RMSNorm(o) (g_b's GEMM of rank 20 as
    the gate): each (row, head)'s last program by ticket writes the head, so decode rows, a
    few rows, verify and prefill runs (a program walking rows) all match; padding rows stay
    unwritten; the tickets are zero again, so a second launch matches too; run_norm=False
    leaves h to the GEMM entry."""
    spec = KDASpec(heads, head_dim, rank=20, eps=1e-5)
    step = Step(spec, slots, "cpu", torch.float32, seed=heads + len(slots))
    live = step.slot >= 0
    for _ in range(2):
        state = step.state.clone()
        step.run(state)
        out, want = step.reference(torch.float64)
        assert_close(step.out[live], out, torch.float32, "out")
        assert_close(state, want, torch.float32, "state")
        assert_close(step.norm.h[live], step.norm_reference(out, torch.float64), torch.float32,
                     "carried gated norm")
        assert step.norm.h[~live].isnan().all(), "a padding row's norm was written"
        assert not step.norm.cnt.any(), "a ticket was left behind"
    step.norm.h.fill_(float("nan"))
    step.run_norm = False
    step.run(step.state.clone())
    assert step.norm.h.isnan().all(), "run_norm=False wrote h"


def test_kda_carried_norm_needs_its_operands() -> None:
    step = Step(KDASpec(2, 32, rank=16), [0, 1, 2], "cpu", torch.float32, seed=2)
    norm = step.norm
    step.norm = None
    with pytest.raises(ValueError, match="carried gated norm needs its operands"):
        step.run(step.state.clone())
    step.norm = Norm(norm.ga, norm.wg, norm.nw, norm.h, *norm_scratch(step.spec, 2, "cpu"))
    with pytest.raises(ValueError, match=r"gated norm gs: \[>= 3, 64\] .* got \(2, 64\)"):
        step.run(step.state.clone())
    step.norm = Norm(norm.ga, norm.wg[:, :8], norm.nw, norm.h, norm.gs, norm.cnt)
    with pytest.raises(ValueError, match=r"gated norm wg: contiguous \[64, 16\]"):
        step.run(step.state.clone())
    plain = Step(KDASpec(2, 32), [0], "cpu", torch.float32, seed=2)
    plain.run_norm = True
    with pytest.raises(ValueError, match="run_norm on a spec that carries no gated norm"):
        plain.run(plain.state.clone())


def test_the_state_is_stored_transposed() -> None:
    """The reference (which every KDA kernel is tested against) keeps each head's S [dk, dv] as
    S^T: one token from a random S by SPEC's formula in fp64, against the store read back
    transposed."""
    h, d = 2, 16
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn((1, h * d), generator=gen, dtype=torch.float64) for _ in range(3))
    g = -5 * torch.sigmoid(torch.randn((1, h * d), generator=gen, dtype=torch.float64))
    b = torch.randn((1, h), generator=gen, dtype=torch.float64)
    s0 = torch.randn((h, d, d), generator=gen, dtype=torch.float64)  # S [dk, dv] per head
    decl = TensorType.make(torch.float32, h, d, d)
    store = StateStore((StateDecl("a.recurrent", StateKind.FIXED, decl),), 1, 1, "cpu",
                       torch.float64)
    store["a.recurrent"][0] = s0.transpose(-1, -2)
    slot = pos = torch.zeros(1, dtype=torch.int64)
    out = kda.kda(Ctx(torch.float64, store, segments(slot, pos)), ops.KDAAttrs(h, d, "a"),
                  q, k, v, g, b, slot, pos)
    qn, kn = (x.view(h, d) / (x.view(h, d).square().sum(-1, keepdim=True) + 1e-6).sqrt()
              for x in (q, k))  # SPEC's l2norm
    s = g.view(h, d).exp()[:, :, None] * s0
    delta = torch.sigmoid(b[0])[:, None] * (v.view(h, d) - torch.einsum("hkv,hk->hv", s, kn))
    s = s + kn[:, :, None] * delta[:, None, :]
    assert_close(out.view(h, d), torch.einsum("hkv,hk->hv", s, qn) * d ** -0.5, torch.float64,
                 "out")
    assert_close(store["a.recurrent"][0].transpose(-1, -2), s, torch.float64, "S")


def test_kda_bad_state_is_refused() -> None:
    step = Step(KDASpec(2, 16), [0], "cpu", torch.float32, seed=1)
    with pytest.raises(ValueError, match="KDA state"):
        step.run(step.state[:, :, :, :8].contiguous())


@pytest.mark.gpu
@pytest.mark.parametrize("early", [False, True], ids=["wait-first", "state-early"])
@pytest.mark.parametrize("slot", [[0], list(range(16)), [3] * 8 + [1, 1]])  # decode, batch, verify
def test_kda_recurrence_gpu(slot: list[int], early: bool) -> None:
    spec = KDASpec(64, 128)
    step = Step(spec, slot, "cuda", torch.bfloat16, seed=len(slot))
    state = step.state.clone()
    step.run(state, early=early)
    out, want = step.reference(torch.float32)
    assert_rel(step.out.float(), out, 1e-2, "out")
    assert_rel(state, want, 1e-3, "state")


@pytest.mark.gpu
@pytest.mark.parametrize("slot", [[0], list(range(16)), [3] * 8 + [1, 1]])  # decode, batch, verify
def test_kda_carried_norm_gpu(slot: list[int]) -> None:
    """The recurrence carrying g_b's GEMM + gated norm at GLM-5.3's width (rank 128), bf16."""
    spec = KDASpec(64, 128, rank=128, eps=1e-5)
    step = Step(spec, slot, "cuda", torch.bfloat16, seed=len(slot))
    for _ in range(2):  # the tickets are zero again after a launch
        state = step.state.clone()
        step.run(state, early=True)
        out, _ = step.reference(torch.float32)
        assert_rel(step.out.float(), out, 1e-2, "out")
        assert_rel(step.norm.h.float(), step.norm_reference(out, torch.float32), 1e-2,
                   "carried gated norm")
        assert not step.norm.cnt.any(), "a ticket was left behind"


# ---------------------------------------------------------------- causal depthwise conv


class ConvStep:
    """Random q, k, v (as column views of one buffer, as the merged projection leaves them),
    conv weights and windows; NaN-poisoned outputs."""

    def __init__(self, spec: ConvSpec, slot: list[int], device: str, dtype: torch.dtype,
                 seed: int) -> None:
        self.spec, self.device = spec, device
        gen = torch.Generator().manual_seed(seed)
        t, c, kn = len(slot), spec.channels, spec.kernel
        qkv = (torch.randn((t, 3 * c + 5), generator=gen)).to(device, dtype)
        self.q, self.k, self.v = qkv[:, :c], qkv[:, c: 2 * c], qkv[:, 2 * c: 3 * c]
        self.w = [(torch.randn((c, 1, kn), generator=gen) * 0.5).to(device) for _ in range(3)]
        self.slot = torch.tensor(slot, dtype=torch.int64, device=device)
        self.slots = max(SLOTS, max(slot) + 1)
        self.window = torch.randn((self.slots, 3 * c, kn - 1), generator=gen).to(device)
        self.out = [torch.full((t, c), float("nan"), dtype=dtype, device=device)
                    for _ in range(3)]
        self.gate = None  # a carried gate's operands (kda_conv.Gate), when spec.gate

    def run(self, window: torch.Tensor, rows: slice | None = None, tile: Tile = CONV_TILE,
            serial_rows: int = SERIAL_ROWS) -> None:
        """The step's rows (a slice of them); the form by serial_rows: 0 tiled, 1 << 62 runs."""
        rows = rows or slice(0, self.q.shape[0])
        src = conv_source("kc", self.spec, header="test")
        kernels = tuple(load(src, n, self.device, "kc") for n in kernel_names("kc"))
        slot = self.slot[rows]
        seq_rows = int(torch.unique(slot, return_counts=True)[1].max()) if len(slot) else 0
        conv_launch(kernels, self.spec, q=self.q[rows], k=self.k[rows], v=self.v[rows],
                    wq=self.w[0], wk=self.w[1], wv=self.w[2], slot=slot, window=window,
                    oq=self.out[0][rows], ok=self.out[1][rows], ov=self.out[2][rows],
                    rows=rows.stop - rows.start, seq_rows=seq_rows, tile=tile,
                    serial_rows=serial_rows, gate=self.gate)

    def reference(self, dtype: torch.dtype) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        return conv_reference(self.spec, [self.q, self.k, self.v], self.w, self.slot,
                              self.window, dtype)


@pytest.mark.parametrize("channels,kernel", [(48, 4), (200, 3)])  # one and two channel blocks
@pytest.mark.parametrize("serial_rows", [0, SERIAL_ROWS])  # tiled, runs
def test_kda_conv(channels: int, kernel: int, serial_rows: int) -> None:
    step = ConvStep(ConvSpec(channels, kernel), SLOT_ROWS, "cpu", torch.float32, seed=channels)
    window = _conv_matches_reference(step, serial_rows=serial_rows)
    assert torch.equal(window[3], step.window[3]), "an idle slot's window changed"


def _conv_matches_reference(step: ConvStep, tile: Tile = CONV_TILE,
                            serial_rows: int = SERIAL_ROWS) -> torch.Tensor:
    """Runs the step on a copy of its windows against the fp64 reference; the copy."""
    window = step.window.clone()
    step.run(window, tile=tile, serial_rows=serial_rows)
    out, want = step.reference(torch.float64)
    live = step.slot >= 0
    for name, got, ref in zip("qkv", step.out, out):
        assert_close(got[live], ref, torch.float32, f"conv {name}")
        assert got[~live].isnan().all(), f"conv {name}: a padding row was written"
    assert_close(window, want, torch.float32, "window")
    return window


# rows of a step across several conv programs (30 rows each at kernel 4 on the 32-row tile, 6
# on the 8-row one): a run starting on a program's last row (its first rows read the window
# from the next program's rows), a run longer than a program's tile (its end found past it),
# runs shorter than the window, padding
CONV_LAYOUTS = {"spill": [5] * 29 + [6] * 3 + [7] * 40 + [-1] + [1] * 2 + [2] + [3] * 3 + [0],
                "long": [3] * 300, "decode": [(7 * i) % 40 for i in range(40)],
                "short": [1, 2, 2, -1, 4, 4, 4, 0] * 5}


@pytest.mark.parametrize("layout", sorted(CONV_LAYOUTS))
@pytest.mark.parametrize("kernel", [4, 2])
@pytest.mark.parametrize("form", ["tile8", "tile32", "runs"])
def test_kda_conv_rows_over_several_programs(layout: str, kernel: int, form: str) -> None:
    slot = CONV_LAYOUTS[layout]
    if layout == "short":  # each sequence once
        slot = slot[:8]
    tile = Tile(8 if form == "tile8" else 32, 16, 4)
    _conv_matches_reference(ConvStep(ConvSpec(16, kernel), slot, "cpu", torch.float32,
                                     seed=len(slot)), tile, 1 << 62 if form == "runs" else 0)


@pytest.mark.parametrize("lower_bound", [-5.0, None])  # GLM-5.3's gate; the softplus form
@pytest.mark.parametrize("slot", [[0], SLOT_ROWS, [1] * 16, [2] * 20])
def test_kda_conv_carries_the_gate(lower_bound: float | None, slot: list[int]) -> None:
    """A conv launch carrying the f_b GEMM + decay gate (heads 3 x 24: W 72, two 64-column gate
    programs, the last part filled; rank 20): up to GATE_ROWS rows it writes g = gate(f wf^T)
    for every row, padding's too, as the GEMM entry would (the tiled form asked for, the run
    form taken); past them it leaves g to that entry; the conv's outputs either way."""
    gspec = KDAGateSpec(3, 24, lower_bound)
    spec = ConvSpec(16, 4, gate=gspec, rank=20)
    step = ConvStep(spec, slot, "cpu", torch.float32, seed=len(slot))
    rows = len(slot)
    gen = torch.Generator().manual_seed(rows)
    f = torch.randn((rows, 27), generator=gen)[:, 3:23]  # a column slice, as f_a's output
    wf = torch.randn((72, 20), generator=gen) * 20 ** -0.5
    dt_bias, a_log = torch.randn(72, generator=gen), torch.randn(3, generator=gen) * 0.5
    g = torch.full((rows, 72), float("nan"))
    step.gate = kda_conv.Gate(f, wf, dt_bias, a_log, g)
    window = _conv_matches_reference(step, serial_rows=0)
    assert torch.equal(window[3], step.window[3]), "an idle slot's window changed"
    if rows > kda_conv.GATE_ROWS:
        assert g.isnan().all(), "a wide step's gate is the GEMM entry's"
        return
    at = ops.KDAGateAttrs(3, 24, lower_bound)
    want = kda.kda_gate(Ctx(torch.float64, None, ()), at, f.double() @ wf.double().T,
                        dt_bias.double(), a_log.double())
    assert_close(g, want, torch.float32, "carried gate")


def test_kda_conv_gate_needs_its_operands() -> None:
    spec = ConvSpec(16, 4, gate=KDAGateSpec(3, 24, -5.0), rank=20)
    step = ConvStep(spec, [0, 0], "cpu", torch.float32, seed=1)
    with pytest.raises(ValueError, match="carried gate needs the gate's operands"):
        step.run(step.window.clone())
    step.gate = kda_conv.Gate(torch.zeros(2, 20), torch.zeros(72, 21), torch.zeros(72),
                              torch.zeros(3), torch.zeros(2, 72))
    with pytest.raises(ValueError, match=r"gate wf: \[72, 20\] .* got \(72, 21\)"):
        step.run(step.window.clone())


@pytest.mark.parametrize("serial_rows", [0, SERIAL_ROWS])
def test_kda_conv_run_split_over_two_steps(serial_rows: int) -> None:
    step = ConvStep(ConvSpec(32, 4), [4] * 5, "cpu", torch.float32, seed=3)
    whole = step.window.clone()
    step.run(whole, serial_rows=serial_rows)
    one = [o.clone() for o in step.out]
    parts = step.window.clone()
    step.run(parts, slice(0, 2), serial_rows=serial_rows)
    step.run(parts, slice(2, 5), serial_rows=serial_rows)
    for name, got, ref in zip("qkv", step.out, one):
        assert_close(got, ref, torch.float32, f"conv {name} over two steps")
    assert_close(parts, whole, torch.float32, "window over two steps")


@pytest.mark.gpu
@pytest.mark.parametrize("slot", [[0], list(range(16)), [3] * 8 + [1, 1],
                                  CONV_LAYOUTS["spill"], [2] * 256])
def test_kda_conv_gpu(slot: list[int]) -> None:
    step = ConvStep(ConvSpec(64 * 128, 4), slot, "cuda", torch.bfloat16, seed=len(slot))
    window = step.window.clone()
    step.run(window)
    out, want = step.reference(torch.float32)
    live = step.slot >= 0
    for name, got, ref in zip("qkv", step.out, out):
        assert_rel(got[live].float(), ref, 1e-2, f"conv {name}")
        assert got[~live].isnan().all(), f"conv {name}: a padding row was written"
    assert_rel(window, want, 1e-2, "window")


@pytest.mark.gpu
@pytest.mark.parametrize("slot", [[0], list(range(16))])
def test_kda_conv_carried_gate_gpu(slot: list[int]) -> None:
    """The decode conv carrying f_b + the decay gate at GLM-5.3's width, bf16 weights and f."""
    spec = ConvSpec(64 * 128, 4, gate=KDAGateSpec(64, 128, -5.0), rank=128)
    step = ConvStep(spec, slot, "cuda", torch.bfloat16, seed=len(slot))
    gen = torch.Generator().manual_seed(7)
    f = torch.randn((len(slot), 128), generator=gen).to("cuda", torch.bfloat16)
    wf = (torch.randn((8192, 128), generator=gen) * 128 ** -0.5).to("cuda", torch.bfloat16)
    dt_bias, a_log = torch.randn(8192, generator=gen) * 0.5, torch.randn(64, generator=gen) * 0.5
    g = torch.full((len(slot), 8192), float("nan"), device="cuda")
    step.gate = kda_conv.Gate(f, wf, dt_bias.cuda(), a_log.cuda(), g)
    step.run(step.window.clone())
    at = ops.KDAGateAttrs(64, 128, -5.0)
    want = kda.kda_gate(Ctx(torch.float64, None, ()), at, f.double() @ wf.double().T,
                        dt_bias.double().cuda(), a_log.double().cuda())
    assert_rel(g, want, 1e-2, "carried gate")
