"""Cache semantics of both engines: however a sequence's tokens are split into steps, batched
with other sequences, rolled back or placed in a reused slot, its logits are the ones a single
fresh prefill (or prefill and decode) of the reference engine gives. Random token ids, seeded
random weights, fp32 unless stated."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator

import pytest
import torch

import hyperloom
from hyperloom.errors import InputError
from hyperloom.ir import Op
from hyperloom.ir.engine import ReferenceEngine
from hyperloom.models import Model
from hyperloom.models.random_weights import random_weights
from tests.tolerances import assert_close

F32 = torch.float32
CASES = [("llama", "tiny"), ("llama", "tiny-hc"), ("glm5next", "tiny")]
N = 13  # prompt length: glm5next tiny (topk 8, kpool 4) keeps only 2 of the 3 complete pools
CHUNKS = [(7, 9), (5, 1, 10), (6, 1, 2, 7)]  # 16 tokens; no boundary on a kpool edge


@dataclasses.dataclass(frozen=True)
class Setup:
    spec: Model
    weights: dict[str, torch.Tensor]
    backend: str = "reference"

    def engine(self, dtype: torch.dtype = F32, slots: int = 4) -> ReferenceEngine:
        # the compiled engine prefills in sub-chunks of 5 rows, off every kpool edge
        return hyperloom.engine(self.spec, self.weights, dtype=dtype, max_seq_len=64,
                                max_sequences=slots, backend=self.backend, prefill_chunk=5)

    def tokens(self, n: int, seed: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, self.spec.vocab_size, (n,), generator=g)
        assert ids.unique().numel() > 1
        return ids


@functools.cache
def setup(model: str, config: str, backend: str = "reference") -> Setup:
    spec = hyperloom.build(model, config, dtype=F32)
    return Setup(spec, random_weights(spec, seed=0), backend)


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    # tiny tensors: OpenMP fork/join costs far more than the math (~1000x on 2 cores)
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


BACKENDS = ("reference", "compiled")


@pytest.fixture(params=[(*c, b) for b in BACKENDS for c in CASES],
                ids=[f"{m}-{c}-{b}" for b in BACKENDS for m, c in CASES])
def m(request: pytest.FixtureRequest) -> Setup:
    return setup(*request.param)


def oracle(m: Setup) -> Setup:
    """The reference backend on the same spec and weights: every backend's oracle (the compiled
    engine on the interpreter costs seconds a step; the reference, milliseconds)."""
    return dataclasses.replace(m, backend="reference")


def alone(m: Setup, prompt: torch.Tensor, cont: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A fresh engine, prefill the prompt, then decode `cont` one token at a time."""
    eng = m.engine()
    s = eng.new_sequence()
    return (eng.prefill(s, prompt), *(eng.decode([s], [t])[0] for t in cont.tolist()))


def test_lengths_exercise_sparse_selection() -> None:
    # guards the choice of N and CHUNKS against config edits
    c = setup("glm5next", "tiny").spec.config
    assert N + 1 >= c.index_topk + c.index_kpool and N % c.index_kpool
    for chunks in CHUNKS:
        assert sum(chunks) > c.index_topk + c.index_kpool
        assert all(sum(chunks[:i]) % c.index_kpool for i in range(1, len(chunks))), chunks


def test_dsa_selection_is_sparse() -> None:
    # expose the indexer's selection as an extra output: the last rows must drop tokens
    m = setup("glm5next", "tiny")
    g = m.spec.main
    (idx,) = g.by_op(Op.DSA_INDEX)
    spec = dataclasses.replace(m.spec, main=dataclasses.replace(
        g, outputs=g.outputs + (("selection", idx.outs[0]),)))
    eng = hyperloom.engine(spec, m.weights, max_seq_len=64, max_sequences=1)
    sel = eng.hidden(eng.new_sequence(), m.tokens(16, seed=1))["selection"]
    chosen = (sel >= 0).sum(1)
    assert (chosen[-4:] < torch.arange(13, 17)).all(), chosen
    assert chosen.max() <= idx.attrs.width


# -- steps ------------------------------------------------------------------------------------

def test_decode_matches_prefill(m: Setup) -> None:
    ids = m.tokens(N + 3, seed=1)
    eng = oracle(m).engine()
    want = eng.prefill(eng.new_sequence(), ids)
    prompt, *steps = alone(m, ids[:N], ids[N:])
    assert_close(prompt, want[:N], F32, "prompt rows")
    for i, row in enumerate(steps):
        assert_close(row, want[N + i], F32, f"decode step {i}")


