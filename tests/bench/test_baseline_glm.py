"""The PyTorch baseline of GLM-5.3 (KDA, DSA + MLA, routed MoE, mHC) against the reference
interpreter on the tiny config in fp32: two sequences in lockstep through a prompt that crosses
a KDA chunk and many DSA pools, a continued prefill and decode steps across a pool boundary;
eager and under torch.compile. Then the scenarios' floors for it, counted by hand."""

from __future__ import annotations

import pytest
import torch

import hyperloom
from hyperloom.bench import baseline_kda, baseline_moe
from hyperloom.bench.lowering import lower, run_routed
from hyperloom.bench.scenarios import Bench
from hyperloom.bench.work import decode_bytes, prefill_flops
from hyperloom.ir import ops
from hyperloom.ir.semantics import moe
from hyperloom.ir.semantics.context import Ctx
from hyperloom.ir.semantics.kda import l2norm
from hyperloom.models.random_weights import random_weights
from tests.tolerances import REL, assert_close, assert_rel

PROMPT, MORE, CAP = 70, 20, 128  # 70 > the KDA chunk (64); 20 rows continue it


@pytest.fixture(scope="module")
def glm():
    spec = hyperloom.build("glm5next", "tiny", dtype=torch.float32)
    return spec, random_weights(spec, seed=4)


