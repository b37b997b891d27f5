"""ReferenceEngine: the engine API (`new_sequence`, `prefill`, `decode`, `generate`, `free`,
`draft`, `snapshot`/`rollback`) on top of the reference interpreter. The compiled engine exposes
the same API; tests hold one against the other.

Every step is checked before any state is touched, so a bad request leaves every sequence as
it was: token ids against the vocabulary, lengths against the capacity, sequences still live.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from dataclasses import dataclass, field

import torch

from hyperloom.errors import CapacityError, InputError
from hyperloom.ir.derive import bind
from hyperloom.ir.graph import Graph
from hyperloom.ir.interpreter import run_graph
from hyperloom.ir.state import StateStore


@dataclass(eq=False)
class Sequence:
    slot: int
    length: int = 0  # tokens cached in the main model
    draft_length: int = 0  # tokens cached in the MTP drafter
    live: bool = True


@dataclass(frozen=True)
class Snapshot:
    length: int
    draft_length: int
    fixed: dict[str, torch.Tensor] = field(repr=False)


class Engine:
    """Sequence bookkeeping, input checks and the step API; subclasses run the graphs."""

    prefill_chunk: int | None = None  # rows per prefill step (None: the whole prompt)

    def __init__(self, graphs: dict[str, Graph], state: StateStore, vocab_size: int,
                 max_seq_len: int, max_sequences: int, model: object = None):
        self.model = model  # the model spec these graphs came from, for reports
        self.graphs, self.state = graphs, state
        self.vocab_size, self.max_seq_len = vocab_size, max_seq_len
        self.max_sequences = max_sequences
        self._free = list(range(max_sequences))

    def _run(self, graph: str, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
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
        self._free.append(seq.slot)

    def snapshot(self, seq: Sequence) -> Snapshot:
        return Snapshot(seq.length, seq.draft_length, self.state.snapshot(seq.slot))

    def rollback(self, seq: Sequence, snap: Snapshot) -> None:
        self._check_live([seq])
        self.state.restore(seq.slot, snap.fixed)
        seq.length, seq.draft_length = snap.length, snap.draft_length

    # -- steps -------------------------------------------------------------------------------
    def prefill(self, seq: Sequence, ids: Seq[int] | torch.Tensor) -> torch.Tensor:
        """Logits [len(ids), vocab] fp32 for every prompt position."""
        return self.hidden(seq, ids)["logits"].float()

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

    def hidden(self, seq: Sequence, ids: Seq[int] | torch.Tensor) -> dict[str, torch.Tensor]:
        """Like prefill, but returns every output of the main graph (logits and final hidden)."""
        ids = self._ids(ids)
        self._check_step([seq], [len(ids)], "length")
        chunk, outs, snap = self.prefill_chunk or len(ids), [], self.snapshot(seq)
        try:
            for lo in range(0, len(ids), chunk):
                part = ids[lo: lo + chunk]
                outs.append(self._step("main", part, [seq], [seq.length], [len(part)]))
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
        if tuple(hidden.shape) != want:
            raise InputError(f"draft: tensor hidden has shape {list(hidden.shape)}, expected "
                             f"{list(want)} (one row per next id)")
        self._check_step([seq], [len(ids)], "draft_length")
        out = self._step("mtp", ids, [seq], [seq.draft_length], [len(ids)], hidden=hidden)
        seq.draft_length += len(ids)
        return out["logits"].float()

    def generate(self, prompt: Seq[int], max_new_tokens: int) -> list[int]:
        """Greedy generation for one prompt; the sequence is freed afterwards."""
        seq = self.new_sequence()
        try:
            tok = int(self.prefill(seq, prompt)[-1].argmax())
            out = [tok]
            while len(out) < max_new_tokens:
                tok = int(self.decode([seq], [tok])[0].argmax())
                out.append(tok)
            return out
        finally:
            self.free(seq)

    # -- internals ---------------------------------------------------------------------------
    def _ids(self, ids: Seq[int] | torch.Tensor) -> torch.Tensor:
        ids = torch.as_tensor(ids, dtype=torch.int64).flatten()
        if ids.numel() == 0:
            raise InputError("empty list of token ids")
        bad = ((ids < 0) | (ids >= self.vocab_size)).nonzero().flatten()
        if len(bad):
            i = int(bad[0])
            raise InputError(f"token id {int(ids[i])} at position {i} is outside the vocabulary "
                             f"[0, {self.vocab_size})")
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
              counts: list[int], **extra: torch.Tensor) -> dict[str, torch.Tensor]:
        pos = torch.cat([torch.arange(s, s + n) for s, n in zip(starts, counts)])
        slot = torch.cat([torch.full((n,), q.slot) for q, n in zip(seqs, counts)])
        inputs = {"ids": ids, "pos": pos, "slot": slot} | extra
        saved = {q.slot: self.state.snapshot(q.slot) for q in seqs}
        try:
            return self._run(graph, inputs)
        except Exception:
            for slot, snap in saved.items():  # a failed step leaves every sequence as it was
                self.state.restore(slot, snap)
            raise


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

    def _run(self, graph: str, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        inputs = {k: v.to(self.device) for k, v in inputs.items()}
        return run_graph(self.graphs[graph], self.weights, inputs, self.state, self.dtype)