def check_chunks(m: Setup, chunks: tuple[int, ...]) -> None:
    ids = m.tokens(sum(chunks), seed=2)
    ref = oracle(m).engine()
    want = ref.prefill(ref.new_sequence(), ids)
    eng = m.engine()
    s = eng.new_sequence()
    got = torch.cat([eng.prefill(s, part) for part in ids.split(list(chunks))])
    assert s.length == len(ids)
    assert_close(got, want, F32, f"chunks {chunks}")


@pytest.mark.parametrize("chunks", CHUNKS)
def test_chunked_prefill(m: Setup, chunks: tuple[int, ...]) -> None:
    check_chunks(m, chunks)


@pytest.mark.parametrize("chunks", [(1, 15), (3, 1, 12)])
def test_first_chunk_shorter_than_a_pool(m: Setup, chunks: tuple[int, ...]) -> None:
    # regression: dsa_index once failed with no complete kpool cached (view of 0 rows)
    check_chunks(m, chunks)


def test_first_draft_shorter_than_a_pool() -> None:
    # the same for the MTP drafter's own indexer
    m = setup("glm5next", "tiny")
    ids = m.tokens(7, seed=18)
    eng = m.engine()
    whole, short = eng.new_sequence(), eng.new_sequence()
    hidden = eng.hidden(whole, ids[:6])["hidden"]
    want = eng.draft(whole, ids[1:], hidden)
    assert_close(eng.draft(short, ids[1:3], hidden[:2]), want[:2], F32, "short draft")


# -- several sequences ------------------------------------------------------------------------

def test_interleaved_sequences(m: Setup) -> None:
    pa, pb = m.tokens(N - 2, seed=3), m.tokens(N + 1, seed=4)
    ca, cb = m.tokens(3, seed=5), m.tokens(3, seed=6)
    want_a, want_b = alone(oracle(m), pa, ca), alone(oracle(m), pb, cb)
    eng = m.engine()
    a, b = eng.new_sequence(), eng.new_sequence()
    got_a, got_b = [eng.prefill(a, pa)], [eng.prefill(b, pb)]
    got_a.append(eng.decode([a], ca[:1])[0])
    got_b.append(eng.decode([b], cb[:1])[0])
    both = eng.decode([a, b], [ca[1], cb[1]])  # one step, two sequences at different lengths
    got_a.append(both[0])
    got_b.append(both[1])
    both = eng.decode([b, a], [cb[2], ca[2]])  # slots out of order
    got_b.append(both[0])
    got_a.append(both[1])
    for i, (x, y) in enumerate(zip(got_a, want_a, strict=True)):
        assert_close(x, y, F32, f"A step {i}")
    for i, (x, y) in enumerate(zip(got_b, want_b, strict=True)):
        assert_close(x, y, F32, f"B step {i}")


def test_free_then_new_sequence_starts_clean(m: Setup) -> None:
    pa, pb, pc = m.tokens(N, seed=7), m.tokens(N - 3, seed=8), m.tokens(N - 5, seed=9)
    cb = m.tokens(2, seed=10)
    eng = m.engine(slots=2)
    a, b = eng.new_sequence(), eng.new_sequence()
    eng.prefill(a, pa)
    eng.prefill(b, pb)
    eng.free(a)
    c = eng.new_sequence()
    assert c.slot == a.slot and c.length == 0
    # c is shorter than a was: stale cache rows and a's fixed state must not leak in
    assert_close(eng.prefill(c, pc), alone(oracle(m), pc, pc[:0])[0], F32, "reused slot")
    want_b = alone(oracle(m), pb, cb)[1:]
    for i, t in enumerate(cb.tolist()):
        assert_close(eng.decode([b], [t])[0], want_b[i], F32, f"neighbour step {i}")
    with pytest.raises(InputError, match="freed"):
        eng.decode([a], [1])


# -- snapshot / rollback ----------------------------------------------------------------------

def test_rollback_replays_identically(m: Setup) -> None:
    prompt, cont = m.tokens(N, seed=11), m.tokens(3, seed=12)
    eng = m.engine()
    s = eng.new_sequence()
    eng.prefill(s, prompt)
    snap = eng.snapshot(s)
    first = [eng.decode([s], [t])[0] for t in cont.tolist()]
    eng.rollback(s, snap)
    assert s.length == N
    again = [eng.decode([s], [t])[0] for t in cont.tolist()]
    for i, (x, y) in enumerate(zip(again, first, strict=True)):
        assert_close(x, y, F32, f"replayed step {i}")


