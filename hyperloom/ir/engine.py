"""ReferenceEngine: the engine API (`new_sequence`, `prefill`, `decode`, `generate`, `free`,
`draft`, `snapshot`/`rollback`) on top of the reference interpreter. The compiled engine exposes
the same API; tests hold one against the other.

Every step is checked before any state is touched, so a bad request leaves every sequence as
it was: token ids against the vocabulary, lengths against the capacity, sequences still live.
"""

from __future__ import annotations

import dataclasses
import numbers
import weakref
from collections import deque
from itertools import accumulate
from collections.abc import Callable
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field

import torch

from hyperloom.errors import CapacityError, InputError
from hyperloom.ir.derive import bind
from hyperloom.ir.graph import Graph
from hyperloom.ir.interpreter import run_graph
from hyperloom.ir.sampling import Sampler, Sampling
from hyperloom.ir.state import StateStore

LOGITS = ("all", "last")  # prefill's logits: every prompt row's, or the last row's only


@dataclass(eq=False)
class Sequence:
    slot: int
    length: int = 0  # tokens cached in the main model
    draft_length: int = 0  # tokens cached in the MTP drafter
    live: bool = True
    snaps: weakref.WeakSet = field(default_factory=weakref.WeakSet, repr=False)  # its snapshots


@dataclass(frozen=True, eq=False)
class Snapshot:
    """A sequence's lengths and fixed state (KDA's), restorable while the tokens it counts are
    intact: a step that writes below its length (after a rollback) makes it stale."""

    length: int
    draft_length: int
    fixed: dict[str, torch.Tensor] = field(repr=False)
    seq: Sequence = field(repr=False)
    stale: list[str] = field(default_factory=list, repr=False)  # why it can't be restored


