"""The chunked (WY / UT) KDA kernels against semantics.kda.kda (fp64): first the chunked algebra
itself in plain fp64 torch, then the kernels: one run over several chunks with a ragged tail,
sequences of several lengths in one step with padding rows, a prefill split over two launches,
equality with the recurrent kernel (emitters.kda), the other slots untouched, steep decays, and
refused bad inputs. CPU: Triton's interpreter in fp32 at test-size chunks (16 and 32 rows; 64
once); GPU (`gpu` mark): bf16 inputs at GLM-5.3 width (64 heads x 128), 8192 tokens."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters import kda, kda_chunk
from hyperloom.codegen.emitters.kda_chunk import KDAChunkSpec
from hyperloom.ir.semantics.kda import l2norm
from tests.codegen.test_kda import Step
from tests.tolerances import REL, assert_close, assert_rel


class ChunkStep(Step):
    """test_kda's random step (g in (-5, 0), random fp32 state, NaN-poisoned out), run through
    the chunked kernels."""

    def run(self, state: torch.Tensor, rows: slice | None = None) -> None:
        rows = rows or slice(0, self.q.shape[0])
        src = kda_chunk.source("kc", self.spec, header="test")
        kernels = tuple(load(src, n, self.device, "kc") for n in kda_chunk.kernel_names("kc"))
        kda_chunk.launch(kernels, self.spec, q=self.q[rows], k=self.k[rows], v=self.v[rows],
                         g=self.g[rows], b=self.b[rows], slot=self.slot[rows], state=state,
                         out=self.out[rows], rows=rows.stop - rows.start)

    def run_recurrent(self, state: torch.Tensor) -> torch.Tensor:
        spec = kda.KDASpec(self.spec.heads, self.spec.head_dim)
        kernel = load(kda.source("kr", spec, header="test"), "kr", self.device)
        out = torch.full_like(self.out, float("nan"))
        kda.launch(kernel, spec, q=self.q, k=self.k, v=self.v, g=self.g, b=self.b,
                   slot=self.slot, state=state, out=out, rows=self.q.shape[0])
        return out


def chunked_torch(step: Step, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The UT transform per chunk of each run, plain fp64 torch: (out of the live rows, state)."""
    h, d = step.spec.heads, step.spec.head_dim
    live = step.slot >= 0
    q, k, v, g = (t[live].double().view(-1, h, d).transpose(0, 1) for t in
                  (step.q, step.k, step.v, step.g))  # [H, T, d]
    q, k, beta = l2norm(q) * d ** -0.5, l2norm(k), torch.sigmoid(step.b[live].double()).T
    state, slot = step.state.double().clone(), step.slot[live].tolist()
    out = torch.empty_like(v)
    starts = [r for r in range(len(slot)) if r == 0 or slot[r] != slot[r - 1]]
    for start, stop in zip(starts, starts[1:] + [len(slot)]):
        s = state[slot[start]].transpose(-1, -2)  # [H, dk, dv]: the kernels store S^T
        for c0 in range(start, stop, chunk):
            r = slice(c0, min(stop, c0 + chunk))
            qc, kc, vc, bc, gc = q[:, r], k[:, r], v[:, r], beta[:, r], g[:, r].cumsum(1)
            e = (gc[:, :, None] - gc[:, None, :]).exp()  # [H, i, j, c]: exp(G_i - G_j)
            n = gc.shape[1]
            a = torch.einsum("hic,hjc,hijc->hij", kc, kc, e) * bc[:, :, None]
            t = torch.linalg.inv(torch.eye(n, dtype=torch.float64) + a.tril(-1))
            w = t @ (bc[:, :, None] * kc * gc.exp())
            vn = t @ (bc[:, :, None] * vc) - w @ s
            aqk = torch.einsum("hic,hjc,hijc->hij", qc, kc, e).tril()
            out[:, r] = (qc * gc.exp()) @ s + aqk @ vn
            last = gc[:, -1:]
            s = last.exp().transpose(1, 2) * s + (kc * (last - gc).exp()).transpose(1, 2) @ vn
        state[slot[start]] = s.transpose(-1, -2)
    return out.transpose(0, 1).reshape(-1, h * d), state


# runs: slot 2 x23 (two chunks of 16 and a tail), 0 x1, 4 x5, 1 x16 (exactly one chunk),
# 6 x40 (chunk 32: a full chunk and a tail), then padding; slots 3 and 5 untouched
MIXED = [2] * 23 + [0] + [4] * 5 + [1] * 16 + [6] * 40 + [-1] * 3