def _steps(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(ids [2 * T], pos [2 * T]) a call: the prompt, its continuation, four decode rows."""
    gen = torch.Generator().manual_seed(seed)
    out, at = [], 0
    for t in (PROMPT, MORE, 1, 1, 1, 1):
        out.append((torch.randint(0, 256, (2, t), generator=gen).flatten(),
                    torch.arange(at, at + t).repeat(2)))
        at += t
    return out


def _reference(spec, w, steps) -> list[torch.Tensor]:
    ref = hyperloom.engine(spec, w, backend="reference", max_seq_len=CAP, max_sequences=2)
    seqs = [ref.new_sequence() for _ in range(2)]
    out = []
    for ids, _ in steps:
        rows = ids.view(2, -1)
        if rows.shape[1] == 1:
            out.append(ref.decode(seqs, rows[:, 0]))
        else:
            out.append(torch.cat([ref.prefill(s, r) for s, r in zip(seqs, rows)]))
    return out


def test_glm_baseline_matches_the_reference(glm):
    spec, w = glm
    steps = _steps(1)
    base = lower(spec.main, w, CAP, "cpu", slots=2)
    for i, ((ids, pos), want) in enumerate(zip(steps, _reference(spec, w, steps))):
        assert_close(base(ids, pos)[0], want, torch.float32, f"call {i}")


def test_every_kda_path_is_exercised(glm, monkeypatch):
    """The prompt takes the chunked form and decode the loop: each, made wrong, fails."""
    spec, w = glm
    steps = _steps(2)
    want = _reference(spec, w, steps)
    for name in ("_chunked", "_loop"):
        real = getattr(baseline_kda, name)
        monkeypatch.setattr(baseline_kda, name, lambda q, *a, real=real: real(q * 1.01, *a))
        base = lower(spec.main, w, CAP, "cpu", slots=2)
        got = [base(ids, pos)[0] for ids, pos in steps]
        assert any((g - x).abs().max() > 1e-3 for g, x in zip(got, want)), name
        monkeypatch.setattr(baseline_kda, name, real)


@pytest.mark.parametrize("bound", [-5.0, -40.0])
def test_chunked_kda_equals_the_token_loop_in_fp64(bound):
    """150 rows (chunks of 64, the last padded) from a random state; a gate of -40 a token
    spans 2560 across a chunk, far past exp's fp64 range: the sub-block split must hold."""
    gen = torch.Generator().manual_seed(6)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    q, k = l2norm(randn(2, 3, 150, 16)) * 0.25, l2norm(randn(2, 3, 150, 16))
    v, s0 = randn(2, 3, 150, 16), randn(2, 3, 16, 16)
    g = bound * torch.sigmoid(randn(2, 3, 150, 16))
    beta = torch.rand(2, 3, 150, generator=gen, dtype=torch.float64)
    (o1, s1), (o2, s2) = (f(q, k, v, g, beta, s0) for f in (baseline_kda._loop,
                                                           baseline_kda._chunked))
    assert torch.isfinite(o2).all() and torch.isfinite(s2).all()
    assert_close(o2, o1, torch.float64, "outputs")
    assert_close(s2, s1, torch.float64, "state")


def test_glm_baseline_under_torch_compile(glm):
    spec, w = glm
    prompt, _, (tok, _), *_ = _steps(3)
    steps = [prompt, (tok, torch.full((2,), PROMPT))]  # the chunked and the loop forms
    eager = lower(spec.main, w, CAP, "cpu", slots=2)
    want = [eager(ids, pos)[0] for ids, pos in steps]
    compiled = torch.compile(lower(spec.main, w, CAP, "cpu", slots=2))
    for i, ((ids, pos), x) in enumerate(zip(steps, want)):
        assert_close(compiled(ids, pos)[0], x, torch.float32, f"compiled call {i}")


def test_decode_counts_the_chosen_experts_and_every_state(glm):
    """GLM tiny, fp32: per sequence, KDA states are read and rewritten (3 layers of 4 x 16 x 16
    recurrent + 192 x 3 window), MLA reads the latent rows it attends to (at most topk 8 + tail
    3 of 32), the indexer every complete pool's key (16) and writes a [key | gate] row (32)."""
    spec, w = glm
    kda = 3 * 2 * (4 * 16 * 16 + 192 * 3) * 4
    for ctx, rows in ((5, 6), (100, 11)):
        seq = kda + rows * 32 * 4 + (ctx + 1) // 4 * 16 * 4 + 32 * 4 + 64 * 4  # + embedding row
        assert decode_bytes(spec, ctx, 2, [3, 3]) - decode_bytes(spec, ctx, 1, [3, 3]) == seq
    expert = 3 * 32 * 64 * 4  # gate, up and down rows of one expert
    assert decode_bytes(spec, 9, 1, [2, 5]) - decode_bytes(spec, 9, 1, [2, 2]) == 3 * expert
    assert decode_bytes(spec, 9, 1) == decode_bytes(spec, 9, 1, [2, 2])  # top_k a sequence
    base = lower(spec.main, w, CAP, "cpu", slots=3)
    (ids, pos), *_ = _steps(4)
    _, chosen = run_routed(base, ids[:3], pos[:3])
    assert len(chosen) == 2 and all(2 <= c <= 6 for c in chosen)


def test_prefill_counts_each_op_in_its_cheapest_form(glm):
    spec, _ = glm
    n = 10
    per_node = {}
    for node in spec.main.nodes:
        per_node.setdefault(node.op.value, []).append(node)
    experts = 2 * n * 2 * 3 * 32 * 64  # top_k 2 of 8 experts a row
    kda = 6 * n * 4 * 16 * 16
    index = 2 * 4 * 16 * sum((i + 1) // 4 for i in range(n))
    seen = sum(min(i + 1, 11) for i in range(n))
    mla = 2 * n * 32 * 4 * 32 + min(2 * 4 * 32 * seen, 4 * 4 * 32 * seen)
    gemm = sum(2 * n * int(spec.main.param(x.args[1][1:]).type.shape[0])
               * int(spec.main.param(x.args[1][1:]).type.shape[1])
               for op in ("linear", "lm_head", "moe_router") for x in per_node[op])
    assert prefill_flops(spec, n) == gemm + 2 * experts + 3 * kda + index + mla


def test_bench_decodes_glm(glm):
    """The engine's decode step against the baseline, checked first (prefill's path is the
    model's own and its FLOPs are counted above; the interpreter takes minutes over it)."""
    spec, _ = glm
    bench = Bench(spec, torch.device("cpu"), torch.float32, 1e-4, compile_modes=False)
    r = bench.decode(5, batch=2)
    assert r.rel_err <= 1e-4 and r.kernels >= 10 and r.ours_s > 0
    assert r.baselines_s["eager"] > 0 and r.work > decode_bytes(spec, 5, 1, [1, 1])


def test_bf16_experts_take_torch_grouped_gemm():
    """bf16 stacks go through torch._grouped_mm (torch's own CPU GEMM here, not Triton's
    interpreter): within bf16's tolerance of the reference on the same rounded inputs."""
    gen = torch.Generator().manual_seed(5)
    x, wg, wu = (torch.randn(s, generator=gen) * 0.2 for s in ((30, 64), (8, 32, 64), (8, 32, 64)))
    wd = torch.randn(8, 64, 32, generator=gen) * 0.2
    weights, ids = torch.rand(30, 2, generator=gen), torch.randint(0, 8, (30, 2), generator=gen)
    ids[:, 1] = (ids[:, 0] + 1 + ids[:, 1] % 7) % 8  # two distinct experts a row
    args = [t.bfloat16() for t in (x, wg, wu, wd)]
    got = baseline_moe.experts(args[0], weights, ids.int(), *args[1:], limit=10.0,
                               dtype=torch.float32)
    want = moe.moe_experts(Ctx(torch.float32, None, ()), ops.ExpertsAttrs(10.0), args[0].float(),
                           weights, ids, *(a.float() for a in args[1:]))
    assert_rel(got, want, REL[torch.bfloat16], "grouped-GEMM experts")