class Engine:
    """Sequence bookkeeping, input checks and the step API; subclasses run the graphs."""

    prefill_chunk: int | None = None  # rows per prefill step (None: the whole prompt)
    max_step_rows: int | None = None  # rows one step may hold (None: any)

    def __init__(self, graphs: dict[str, Graph], state: StateStore, vocab_size: int,
                 max_seq_len: int, max_sequences: int, model: object = None):
        self.model = model  # the model spec these graphs came from, for reports
        self.graphs, self.state = graphs, state
        self.vocab_size, self.max_seq_len = vocab_size, max_seq_len
        self.max_sequences = max_sequences
        self._free = list(range(max_sequences))

    def _run(self, graph: str, inputs: dict[str, torch.Tensor],
             keep: int | None = None) -> dict[str, torch.Tensor]:
        """One step's outputs; `keep` lets a backend compute the logits of the last `keep` rows
        only (`_step` slices whatever more it returns)."""
        raise NotImplementedError

    # -- sequences ---------------------------------------------------------------------------
    def new_sequence(self) -> Sequence:
        if not self._free:
            raise CapacityError(f"all {self.max_sequences} sequence slots are in use "
                                "(max_sequences); free one first")
        seq = Sequence(self._free.pop(0))
        self.state.reset(seq.slot)
        return seq

    def free(self, seq: Sequence) -> None:
        self._check_live([seq])
        seq.live = False
        self.state.release(seq.slot)
        self._free.append(seq.slot)

    def snapshot(self, seq: Sequence) -> Snapshot:
        snap = Snapshot(seq.length, seq.draft_length, self.state.snapshot(seq.slot), seq)
        seq.snaps.add(snap)
        return snap

    def rollback(self, seq: Sequence, snap: Snapshot) -> None:
        self._check_live([seq])
        if snap.seq is not seq:
            raise InputError(f"rollback: the snapshot is of the sequence in slot {snap.seq.slot}"
                             f"{'' if snap.seq.live else ' (freed)'}, not of this one (slot "
                             f"{seq.slot})")
        if snap.stale:
            raise InputError(f"rollback: {snap.stale[0]}")
        self.state.restore(seq.slot, snap.fixed)
        seq.length, seq.draft_length = snap.length, snap.draft_length

    # -- steps -------------------------------------------------------------------------------
    def prefill(self, seq: Sequence, ids: Seq[int] | torch.Tensor,
                logits: str = "all") -> torch.Tensor:
        """Logits [len(ids), vocab] fp32 for every prompt position, or with logits="last" [1,
        vocab] for the last one (what generation needs: the LM head runs on that row only)."""
        if logits not in LOGITS:
            raise InputError(f"prefill: logits={logits!r}; expected one of {', '.join(LOGITS)}")
        return self.hidden(seq, ids, last_only=logits == "last")["logits"].float()

    def decode(self, seqs: Seq[Sequence], ids: Seq[int] | torch.Tensor) -> torch.Tensor:
        """One new token for each sequence; logits [len(seqs), vocab] fp32."""
        ids = self._ids(ids)
        if len(ids) != len(seqs):
            raise InputError(f"decode got {len(ids)} token ids for {len(seqs)} sequences")
        self._check_step(seqs, [1] * len(seqs), "length")
        out = self._step("main", ids, seqs, [s.length for s in seqs], [1] * len(seqs))
        for s in seqs:
            s.length += 1
        return out["logits"].float()

    def hidden(self, seq: Sequence, ids: Seq[int] | torch.Tensor,
               last_only: bool = False) -> dict[str, torch.Tensor]:
        """Like prefill, but returns every output of the main graph (logits and final hidden);
        `last_only`: logits of the last row only."""
        ids = self._ids(ids)
        self._check_step([seq], [len(ids)], "length")
        chunk, outs, snap = self.prefill_chunk or len(ids), [], self.snapshot(seq)
        try:
            for lo in range(0, len(ids), chunk):
                part = ids[lo: lo + chunk]
                keep = int(lo + chunk >= len(ids)) if last_only else None
                outs.append(self._step("main", part, [seq], [seq.length], [len(part)],
                                       guard=False, keep=keep))
                seq.length += len(part)
        except Exception:
            self.rollback(seq, snap)  # a failed chunk undoes the whole prompt
            raise
        return {k: torch.cat([o[k] for o in outs]) for k in outs[0]}

    def draft(self, seq: Sequence, next_ids: Seq[int] | torch.Tensor,
              hidden: torch.Tensor) -> torch.Tensor:
        """MTP drafter: row i combines hidden state h_t (t = draft_length + i) with the embedding
        of x_{t+1} = next_ids[i]; returns draft logits [n, vocab] for x_{t+2}."""
        if "mtp" not in self.graphs:
            raise InputError("this model has no MTP layer (num_nextn_predict_layers = 0)")
        ids = self._ids(next_ids)
        want = (len(ids), int(dict(self.graphs["mtp"].inputs)["%hidden"].shape[1]))
        if not hidden.is_floating_point():
            raise InputError(f"draft: tensor hidden must be floating point (the main model's "
                             f"hidden rows), got {hidden.dtype}")
        if tuple(hidden.shape) != want:
            raise InputError(f"draft: tensor hidden has shape {list(hidden.shape)}, expected "
                             f"{list(want)} (one row per next id)")
        self._check_step([seq], [len(ids)], "draft_length")
        chunk, outs, snap = self.prefill_chunk or len(ids), [], self.snapshot(seq)
        try:  # in steps of at most prefill_chunk rows, as a prompt
            for lo in range(0, len(ids), chunk):
                part = ids[lo: lo + chunk]
                outs.append(self._step("mtp", part, [seq], [seq.draft_length], [len(part)],
                                       guard=False, hidden=hidden[lo: lo + chunk])["logits"])
                seq.draft_length += len(part)
        except Exception:
            self.rollback(seq, snap)  # a failed chunk undoes the whole draft
            raise
        return torch.cat(outs).float()

    def step(self, batch: Seq[tuple[Sequence, Seq[int]]],
             logits: str = "all") -> list[torch.Tensor]:
        """One step over rows of several sequences at once (decode rows and prefill chunks
        mixed): each (sequence, ids) appends ids at the sequence's end; returns each entry's
        logits rows [len(ids), vocab] fp32, or with logits="last" its last row's [1, vocab]
        (the LM head runs on the rows from the first entry's last on: long entries first)."""
        if logits not in LOGITS:
            raise InputError(f"step: logits={logits!r}; expected one of {', '.join(LOGITS)}")
        if not batch:
            raise InputError("step got no (sequence, ids) entries")
        seqs = [s for s, _ in batch]
        ids = [self._ids(t, f"step entry {i}: ") for i, (_, t) in enumerate(batch)]
        counts = [len(t) for t in ids]
        if self.max_step_rows and sum(counts) > self.max_step_rows:
            raise InputError(f"a step of {sum(counts)} rows exceeds the {self.max_step_rows} "
                             "rows the engine was planned for (prefill_chunk / max_sequences)")
        self._check_step(seqs, counts, "length")
        rows = sum(counts)
        keep = rows - counts[0] + 1 if logits == "last" else None
        out = self._step("main", torch.cat(ids), seqs, [s.length for s in seqs], counts,
                         keep=keep)
        for s, n in zip(seqs, counts):
            s.length += n
        if keep is None:
            return list(out["logits"].float().split(counts))
        first = rows - keep  # each entry's last row, counted within the kept ones
        return [out["logits"][e - 1 - first: e - first].float() for e in accumulate(counts)]

    def generate(self, prompts: Seq[int] | Seq[Seq[int]], max_new_tokens: int | None = None,
                 sampling: Sampling | Seq[Sampling] | None = None,
                 on_token: Callable[[int, int], None] | None = None) -> list:
        """Continuous batching: prompts join as slots free up, prefill chunks share steps with
        the decode rows of running sequences, finished sequences leave. A flat list of ids is one
        prompt (returns its tokens); a list of prompts returns a list of token lists.
        `on_token(prompt_index, token)` streams tokens as they are chosen."""
        single = (isinstance(prompts, torch.Tensor) and prompts.dim() == 1) or (
            len(prompts) > 0 and isinstance(prompts[0], numbers.Integral))
        reqs = [_Request(i, self._ids(p, f"prompt {i}: ").tolist(),
                         _params(sampling, i, max_new_tokens))
                for i, p in enumerate([prompts] if single else prompts)]
        for r in reqs:
            need = len(r.todo) + r.sampler.params.max_new_tokens
            if need > self.max_seq_len:
                raise CapacityError(f"prompt {r.index}: {len(r.todo)} tokens + "
                                    f"{r.sampler.params.max_new_tokens} new exceed the capacity "
                                    f"of {self.max_seq_len} (max_seq_len)")
        _Scheduler(self, reqs, on_token).run()
        return reqs[0].tokens if single else [r.tokens for r in reqs]

    # -- internals ---------------------------------------------------------------------------
    def _ids(self, ids: Seq[int] | torch.Tensor, where: str = "") -> torch.Tensor:
        given = torch.as_tensor(ids)
        if given.numel() == 0:
            raise InputError(f"{where}empty list of token ids")
        if given.dtype.is_floating_point or given.dtype.is_complex or given.dtype == torch.bool:
            raise InputError(f"{where}token ids must be integers, got {given.dtype} (a float id "
                             "would be truncated)")
        if sum(d > 1 for d in given.shape) > 1:  # [n], [n, 1] or [1, n]: one row of ids
            raise InputError(f"{where}token ids must be one row, got shape {list(given.shape)} "
                             "(a batch of sequences goes through decode or step)")
        ids = given.to(torch.int64).flatten()
        bad = ((ids < 0) | (ids >= self.vocab_size)).nonzero().flatten()
        if len(bad):
            i = int(bad[0])
            raise InputError(f"{where}token id {int(ids[i])} at position {i} is outside the "
                             f"vocabulary [0, {self.vocab_size})")
        return ids

    def _check_live(self, seqs: Seq[Sequence]) -> None:
        for s in seqs:
            if not s.live:
                raise InputError(f"sequence in slot {s.slot} was freed")
        if len({s.slot for s in seqs}) != len(seqs):
            raise InputError("the same sequence appears twice in one step")

    def _check_step(self, seqs: Seq[Sequence], counts: list[int], attr: str) -> None:
        self._check_live(seqs)
        for s, n in zip(seqs, counts):
            have = getattr(s, attr)
            if have + n > self.max_seq_len:
                raise CapacityError(f"sequence in slot {s.slot}: {have} cached + {n} new tokens "
                                    f"exceeds its capacity of {self.max_seq_len} (max_seq_len)")

    def _step(self, graph: str, ids: torch.Tensor, seqs: Seq[Sequence], starts: list[int],
              counts: list[int], guard: bool = True, keep: int | None = None,
              **extra: torch.Tensor) -> dict[str, torch.Tensor]:
        """One step; `guard` restores the sequences' fixed state if it fails (a caller that
        rolls back a whole prompt itself passes False rather than snapshot twice); `keep`: the
        logits of the last `keep` rows only."""
        pos = torch.cat([torch.arange(s, s + n) for s, n in zip(starts, counts)])
        slot = torch.cat([torch.full((n,), q.slot) for q, n in zip(seqs, counts)])
        inputs = {"ids": ids, "pos": pos, "slot": slot} | extra
        self.state.reserve([(q.slot, s + n) for q, s, n in zip(seqs, starts, counts)])
        _overwrite(graph, seqs, starts)
        saved = {q.slot: self.state.snapshot(q.slot) for q in seqs} if guard else {}
        try:
            out = self._run(graph, inputs, keep)
        except Exception:
            for slot, snap in saved.items():  # a failed step leaves every sequence as it was
                self.state.restore(slot, snap)
            raise
        if keep is not None and len(out["logits"]) > keep:  # the head ran on more rows
            out = out | {"logits": out["logits"][len(out["logits"]) - keep:]}
        return out