def test_plan_tables() -> None:
    # runs crossing the plan's 1024-row scan steps, a one-row run, exact multiples, padding
    lengths = {5: 700, 0: 1, 7: 900, 2: 33, 1: 64, 3: 300}
    slot = [s for s, n in lengths.items() for _ in range(n)] + [-1] * 102
    spec = KDAChunkSpec(1, 16)
    plan = load(kda_chunk.source("kc", spec), "kc_plan", "cpu", "kc")
    work = kda_chunk.scratch(spec, len(slot), 8, "cpu")
    plan[(1,)](torch.tensor(slot), len(slot), work.chunks, work.runs, work.count, C=spec.chunk)
    chunks, firsts, row = [], [], 0
    for n in lengths.values():
        firsts.append(len(chunks))
        chunks += range(row, row + n, spec.chunk)
        row += n
    assert work.count.tolist() == [len(chunks), len(lengths)]
    assert len(chunks) <= kda_chunk.bounds(spec, len(slot), 8)[1]
    assert work.chunks[:len(chunks)].tolist() == chunks
    assert work.runs[:len(lengths) + 1].tolist() == firsts + [len(chunks)]


def test_padding_only_step() -> None:
    step = ChunkStep(KDAChunkSpec(2, 16, chunk=16), [-1] * 4, "cpu", torch.float32, seed=11)
    state = step.state.clone()
    step.run(state)
    assert step.out.isnan().all() and torch.equal(state, step.state)


def test_chunked_algebra_matches_semantics() -> None:
    step = ChunkStep(KDAChunkSpec(2, 16), MIXED, "cpu", torch.float64, seed=0)
    out, state = chunked_torch(step, 16)
    want_out, want_state = step.reference(torch.float64)
    assert_close(out, want_out, torch.float64, "chunked torch out")
    assert_close(state, want_state, torch.float64, "chunked torch state")


def check_step(spec: KDAChunkSpec, slot: list[int], seed: int) -> ChunkStep:
    step = ChunkStep(spec, slot, "cpu", torch.float32, seed=seed)
    state = step.state.clone()
    step.run(state)
    out, want = step.reference(torch.float64)
    live = step.slot >= 0
    assert_close(step.out[live], out, torch.float32, "out")
    assert_close(state, want, torch.float32, "state")
    assert step.out[~live].isnan().all(), "a padding row was written"
    used = set(slot)
    for s in range(step.slots):
        if s not in used:
            assert torch.equal(state[s], step.state[s]), f"idle slot {s}'s state changed"
    return step


def test_one_run_over_several_chunks() -> None:
    check_step(KDAChunkSpec(2, 32, chunk=16), [3] * 53 + [-1] * 2, seed=1)  # 3 chunks + 5


@pytest.mark.parametrize("head_dim,chunk", [(16, 16), (16, 32), (32, 32)])
def test_sequences_of_several_lengths(head_dim: int, chunk: int) -> None:
    check_step(KDAChunkSpec(2, head_dim, chunk=chunk), MIXED, seed=head_dim + chunk)


def test_chunk_of_64_rows() -> None:
    # the module's chunk: four 16-row blocks in the in-chunk products
    check_step(KDAChunkSpec(2, 16), [1] * 150 + [0] * 20, seed=5)


def test_steep_decays() -> None:
    # g down to -40 a token: a chunk's log decay reaches -2500 and nothing may overflow
    step = ChunkStep(KDAChunkSpec(2, 16), [0] * 70, "cpu", torch.float32, seed=6)
    step.g *= 8
    state = step.state.clone()
    step.run(state)
    out, want = step.reference(torch.float64)
    assert_close(step.out, out, torch.float32, "out")
    assert_close(state, want, torch.float32, "state")


def test_decays_at_the_gate_bound_take_the_factored_diagonal(monkeypatch) -> None:
    # g in [-5, -4.5] a token, GLM-5.3's bound: a 16-row block's decay from its start passes
    # -64 (the factored diagonal once needed the exact form there), but never drifts more than
    # 40 from its middle row's, the factored form's reference; the exact form is poisoned here
    real = kda_chunk.source
    monkeypatch.setattr(kda_chunk, "source", lambda *a, **kw: real(*a, **kw).replace(
        "            ad += da\n", "            ad += da * float('nan')\n"))
    step = ChunkStep(KDAChunkSpec(2, 16), [0] * 70, "cpu", torch.float32, seed=12)
    step.g = -5.0 + 0.5 * torch.rand(step.g.shape, generator=torch.Generator().manual_seed(12))
    state = step.state.clone()
    step.run(state)
    out, want = step.reference(torch.float64)
    assert_close(step.out, out, torch.float32, "out")
    assert_close(state, want, torch.float32, "state")


def test_steep_and_mild_heads_in_one_launch() -> None:
    # head 0 steep (every block past the factored diagonal's range: the exact form), head 1
    # mild (the factored form), in the same blocks of the same launch
    step = ChunkStep(KDAChunkSpec(2, 16), [1] * 70, "cpu", torch.float32, seed=11)
    step.g[:, :16] *= 8
    step.g[:, 16:] *= 0.5
    state = step.state.clone()
    step.run(state)
    out, want = step.reference(torch.float64)
    assert_close(step.out, out, torch.float32, "out")
    assert_close(state, want, torch.float32, "state")