def test_rollback_then_other_tokens(m: Setup) -> None:
    # the restored state must be the snapshot's, not merely reproducible: compare to a fresh run
    prompt, x, y = m.tokens(N, seed=13), m.tokens(4, seed=14), m.tokens(3, seed=15)
    eng = m.engine()
    s = eng.new_sequence()
    eng.prefill(s, prompt)
    snap = eng.snapshot(s)
    for _ in range(2):  # one snapshot serves several rollbacks
        eng.prefill(s, x)  # crosses a kpool boundary
        eng.rollback(s, snap)
    want = alone(oracle(m), prompt, y)[1:]
    for i, t in enumerate(y.tolist()):
        assert_close(eng.decode([s], [t])[0], want[i], F32, f"step {i} after rollback")


def test_rollback_refuses_what_it_cannot_restore(m: Setup) -> None:
    """Another sequence's snapshot, or one whose tokens a step after a rollback rewrote: refused,
    the sequence untouched. Rolling forward again before any write is still exact."""
    eng = m.engine()
    a, b = eng.new_sequence(), eng.new_sequence()
    eng.prefill(a, m.tokens(N, seed=17))
    eng.prefill(b, m.tokens(N - 2, seed=18))
    early, of_b = eng.snapshot(a), eng.snapshot(b)
    eng.decode([a], [3])
    late = eng.snapshot(a)
    want = eng.decode([a], [5])[0]
    with pytest.raises(InputError, match="snapshot is of the sequence in slot 1"):
        eng.rollback(a, of_b)
    assert a.length == N + 2
    eng.rollback(a, early)
    eng.rollback(a, late)  # forward: the token at N is still the one `late` counts
    assert_close(eng.decode([a], [5])[0], want, F32, "rolled forward")
    eng.rollback(a, early)
    eng.decode([a], [4])  # rewrites position N
    with pytest.raises(InputError, match="counts tokens from position 13 on"):
        eng.rollback(a, late)
    assert a.length == N + 1
    eng.rollback(a, early)  # still good: it counts only tokens before N
    assert a.length == N


def test_draft_state_chunked_and_rolled_back() -> None:
    # MTP drafter keeps its own caches and length; split steps and rollback must not show
    m = setup("glm5next", "tiny")
    ids = m.tokens(N + 1, seed=16)
    eng = m.engine()
    s = eng.new_sequence()
    hidden = eng.hidden(s, ids[:N])["hidden"]
    snap = eng.snapshot(s)
    want = eng.draft(s, ids[1:], hidden)
    eng.rollback(s, snap)
    assert s.draft_length == 0
    got = torch.cat([eng.draft(s, ids[1:6], hidden[:5]), eng.draft(s, ids[6:], hidden[5:])])
    assert s.draft_length == N
    assert_close(got, want, F32, "chunked draft")
    with pytest.raises(InputError, match="hidden must be floating point"):
        eng.draft(s, ids[:1], hidden[:1].long())
    assert s.draft_length == N


# -- precision --------------------------------------------------------------------------------

def test_fp64_matches_fp32(m: Setup) -> None:
    if m.backend == "compiled":
        pytest.skip("the compiled backend runs bf16 / fp32 only")
    ids = m.tokens(N + 1, seed=17)
    out = {}
    for dtype in (torch.float64, F32):
        eng = m.engine(dtype)
        s = eng.new_sequence()
        out[dtype] = torch.cat([eng.prefill(s, ids[:N]), eng.decode([s], ids[N:])])
    assert_close(out[F32], out[torch.float64], F32, "fp32 vs fp64")


def test_a_step_that_fails_midway_leaves_the_sequence_as_it_was(monkeypatch) -> None:
    """KDA state is written before the LM head runs: a failure there must not leak into it."""
    from hyperloom.errors import IRError
    from hyperloom.ir import semantics

    gen = torch.Generator().manual_seed(21)
    prompt, more = torch.randint(0, 256, (6,), generator=gen), torch.randint(0, 256, (5,),
                                                                           generator=gen)
    eng = hyperloom.load("glm5next", "tiny", dtype=torch.float32, backend="reference")
    seq = eng.new_sequence()
    eng.prefill(seq, prompt)

    def boom(*args):
        raise RuntimeError("injected failure")

    monkeypatch.setitem(semantics.EVAL, Op.LM_HEAD, boom)
    with pytest.raises(IRError, match="injected failure"):
        eng.prefill(seq, more)
    monkeypatch.undo()
    fresh = hyperloom.load("glm5next", "tiny", dtype=torch.float32, backend="reference")
    ref = fresh.new_sequence()
    fresh.prefill(ref, prompt)
    assert seq.length == len(prompt)
    assert_close(eng.prefill(seq, more), fresh.prefill(ref, more), torch.float32, "after failure")