class ReferenceEngine(Engine):
    """The engine API on the reference interpreter, computing in fp32 or fp64."""

    def __init__(self, main: Graph, weights: dict[str, torch.Tensor], vocab_size: int, *,
                 mtp: Graph | None = None, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float32, max_seq_len: int = 4096,
                 max_sequences: int = 8, model: object = None):
        graphs = {"main": main} | ({"mtp": mtp} if mtp else {})
        self.device, self.dtype = torch.device(device), dtype
        weights = {k: v.to(self.device, dtype if v.is_floating_point() else v.dtype)
                   for k, v in weights.items()}
        self.weights = {k: v for g in graphs.values() for k, v in bind(g, weights).items()}
        decls = tuple(s for g in graphs.values() for s in g.states())
        state = StateStore(decls, max_sequences, max_seq_len, self.device, dtype)
        super().__init__(graphs, state, vocab_size, max_seq_len, max_sequences, model)

    def _run(self, graph: str, inputs: dict[str, torch.Tensor],
             keep: int | None = None) -> dict[str, torch.Tensor]:
        inputs = {k: v.to(self.device) for k, v in inputs.items()}
        return run_graph(self.graphs[graph], self.weights, inputs, self.state, self.dtype)


def _overwrite(graph: str, seqs: Seq[Sequence], starts: list[int]) -> None:
    """Snapshots counting tokens at or past a step's first position go stale: the step
    rewrites them (it runs after a rollback below them)."""
    attr = "length" if graph == "main" else "draft_length"
    for q, start in zip(seqs, starts):
        for snap in list(q.snaps):
            if getattr(snap, attr) > start and not snap.stale:
                snap.stale.append(f"the snapshot at {attr} {getattr(snap, attr)} counts tokens "
                                  f"from position {start} on, which a step after a rollback "
                                  "has rewritten")