def test_prefill_split_over_two_launches() -> None:
    step = ChunkStep(KDAChunkSpec(2, 32, chunk=16), [4] * 45, "cpu", torch.float32, seed=7)
    whole = step.state.clone()
    step.run(whole)
    one = step.out.clone()
    parts = step.state.clone()
    step.run(parts, slice(0, 20))  # the second launch's chunks start mid-sequence
    step.run(parts, slice(20, 45))
    assert_close(step.out, one, torch.float32, "out over two launches")
    assert_close(parts, whole, torch.float32, "state over two launches")


def test_chunked_equals_recurrent_kernel() -> None:
    step = ChunkStep(KDAChunkSpec(2, 32, chunk=16), MIXED, "cpu", torch.float32, seed=8)
    chunked, recurrent = step.state.clone(), step.state.clone()
    step.run(chunked)
    out = step.run_recurrent(recurrent)
    live = step.slot >= 0
    assert_close(step.out[live], out[live], torch.float32, "chunked vs recurrent out")
    assert_close(chunked, recurrent, torch.float32, "chunked vs recurrent state")


@pytest.mark.parametrize("size", [1.0, 1e6, 1e-6])  # v and the state beyond fp16's range
def test_fp16_row_products(size: float) -> None:
    # W, U / V', K', q exp(G) and the chunks' starting states in fp16 (the scratch of 16-bit
    # activations): the kernels cast on store and load, and scale U, V' and the states by
    # powers of two into fp16's range; the result within fp16's rounding of the fp32 math
    spec = KDAChunkSpec(2, 32, chunk=16)
    step = ChunkStep(spec, MIXED, "cpu", torch.float32, seed=12)
    step.v *= size
    step.state *= size
    assert kda_chunk.narrow_dtype(torch.bfloat16) == torch.float16
    work = kda_chunk.scratch(spec, len(MIXED), step.slots, "cpu", torch.float16)
    assert {getattr(work, n).dtype for n in ("w", "u", "kd", "qe", "hs", "t")} == {torch.float16}
    state = step.state.clone()
    src = kda_chunk.source("kc", spec, header="test")
    kernels = tuple(load(src, n, "cpu", "kc") for n in kda_chunk.kernel_names("kc"))
    kda_chunk.launch(kernels, spec, q=step.q, k=step.k, v=step.v, g=step.g, b=step.b,
                     slot=step.slot, state=state, out=step.out, rows=len(MIXED), work=work)
    out, want = step.reference(torch.float64)
    live = step.slot >= 0
    assert_rel(step.out[live], out, REL[torch.float16], "out")
    assert_rel(state, want, REL[torch.float16], "state")


def test_bad_inputs_are_refused() -> None:
    spec = KDAChunkSpec(2, 16, chunk=16)
    step = ChunkStep(spec, [0] * 20, "cpu", torch.float32, seed=9)
    with pytest.raises(ValueError, match=r"KDA state.*\(5, 2, 16, 8\)"):
        step.run(step.state[:, :, :, :8].contiguous())
    step.q = step.q[:, :16]
    with pytest.raises(ValueError, match=r"KDA q: .*32.*\(20, 16\)"):
        step.run(step.state.clone())
    step = ChunkStep(spec, [0] * 20, "cpu", torch.float32, seed=9)
    half = kda_chunk.scratch(spec, 20, step.slots, "cpu", torch.float16)
    half = dataclasses.replace(half, u=half.u.float())  # all narrow, or all fp32
    with pytest.raises(ValueError, match=r"scratch dtypes: .*'u': torch.float32"):
        kda_chunk.launch((None,) * 6, spec, q=step.q, k=step.k, v=step.v, g=step.g, b=step.b,
                         slot=step.slot, state=step.state, out=step.out, rows=20, work=half)
    small = kda_chunk.scratch(spec, 10, step.slots, "cpu")
    with pytest.raises(ValueError, match=r"scratch w: .*\(20, 2, 16\).*\(10, 2, 16\)"):
        kda_chunk.launch((None,) * 6, spec, q=step.q, k=step.k, v=step.v, g=step.g, b=step.b,
                         slot=step.slot, state=step.state, out=step.out, rows=20, work=small)


@pytest.mark.gpu
def test_kda_chunk_gpu() -> None:
    spec = KDAChunkSpec(64, 128)
    step = ChunkStep(spec, [2] * 5000 + [0] * 3192, "cuda", torch.bfloat16, seed=10)
    state = step.state.clone()
    step.run(state)
    out, want = step.reference(torch.float32)
    # the chunk walk's products are TF32: 3e-4 relative error in an fp64 simulation
    assert_rel(step.out.float(), out, 1e-2, "out")
    assert_rel(state, want, 2e-3, "state")
    recurrent = step.state.clone()
    assert_rel(step.out.float(), step.run_recurrent(recurrent).float(), 1e-2, "vs recurrent")
    assert_rel(state, recurrent, 2e-3, "state vs recurrent")
