"""Model-based test of the engine API: a seeded random program of new / prefill / decode / free
steps over up to 8 sequence slots, with refused steps mixed in. The model keeps every live
sequence's token history; after each step, every row the engine returns must equal what a fresh
single-sequence reference engine gives for that sequence alone, and every refused step must
leave all sequences (lengths and the whole state store) exactly as they were.

The compiled engine runs llama tiny-hc (prefill sub-chunked by 4, decode replayed from padded
row buckets) and glm5next tiny (KDA state and conv windows by slot in its kernels); the reference
engine runs glm5next tiny (KDA fixed state and DSA caches per slot). On the H200 (`gpu` mark) the
compiled engine runs llama bench in bf16, contiguous and paged, against the fp32 reference on the
same card (relative error, the bf16 tolerance)."""

from __future__ import annotations

import dataclasses
import functools
import random
from collections import Counter
from collections.abc import Callable

import pytest
import torch

import hyperloom
from hyperloom.config import overrides
from hyperloom.errors import CapacityError, InputError
from hyperloom.ir.engine import Engine, Sequence
from hyperloom.models import Model
from hyperloom.models.random_weights import random_weights
from hyperloom.runtime.engine import CompiledEngine
from hyperloom.runtime.runner import buckets
from tests.tolerances import REL, assert_close, assert_rel

F32, BF16 = torch.float32, torch.bfloat16
STEPS = 60  # operations per program, refused ones included
SLOTS, CAPACITY, CHUNK = 8, 48, 4  # max_sequences, max_seq_len, prefill_chunk
STEER = 4.0  # weight factor for operations whose kind has not happened yet
MAX_PREFILL = 7  # tokens in one successful prefill: 1..7, so some span two chunks of 4
REFUSALS = ("refused_capacity", "refused_vocab", "refused_freed")
# every kind must occur in every program, or the program degenerated (see the final assert)
KINDS = ("new", "prefill", "decode", "free", "slot_reuse", "padded_decode") + REFUSALS


@dataclasses.dataclass(frozen=True)
class Case:
    model: str
    config: str
    backend: str
    seed: int
    kv_block_size: int = 0  # compiled: 16 pages the KV cache
    gpu: bool = False  # bf16 on the GPU against the fp32 reference there

    def __str__(self) -> str:
        paged = f"-paged{self.kv_block_size}" if self.kv_block_size else ""
        gpu = "-cuda-bf16" if self.gpu else ""
        return f"{self.model}-{self.config}-{self.backend}{paged}{gpu}-seed{self.seed}"

    @property
    def device(self) -> str:
        return "cuda" if self.gpu else "cpu"


CASES = [Case("llama", "tiny-hc", "compiled", s) for s in (1, 2)] + \
        [Case("llama", "tiny-hc", "compiled", 3, kv_block_size=16)] + \
        [Case("glm5next", "tiny", "compiled", 21)] + \
        [Case("glm5next", "tiny", "reference", s) for s in (11, 12, 13, 14, 15, 16)]
GPU_CASES = [Case("llama", "bench", "compiled", 31, gpu=True),
             Case("llama", "bench", "compiled", 32, kv_block_size=16, gpu=True)]


@functools.cache
def spec_and_weights(model: str, config: str,
                     dtype: torch.dtype = F32) -> tuple[Model, dict[str, torch.Tensor]]:
    spec = hyperloom.build(model, config, dtype=dtype)
    return spec, random_weights(spec, seed=0)


@functools.cache
def oracle(model: str, config: str, device: str = "cpu", dtype: torch.dtype = F32) -> Engine:
    """One single-slot fp32 reference engine per model (on the weights made for `dtype`),
    shared by every program."""
    _, weights = spec_and_weights(model, config, dtype)
    spec, _ = spec_and_weights(model, config)
    return hyperloom.engine(spec, weights, device=device, dtype=F32, backend="reference",
                            max_seq_len=CAPACITY, max_sequences=1)


def alone(case: Case, history: list[int]) -> torch.Tensor:
    """Logits of `history` prefilled into a fresh sequence (prefill(N) + decode equals
    prefill(N + 1): tests/ir/test_engine_state.py), one row per token."""
    eng = oracle(case.model, case.config, case.device, BF16 if case.gpu else F32)
    seq = eng.new_sequence()
    try:
        return eng.prefill(seq, history)
    finally:
        eng.free(seq)  # the single slot is reset by the next new_sequence