def _params(sampling: Sampling | Seq[Sampling] | None, i: int,
            max_new_tokens: int | None) -> Sampling:
    p = sampling[i] if isinstance(sampling, (list, tuple)) else (sampling or Sampling())
    return dataclasses.replace(p, max_new_tokens=max_new_tokens) if max_new_tokens else p


@dataclass(eq=False)
class _Request:
    index: int
    todo: list[int]  # prompt tokens not yet prefilled
    params: Sampling
    seq: Sequence | None = None
    tokens: list[int] = field(default_factory=list)
    sampler: Sampler = field(init=False)

    def __post_init__(self) -> None:
        self.sampler = Sampler(self.params)


class _Scheduler:
    """Admits requests into free slots, builds each step (decode rows first, then prefill
    chunks under the step's row budget; the chunks lead the step's rows, so the LM head runs
    from the first chunk's last row on), samples, and retires finished sequences."""

    def __init__(self, eng: Engine, reqs: list[_Request], on_token):
        self.eng, self.queue, self.live, self.on_token = eng, deque(reqs), [], on_token
        self.budget = eng.max_step_rows or eng.prefill_chunk or 1 << 30

    def run(self) -> None:
        try:
            while self.queue or self.live:
                while self.queue and self.eng._free:
                    r = self.queue.popleft()
                    r.seq = self.eng.new_sequence()
                    self.live.append(r)
                self._advance()
        finally:
            for r in self.live:
                self.eng.free(r.seq)

    def _advance(self) -> None:
        batch, owners = [], []
        for r in self.live:
            if not r.todo:
                batch.append((r.seq, [r.tokens[-1]]))
                owners.append(r)
        left, chunks = self.budget - len(batch), 0
        for r in self.live:
            if r.todo and left > 0:
                take = r.todo[:left]
                batch.insert(chunks, (r.seq, take))
                owners.insert(chunks, r)
                left, chunks = left - len(take), chunks + 1
        for r, (_, ids), logits in zip(owners, batch, self.eng.step(batch, logits="last")):
            if r.todo:
                r.todo = r.todo[len(ids):]
                if r.todo:
                    continue  # more prompt chunks before the first token
            self._emit(r, r.sampler(logits[-1]))

    def _emit(self, r: _Request, tok: int) -> None:
        r.tokens.append(tok)
        if self.on_token:
            self.on_token(r.index, tok)
        if r.sampler.done(r.tokens):
            self.eng.free(r.seq)
            self.live.remove(r)