@dataclasses.dataclass(eq=False)
class Tracked:
    seq: Sequence
    history: list[int] = dataclasses.field(default_factory=list)

    @property
    def room(self) -> int:
        return CAPACITY - len(self.history)


class Program:
    """The state machine: picks a feasible operation, runs it on the engine, checks the result
    against the model, and updates the model."""

    def __init__(self, case: Case):
        dtype = BF16 if case.gpu else F32
        spec, weights = spec_and_weights(case.model, case.config, dtype)
        self.case, self.vocab = case, spec.vocab_size
        self.rng = random.Random(case.seed)
        with overrides(kv_block_size=case.kv_block_size):
            self.engine = hyperloom.engine(spec, weights, device=case.device, dtype=dtype,
                                           backend=case.backend, max_seq_len=CAPACITY,
                                           max_sequences=SLOTS, prefill_chunk=CHUNK)
        self.live: list[Tracked] = []
        self.freed: list[Sequence] = []  # stale handles, kept to try them again
        self.vacated: set[int] = set()  # slots some freed sequence held
        self.seen: Counter[str] = Counter()
        self.step = 0

    # -- driver ------------------------------------------------------------------------------
    def run(self, steps: int) -> None:
        for self.step in range(steps):
            ops = self.feasible()
            op = self.rng.choices(list(ops), weights=list(ops.values()))[0]
            getattr(self, op)()

    def feasible(self) -> dict[str, float]:
        """Weights of the operations the model allows now: new and free balance near 4-5 live
        sequences, and an operation that leads to a kind not yet seen weighs STEER times more,
        so a short program still covers every kind in KINDS."""
        roomy, n = bool(self.roomy()), len(self.live)
        ops = {"new": 0.5 + 0.5 * (SLOTS - n) if n < SLOTS else 0.0,
               "prefill": 3.0 if roomy else 0.0,
               "decode": 4.0 if roomy else 0.0,
               "free": 0.5 * n if n > 1 else 0.0,
               "refused_capacity": 0.6 if n else 0.0,
               "refused_vocab": 0.6 if roomy else 0.0,
               "refused_freed": 0.6 if self.freed else 0.0}
        return {op: w * (STEER if self.wanted(op) else 1.0) for op, w in ops.items() if w > 0}

    def wanted(self, op: str) -> bool:
        """Whether `op` leads to a kind in KINDS that has not happened yet."""
        few = len(self.roomy()) < 3  # a padded decode needs 3+ sequences first
        # slots are reused only once every slot has been handed out: open more sequences
        leads = {"new": ("new", "slot_reuse") + (("padded_decode",) if few else ()),
                 "free": ("free", "slot_reuse"),
                 "decode": ("decode",) + (() if few else ("padded_decode",))}
        return any(not self.seen[k] for k in leads.get(op, (op,)))

    def roomy(self) -> list[Tracked]:
        return [t for t in self.live if t.room > 0]

    def where(self, what: str) -> str:
        return f"{self.case} step {self.step}: {what}"

    def tokens(self, n: int) -> list[int]:
        return [self.rng.randrange(self.vocab) for _ in range(n)]

    # -- successful operations ---------------------------------------------------------------
    def new(self) -> None:
        seq = self.engine.new_sequence()
        assert seq.live and seq.length == 0, self.where("new sequence not fresh")
        held = {t.seq.slot for t in self.live}
        assert seq.slot not in held, self.where(f"slot {seq.slot} handed out twice")
        if seq.slot in self.vacated:
            self.seen["slot_reuse"] += 1
        self.live.append(Tracked(seq))
        self.seen["new"] += 1

    def prefill(self) -> None:
        t = self.rng.choice(self.roomy())
        ids = self.tokens(self.rng.randint(1, min(MAX_PREFILL, t.room)))
        got = self.engine.prefill(t.seq, ids)
        t.history += ids
        want = alone(self.case, t.history)[-len(ids):]
        self.compare(got, want, f"prefill {len(ids)} in slot {t.seq.slot}")
        self.check_lengths()
        self.seen["prefill"] += 1

    def decode(self) -> None:
        cands = self.roomy()
        batch = self.rng.sample(cands, self.batch_size(len(cands)))  # in random order
        ids = self.tokens(len(batch))
        replays = self.replays()
        got = self.engine.decode([t.seq for t in batch], ids)
        assert got.shape == (len(batch), self.vocab), self.where(f"decode shape {got.shape}")
        for i, (t, tok) in enumerate(zip(batch, ids)):
            t.history.append(tok)
            want = alone(self.case, t.history)[-1]
            self.compare(got[i], want, f"decode row {i} (slot {t.seq.slot}, {len(batch)} rows)")
        self.check_lengths()
        self.check_replayed(len(batch), replays)
        self.seen["decode"] += 1
        if len(batch) >= 3 and len(batch) not in buckets(SLOTS):
            self.seen["padded_decode"] += 1

    def compare(self, got: torch.Tensor, want: torch.Tensor, what: str) -> None:
        if self.case.gpu:
            assert_rel(got.float(), want, REL[BF16], self.where(what))
        else:
            assert_close(got, want, F32, self.where(what))

    def batch_size(self, most: int) -> int:
        padded = [n for n in range(3, most + 1) if n not in buckets(SLOTS)]
        if padded and not self.seen["padded_decode"]:
            return self.rng.choice(padded)  # steer: 3, 5, 6 or 7 rows fill a bucket of 4 or 8
        return self.rng.randint(1, most)

    def free(self) -> None:
        t = self.live.pop(self.rng.randrange(len(self.live)))
        self.engine.free(t.seq)
        assert not t.seq.live, self.where("freed sequence still live")
        self.freed.append(t.seq)
        self.vacated.add(t.seq.slot)
        self.seen["free"] += 1

    def check_lengths(self) -> None:
        for t in self.live:
            assert t.seq.live and t.seq.length == len(t.history), \
                self.where(f"slot {t.seq.slot}: length {t.seq.length}, fed {len(t.history)}")

    def replays(self) -> int:
        return self.engine.runners["main"].replays if self.compiled else 0

    @property
    def compiled(self) -> bool:
        return isinstance(self.engine, CompiledEngine)

    def check_replayed(self, rows: int, before: int) -> None:
        """A compiled decode step is padded to its bucket and served from a recording."""
        if not self.compiled:
            return
        runner = self.engine.runners["main"]
        assert runner.replays == before + 1, self.where("decode step was not replayed")
        assert runner.bucket(rows) in runner.recorded, self.where(f"no bucket for {rows} rows")

    # -- refused operations: each must leave every sequence untouched ------------------------
    def refused_capacity(self) -> None:
        t = self.rng.choice(self.live)
        ids = self.tokens(t.room + self.rng.choice((1, 1, 2, 5)))  # mostly one past the edge
        self.refuse("refused_capacity", CapacityError, "max_seq_len",
                    lambda: self.engine.prefill(t.seq, ids))

    def refused_vocab(self) -> None:
        cands = self.roomy()
        batch = [t.seq for t in self.rng.sample(cands, self.rng.randint(1, len(cands)))]
        ids = self.tokens(len(batch))
        ids[self.rng.randrange(len(ids))] = self.vocab + self.rng.choice((0, 0, 1, 1000))
        self.refuse("refused_vocab", InputError, "outside the vocabulary",
                    lambda: self.engine.decode(batch, ids))

    def refused_freed(self) -> None:
        # the stale handle rides with live ones; its slot may already belong to one of them
        cands = self.roomy()
        batch = [t.seq for t in self.rng.sample(cands, self.rng.randint(0, len(cands)))]
        batch.insert(self.rng.randint(0, len(batch)), self.rng.choice(self.freed))
        ids = self.tokens(len(batch))
        self.refuse("refused_freed", InputError, "freed", lambda: self.engine.decode(batch, ids))

    def refuse(self, kind: str, error: type[Exception], match: str,
               action: Callable[[], object]) -> None:
        before, replays = self.state_copy(), self.replays()
        with pytest.raises(error, match=match):
            action()
        self.check_lengths()
        assert self.replays() == replays, self.where("a refused step launched")
        for name, old in before.items():
            # bitwise: a refused step must not run anything, so nothing may change at all
            assert torch.equal(self.engine.state[name], old), self.where(f"{name} changed")
        assert all(not s.live for s in self.freed), self.where("a freed handle came back")
        self.seen[kind] += 1

    def state_copy(self) -> dict[str, torch.Tensor]:
        return {name: t.clone() for name, t in self.engine.state.tensors.items()}


@pytest.mark.parametrize("case", CASES + [pytest.param(c, marks=pytest.mark.gpu)
                                          for c in GPU_CASES], ids=str)
def test_random_program_matches_each_sequence_alone(case: Case) -> None:
    program = Program(case)
    program.run(STEPS)
    missing = [k for k in KINDS if not program.seen[k]]
    assert not missing, f"{case}: the program never did {missing}; it did {dict(program.seen)}"
