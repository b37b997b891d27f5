"""The DSA indexer (emitters.dsa) and sparse MLA (emitters.mla) kernels against
semantics.dsa.dsa_index and semantics.attention.mla_attention (fp64): a prompt shorter than
index_topk (dense), prompts several times longer in chunks that end mid-pool (sparse, pools
completed across chunks), decode steps across a pool boundary, padding rows, several sequences
in one step equal to each alone, contiguous and paged (shuffled block tables) caches.

Selections are compared as sets (kernel and reference both take the lowest pool on a tie, but
fp32 rounding can reorder near-ties): pools in one set but not the other must score within fp32
noise of the k-th score.
The attention is checked against the reference run on the kernel's own selection. The radix
select is checked exactly against a stable sort on crafted scores (ties, -0.0, wide ranges).
CPU: Triton's interpreter in fp32; GPU (`gpu` mark): bf16 at GLM-5.3 sizes on the H200."""

from __future__ import annotations

import pytest
import torch

from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters import dsa as dsa_emitter
from hyperloom.codegen.emitters import dsa_select
from hyperloom.codegen.emitters import mla as mla_emitter
from hyperloom.codegen.emitters.dsa_spec import DSASpec
from hyperloom.codegen.emitters.mla import MLASpec
from hyperloom.ir import ops
from hyperloom.ir.semantics import Ctx
from hyperloom.ir.semantics import attention as attn_sem
from hyperloom.ir.semantics import dsa as dsa_sem
from hyperloom.ir.state import StateStore, segments
from hyperloom.ir.types import StateDecl, StateKind, TensorType
from tests.tolerances import assert_close, assert_rel

F64 = torch.float64
SPARE = 3  # pool blocks no slot owns (paged): NaN, never read
INPUTS = ("qi", "w", "ki", "gate", "q", "c")  # a step's row inputs
TIE = 1e-5  # |score - k-th score| under which fp32 and fp64 may order two pools differently
# (bf16: 2% of the row's largest |score|)


class Harness:
    """Compiled caches (contiguous, or block pools behind a shuffled table) beside the fp64
    reference's, for `slots` sequences of `capacity` tokens. A row's inputs are a function of
    (slot, pos), so one row gives the same inputs in any step. A step whose longest run has
    dense_rows rows takes the MLA's dense form, as the runtime's."""

    def __init__(self, dsa: DSASpec, mla: MLASpec, *, slots: int, capacity: int,
                 device: str = "cpu", act: torch.dtype = torch.float32, seed: int = 0,
                 dense_rows: int | None = None):
        self.dsa, self.mla, self.device, self.act, self.seed = dsa, mla, device, act, seed
        self.dense_rows = dense_rows
        gen = torch.Generator().manual_seed(seed)
        d, r, b = dsa.head_dim, mla.rank, dsa.block_size
        self.ape = torch.randn(dsa.kpool, d, generator=gen).to(device, act)
        width = mla.heads * (mla.qk_head_dim + mla.v_head_dim)
        self.wkvb = (torch.randn(width, r, generator=gen) * r ** -0.5).to(device, act)
        decls = (StateDecl("ix.keys", StateKind.TOKEN, TensorType.make("f64", "S", 2 * d)),
                 StateDecl("m.latent", StateKind.TOKEN, TensorType.make("f64", "S", r)))
        self.ref = StateStore(decls, slots, capacity, device, F64)
        # every cache starts NaN: a read of anything not yet written shows in the results
        nan = dict(fill_value=float("nan"), device=device, dtype=act)
        self.pooled = torch.full((slots, capacity // dsa.kpool, d), **nan)
        self.table, rows = None, (slots, capacity)
        if b:
            blocks = slots * capacity // b
            perm = torch.randperm(blocks + SPARE, generator=gen)
            self.table = perm[:blocks].view(slots, -1).int().to(device)
            rows = (blocks + SPARE, b)
        self.keys = torch.full((*rows, 2 * d), **nan)
        self.latent = torch.full((*rows, r), **nan)
        self.kernels = self._load()

    def _load(self) -> tuple[tuple, tuple]:
        a = dsa_emitter.source("ix", self.dsa, header="test dsa")
        b = mla_emitter.source("mla", self.mla, header="test mla")
        return (tuple(load(a, n, self.device) for n in dsa_emitter.kernel_names("ix")),
                tuple(load(b, n, self.device) for n in mla_emitter.kernel_names("mla")))

    def inputs(self, slot: list[int], pos: list[int]) -> dict[str, torch.Tensor]:
        """Row inputs [rows, ...] in the activation dtype; padding rows (slot < 0) random too."""
        d, h, m = self.dsa.head_dim, self.dsa.heads, self.mla
        sizes = dict(zip(INPUTS, (h * d, h, d, d, m.heads * m.qk_head_dim, m.rank)))
        rows = []
        for s, p in zip(slot, pos):
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + (s + 1) * 10_007 + p)
            rows.append({k: torch.randn(n, generator=gen) for k, n in sizes.items()})
        return {k: torch.stack([r[k] for r in rows]).to(self.device, self.act) for k in sizes}

    def logical(self, cache: torch.Tensor, slot: int, n: int) -> torch.Tensor:
        """Positions 0..n-1 of `slot` in a compiled cache."""
        if self.table is None:
            return cache[slot, :n]
        p = torch.arange(n, device=self.device)
        return cache[self.table[slot, p // self.dsa.block_size].long(), p % self.dsa.block_size]

    def buffers(self, slot: list[int], pos: list[int],
                max_splits: int = mla_emitter.MAX_SPLITS) -> dict[str, object]:
        """A step's operands (inputs, index and out with a slack row) and scratch."""
        rows = len(slot)
        bufs: dict[str, object] = dict(self.inputs(slot, pos), rows=rows, max_splits=max_splits)
        bufs["seq_rows"] = max(slot.count(s) for s in slot) if slot else 0
        bufs["slot"] = torch.tensor(slot, device=self.device)
        bufs["pos"] = torch.tensor(pos, device=self.device)
        bufs["index"] = torch.full((rows + 1, self.dsa.width), 7, dtype=torch.int32,
                                   device=self.device)
        bufs["out"] = torch.full((rows + 1, self.mla.heads * self.mla.v_head_dim), float("nan"),
                                 device=self.device, dtype=self.act)
        bufs["scores"] = dsa_select.scratch(rows, self.pooled)
        bufs["work"] = mla_emitter.scratch(self.mla, rows, self.latent.dtype, self.device,
                                           max_splits)
        return bufs

    def launch(self, b: dict) -> None:
        """The indexer's and the attention's launches on buffers(); nothing allocated."""
        (ix, mla), rows = self.kernels, b["rows"]
        dsa_emitter.launch(ix, self.dsa, qi=b["qi"], w=b["w"], ki=b["ki"], gate=b["gate"],
                           ape=self.ape, slot=b["slot"], pos=b["pos"], keys=self.keys,
                           pooled=self.pooled, work=b["scores"], out=b["index"], rows=rows,
                           block_table=self.table)
        mla_emitter.launch(mla, self.mla, q=b["q"], c=b["c"], wkvb=self.wkvb, slot=b["slot"],
                           pos=b["pos"], index=b["index"], latent=self.latent, out=b["out"],
                           work=b["work"], rows=rows, block_table=self.table,
                           max_splits=b["max_splits"], seq_rows=b["seq_rows"],
                           dense_rows=self.dense_rows)

    def run(self, slot: list[int], pos: list[int], max_splits: int = mla_emitter.MAX_SPLITS):
        """One step through the kernels; returns (inputs, index, out)."""
        b, rows = self.buffers(slot, pos, max_splits), len(slot)
        self.launch(b)
        index, out = b["index"], b["out"]
        assert (index[rows] == 7).all() and out[rows].isnan().all(), "slack row written"
        return {k: b[k] for k in INPUTS}, index[:rows], out[:rows]

    def step(self, slot: list[int], pos: list[int], **kw) -> tuple[torch.Tensor, torch.Tensor]:
        """run(), then every check against the reference; returns (index, out)."""
        x, index, out = self.run(slot, pos, **kw)
        live = torch.tensor(slot) >= 0
        assert (index[~live] == -1).all() and (out[~live] == 0).all(), "padding rows"
        lx = {k: v[live.to(v.device)].to(F64) for k, v in x.items()}
        slot_t, pos_t = torch.tensor(slot)[live], torch.tensor(pos)[live]
        ctx = Ctx(F64, self.ref, segments(slot_t, pos_t))
        s = self.dsa
        at = ops.DSAIndexAttrs(s.heads, s.head_dim, s.topk, s.kpool, s.select_tail, "ix")
        want = dsa_sem.dsa_index(ctx, at, lx["qi"], lx["w"], lx["ki"], lx["gate"],
                                 self.ape.to(F64), slot_t, pos_t)
        got = index[live.to(index.device)].cpu()
        for r, (q, p) in enumerate(zip(slot_t.tolist(), pos_t.tolist())):
            self.check_row(got[r], want[r].cpu(), lx, r, q, p)
        m = self.mla
        mat = ops.MLAAttrs(m.heads, m.qk_head_dim, m.v_head_dim, m.rank, m.scale, "m")
        o = attn_sem.mla_attention(ctx, mat, lx["q"], lx["c"], self.wkvb.to(F64), slot_t,
                                   pos_t, got.to(self.device))  # on the kernel's selection
        close = assert_close if self.act == torch.float32 else \
            (lambda a, b, dt, what: assert_rel(a, b, 2e-2, what))
        close(out[live.to(out.device)].float(), o, self.act, "mla out")
        self.check_caches(slot_t.tolist(), pos_t.tolist(), close)
        return index, out

    def scores(self, lx: dict, r: int, slot: int, n: int) -> torch.Tensor:
        """fp64 scores of row r's n visible pools, from the reference cache."""
        d, h = self.dsa.head_dim, self.dsa.heads
        cached = self.ref["ix.keys"][slot, : n * self.dsa.kpool]
        keys = dsa_sem.pool_keys(cached[:, :d], cached[:, d:], self.ape.to(F64))
        logits = torch.relu(torch.einsum("hd,pd->hp", lx["qi"][r].view(h, d), keys) * d ** -0.5)
        return (lx["w"][r][:, None] * h ** -0.5 * logits).sum(0).cpu()

    def check_row(self, got: torch.Tensor, want: torch.Tensor, lx: dict, r: int, slot: int,
                  pos: int) -> None:
        s, what = self.dsa, f"slot {slot} pos {pos}"
        p, topk = s.kpool, s.topk
        n = (pos + 1) // p
        k = min(topk // p, n)
        assert torch.equal(got[topk:], want[topk:]), f"{what}: tail {got[topk:]} vs {want[topk:]}"
        assert (got[k * p: topk] == -1).all() and (want[k * p: topk] == -1).all(), what
        pools = got[: k * p].view(k, p)
        assert torch.equal(pools, pools[:, :1] + torch.arange(p, dtype=torch.int32)), what
        mine = set((pools[:, 0] // p).tolist())
        theirs = set((want[: k * p].view(k, p)[:, 0] // p).tolist())
        assert len(mine) == k, f"{what}: a pool selected twice"
        if mine != theirs:  # only near-ties may differ
            sc = self.scores(lx, r, slot, n)
            kth = sc.sort(descending=True).values[k - 1]
            tie = TIE if self.act == torch.float32 else 2e-2 * float(sc.abs().max())
            far = [j for j in mine ^ theirs if abs(sc[j] - kth) > tie]
            assert not far, f"{what}: pools {sorted(mine)} vs {sorted(theirs)}; {far} not tied"

    def check_caches(self, slot: list[int], pos: list[int], close) -> None:
        """Written rows equal the reference's; complete pools' keys equal the reference's."""
        d, p = self.dsa.head_dim, self.dsa.kpool
        for q in set(slot):
            n = max(x for s, x in zip(slot, pos) if s == q) + 1
            close(self.logical(self.keys, q, n).float(), self.ref["ix.keys"][q, :n], self.act,
                  f"keys of slot {q}")
            close(self.logical(self.latent, q, n).float(), self.ref["m.latent"][q, :n],
                  self.act, f"latents of slot {q}")
            if n >= p:
                cached = self.ref["ix.keys"][q, :n]
                want = dsa_sem.pool_keys(cached[:, :d], cached[:, d:], self.ape.to(F64))
                close(self.pooled[q, : n // p].float(), want, self.act, f"pooled keys, slot {q}")
        if self.table is not None:  # spare blocks stay poisoned: nothing wrote outside a slot
            spare = torch.ones(self.keys.shape[0], dtype=torch.bool, device=self.device)
            spare[self.table.flatten().long()] = False
            assert self.keys[spare].isnan().all() and self.latent[spare].isnan().all()


def specs(topk: int = 8, kpool: int = 4, block_size: int = 0, heads: int = 4,
          tail: bool = True) -> tuple[DSASpec, MLASpec]:
    d = DSASpec(heads, 16, topk, kpool, tail, block_size)
    return d, MLASpec(4, 16, 16, 32, 0.25, d.width, block_size, head=topk)


def chunks(h: Harness, slot: int, start: int, sizes: list[int], **kw) -> None:
    for n in sizes:
        h.step([slot] * n, list(range(start, start + n)), **kw)
        start += n


# -- selection ------------------------------------------------------------------------------
def stable_topk(scores: torch.Tensor, k: int) -> list[int]:
    """The k largest, ties to the lower index, in pool order."""
    order = torch.sort(-scores.double(), stable=True).indices
    return sorted(order[:k].tolist())


def select_kernels(spec: DSASpec, device: str) -> tuple:
    return tuple(load(dsa_emitter.source("ix", spec), n, device, "ix")
                 for n in dsa_emitter.kernel_names("ix")[2:])


def run_select(spec: DSASpec, scores: torch.Tensor, pos: torch.Tensor,
               pools: int | None = None) -> torch.Tensor:
    """The selection alone on scores [rows, >= pools] (the cache's pools, all by default)."""
    rows, pools = scores.shape[0], scores.shape[1] if pools is None else pools
    work = dsa_select.scratch(rows, scores.new_empty((1, pools, 1)))
    work.scores.copy_(scores[:, : work.scores.shape[1]])
    out = torch.zeros(rows, spec.width, dtype=torch.int32, device=scores.device)
    dsa_select.select(select_kernels(spec, scores.device.type), spec, work=work,
                       slot=torch.zeros(rows, dtype=torch.long, device=scores.device),
                       pos=pos.to(scores.device), out=out, rows=rows, pools=pools)
    return out


# 1500: two SMALL_BLOCKs in one program; 2500, 9000: segments of SEG (3 and 9); with GB = 2 the
# segments' sums take several loads
@pytest.mark.parametrize("n, gb", [(0, 16), (3, 16), (16, 16), (17, 16), (300, 16), (1500, 16),
                                   (2500, 16), (9000, 2)])
def test_radix_select_equals_a_stable_topk(n: int, gb: int, monkeypatch) -> None:
    monkeypatch.setattr(dsa_select, "GB", gb)
    spec = DSASpec(4, 16, 64, 4, True)
    gen = torch.Generator().manual_seed(n)
    scores = torch.randn(3, max(n, 1), generator=gen)
    scores[0] = torch.randint(-3, 4, (max(n, 1),), generator=gen).float()  # heavy ties
    scores[0, ::7] = -0.0  # ties +0.0
    scores[1] = scores[1] * torch.logspace(-30, 30, max(n, 1))  # wide range
    pos = torch.tensor([4 * n + 2, 4 * n + 3, 4 * n - 1]).clamp(min=0)  # tails 3, 0 and 0
    out = run_select(spec, scores, pos, n)
    for r in range(3):
        k = min(16, n)
        want = stable_topk(scores[r, :n], k)
        toks = (torch.tensor(want, dtype=torch.int32)[:, None] * 4 + torch.arange(4)).flatten()
        assert torch.equal(out[r, : 4 * k], toks.int()), f"row {r}"
        assert (out[r, 4 * k: 64] == -1).all()
        tail = pos[r].item() + 1 - (pos[r].item() + 1) % 4
        assert out[r, 64:].tolist() == [t if t <= pos[r] else -1 for t in range(tail, tail + 3)]


@pytest.mark.parametrize("most", [1, 8])
def test_segmented_select_of_rows_with_few_pools_visible(most: int, monkeypatch) -> None:
    """A cache of 3000 pools (segmented) whose rows see 10 (dense), 1100 (two segments) and
    3000 pools: each takes the stable top-k of its own pools (3 rows: histograms in 1 or 2
    copies)."""
    monkeypatch.setattr(dsa_select, "MAX_COPIES", most)
    spec = DSASpec(4, 16, 64, 4, False)
    scores = torch.randn(3, 3000, generator=torch.Generator().manual_seed(1))
    pos = torch.tensor([4 * 10 - 1, 4 * 1100 - 1, 4 * 3000 - 1])
    out = run_select(spec, scores, pos)
    for r, n in enumerate((10, 1100, 3000)):
        k = min(16, n)
        want = stable_topk(scores[r, :n], k)
        toks = (torch.tensor(want, dtype=torch.int32)[:, None] * 4 + torch.arange(4)).flatten()
        assert torch.equal(out[r, : 4 * k], toks.int()), f"row {r}"
        assert (out[r, 4 * k:] == -1).all()


def test_select_of_equal_scores_takes_the_lowest_pools() -> None:
    """Every score equal (all candidates: the K-th key's bin holds the whole row), and a row
    whose candidates fill several blocks: both as a stable top-k."""
    spec = DSASpec(4, 16, 64, 4, False)
    n = 5000
    scores = torch.full((2, n), 0.25)
    scores[1, ::3] = 0.5  # 1667 candidates above the rest
    out = run_select(spec, scores, torch.tensor([4 * n - 1] * 2))
    for r in range(2):
        want = torch.tensor(stable_topk(scores[r], 16), dtype=torch.int32)
        assert torch.equal(out[r].view(16, 4)[:, 0] // 4, want), f"row {r}"


def test_reference_select_breaks_ties_to_the_lowest_pools() -> None:
    """Relu makes exact-zero pool scores common: the reference takes the lowest tied pools, as
    the kernel does (torch.topk's tie order is unspecified)."""
    at = ops.DSAIndexAttrs(4, 16, 12, 4, False, "x")
    scores = torch.zeros(2, 40)
    scores[0, 30] = -1.0  # one pool below the tie
    scores[1, [5, 33]] = 2.0  # two above it
    got = dsa_sem.select(at, scores, torch.tensor([159, 159]))
    for r in range(2):
        want = torch.tensor(stable_topk(scores[r], 3))
        assert torch.equal(got[r].view(3, 4)[:, 0].sort().values // 4, want), f"row {r}"


# -- indexer + attention --------------------------------------------------------------------
def test_prompt_shorter_than_topk_is_dense() -> None:
    h = Harness(*specs(topk=16), slots=2, capacity=32, seed=1)
    index, _ = h.step([1] * 11, list(range(11)))
    for p in range(11):
        assert set(index[p].tolist()) - {-1} == set(range(p + 1)), f"row {p}"


@pytest.mark.parametrize("block_size", [0, 16])
def test_long_prompt_in_chunks_then_decode_across_a_pool_boundary(block_size: int) -> None:
    """45 tokens in chunks of 13 and 32 (a pool completes across the chunks; the last row has
    a tail), then 5 decode steps (pool 11 completes at position 47)."""
    h = Harness(*specs(block_size=block_size), slots=2, capacity=64, seed=2)
    chunks(h, 1, 0, [13, 32])
    for p in range(45, 50):
        h.step([1], [p])


@pytest.mark.parametrize("block_size, cols, heads", [(0, 256, 5), (16, 256, 5), (0, 16, 20)])
def test_dense_form_takes_the_long_runs_below_topk(block_size: int, cols: int, heads: int,
                                                  monkeypatch) -> None:
    """One step of 38 rows in the dense form (dense_rows 2): a run of 3 rows from position 0, a
    run of 26 from 5 that crosses topk (its rows from 16 on attend by the index), a lone row
    (split form), a run of 7 of a third slot across the dense programs' row blocks, padding;
    part-filled head blocks (5 heads; 20 in two of the split form's 16), rank 40 (masked
    latent columns) and dv 24; the wide step's absorb and merge in column blocks of `cols`
    (16: three blocks of the rank and two of dv, the last of each part filled)."""
    monkeypatch.setattr(mla_emitter, "WIDE_COLS", cols)
    monkeypatch.setattr(mla_emitter, "WIDE_BH", 16)
    monkeypatch.setattr(mla_emitter, "WIDE_ROWS", 32)  # the 38-row step is wide
    d = DSASpec(4, 16, 16, 4, True, block_size)
    m = MLASpec(heads, 16, 24, 40, 0.25, d.width, block_size, head=d.topk)
    h = Harness(d, m, slots=4, capacity=64, seed=14, dense_rows=2)
    for s, n in ((0, 9), (2, 5), (3, 9)):
        chunks(h, s, 0, [n])
    slot = [1] * 3 + [2] * 26 + [0] + [3] * 7 + [-1]
    pos = [0, 1, 2] + list(range(5, 31)) + [9] + list(range(9, 16)) + [0]
    seen: list = []
    real = mla_emitter.launch
    monkeypatch.setattr(mla_emitter, "launch", lambda *a, **kw: seen.append(
        kw["seq_rows"] >= kw["dense_rows"]) or real(*a, **kw))
    h.step(slot, pos)
    assert seen == [True], seen


def test_dense_rows_read_no_index() -> None:
    """The dense form attends a long run's rows below topk without their index entries (here
    -1 throughout, which the split form reads as no token at all); a lone row and rows at or
    past topk still read theirs."""
    spec = MLASpec(3, 16, 16, 32, 0.25, 11, head=8)
    gen = torch.Generator().manual_seed(15)
    slot, pos = torch.tensor([0] * 12 + [1]), torch.tensor(list(range(2, 14)) + [5])
    q, c = torch.randn(13, 3 * 16, generator=gen), torch.randn(13, 32, generator=gen)
    wkvb = torch.randn(3 * 32, 32, generator=gen) * 32 ** -0.5
    latent0 = torch.randn(2, 32, 32, generator=gen)
    index = torch.full((13, 11), -1, dtype=torch.int32)
    for r, p in enumerate(pos.tolist()):  # the DSA layout: 2 of the complete pools, the tail
        full = (p + 1) // 4 * 4
        pools = torch.randperm(full // 4, generator=gen)[:2].sort().values
        index[r, : 4 * len(pools)] = (pools[:, None] * 4 + torch.arange(4)).flatten()
        index[r, 8: 8 + p + 1 - full] = torch.arange(full, p + 1)
    want, _ = mla_reference(spec, latent0, q, c, wkvb, slot, pos, index)
    blind = index.clone()
    dense = (pos < 8) & (slot == 0)
    blind[dense] = -1
    got = run_mla(mla_emitter, spec, latent0.clone(), q, c, wkvb, slot, pos, blind, 16,
                  seq_rows=12, dense_rows=2)
    assert_close(got, want, torch.float32, "dense rows without their index")
    split = run_mla(mla_emitter, spec, latent0.clone(), q, c, wkvb, slot, pos, blind, 16)
    assert (split[dense.nonzero().flatten()] == 0).all(), "the split form reads the index"


@pytest.mark.parametrize("block_size, most", [(0, 1), (16, 4), (0, 8)])
def test_segmented_select_counted_by_the_score_kernel(block_size: int, most: int,
                                                      monkeypatch) -> None:
    """Caches of 16 pools select in segments of 4 (SMALL_POOLS 4): the score kernel counts the
    histogram (in max(1, most // rows) copies: 3-row steps 1 or 2, 1-row steps `most`) as it
    scores, the selection clears it; prompts in chunks, then decode steps of two sequences and
    a padding row, then of one sequence."""
    monkeypatch.setattr(dsa_select, "MAX_COPIES", most)
    monkeypatch.setattr(dsa_select, "SMALL_POOLS", 4)
    monkeypatch.setattr(dsa_select, "SEG", 4)
    h = Harness(*specs(block_size=block_size), slots=2, capacity=64, seed=10)
    chunks(h, 1, 0, [13, 32])
    chunks(h, 0, 0, [30])
    for p in range(45, 48):
        b = h.buffers([1, 0, -1], [p, p - 15, 0])
        h.launch(b)
        work = b["scores"]
        assert (work.hist == 0).all(), "histogram left dirty"
        h.step([1, 0, -1], [p, p - 15, 0])
    h.step([0], [33])


def test_a_wrong_index_is_refused_before_any_launch(monkeypatch) -> None:
    """An index buffer of the wrong width fails before the pool, score and select launches:
    the key cache is unwritten and the score kernel counted nothing (a histogram left behind
    would skew every later selection)."""
    monkeypatch.setattr(dsa_select, "SMALL_POOLS", 4)
    monkeypatch.setattr(dsa_select, "SEG", 4)
    h = Harness(*specs(), slots=1, capacity=64, seed=12)
    chunks(h, 0, 0, [30])
    b = h.buffers([0], [30])
    b["index"] = torch.zeros(2, h.dsa.width + 1, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"DSA index: int32 \[>= 1, 11\]"):
        h.launch(b)
    assert h.logical(h.keys, 0, 31)[30].isnan().all(), "the step's key was written"
    assert (b["scores"].hist == 0).all(), "the score kernel ran"


def test_a_select_that_fails_after_the_score_leaves_clean_scratch(monkeypatch) -> None:
    """The cands launch raising (as a first compile may) after the score kernel counted the
    histogram: the error reaches the caller, the scratch is clean, and the next step selects
    right."""
    monkeypatch.setattr(dsa_select, "SMALL_POOLS", 4)
    monkeypatch.setattr(dsa_select, "SEG", 4)
    h = Harness(*specs(), slots=1, capacity=64, seed=13)
    chunks(h, 0, 0, [30])
    b = h.buffers([0], [30])
    ix, mla = h.kernels
    h.kernels = ((*ix[:4], None, ix[5]), mla)  # cands: not callable
    with pytest.raises(TypeError):
        h.launch(b)
    assert (b["scores"].hist == 0).all()
    h.kernels = (ix, mla)
    h.launch(b)  # the same scratch, as a runtime keeps it
    index = b["index"][:1].cpu()
    h.step([0], [30])  # fresh scratch: the reference's checks
    assert torch.equal(index, h.run([0], [30])[1].cpu())


def test_score_programs_of_several_blocks(monkeypatch) -> None:
    """Score programs of 1 to 8 blocks of 16 pools (SCORE_PROGRAMS 4: the most blocks a
    program that the row count allows), some past the visible pools, with the segmented
    select counting from them: a 100-token prompt in two chunks, then two decode steps."""
    monkeypatch.setattr(dsa_emitter, "BP", 16)
    monkeypatch.setattr(dsa_emitter, "SCORE_PROGRAMS", 4)
    monkeypatch.setattr(dsa_select, "SMALL_POOLS", 8)
    monkeypatch.setattr(dsa_select, "SEG", 16)
    assert [dsa_emitter.score_blocks(r, 64) for r in (1, 2, 4)] == [1, 2, 8]
    h = Harness(*specs(), slots=2, capacity=256, seed=11)
    chunks(h, 0, 0, [37, 63])
    h.step([0, -1], [100, 0])
    h.step([0], [101])


def test_prompt_ending_on_a_pool_boundary_without_tail_select() -> None:
    h = Harness(*specs(topk=12, kpool=4, tail=False), slots=1, capacity=64, seed=3)
    chunks(h, 0, 0, [40])
    h.step([0], [40])


@pytest.mark.parametrize("topk, kpool, tail", [(9, 3, True), (8, 1, False)])
def test_other_pool_sizes(topk: int, kpool: int, tail: bool) -> None:
    h = Harness(*specs(topk=topk, kpool=kpool, tail=tail), slots=2, capacity=64, seed=9)
    chunks(h, 1, 0, [10, 17])
    h.step([1, 0], [27, 0])


def test_several_sequences_in_one_step_equal_each_alone() -> None:
    """Decode rows, a prefill chunk and padding rows in one step (4 MLA splits)."""
    prompts = {0: 21, 1: 14, 2: 9}
    batched = Harness(*specs(), slots=3, capacity=64, seed=4)
    for s, n in prompts.items():
        chunks(batched, s, 0, [n])
    slot = [0, 1, 1, 1, 1, 1, 1, 2, -1, -1]
    pos = [21, 14, 15, 16, 17, 18, 19, 9, 0, 0]
    index, out = batched.step(slot, pos, max_splits=4)
    for s, n in prompts.items():
        alone = Harness(*specs(), slots=3, capacity=64, seed=4)
        chunks(alone, s, 0, [n])
        rows = [i for i, q in enumerate(slot) if q == s]
        a_index, a_out = alone.step([s] * len(rows), [pos[i] for i in rows])
        assert torch.equal(index[rows], a_index), f"sequence {s}"
        assert_close(out[rows], a_out, torch.float32, f"sequence {s}")


def test_pool_keys_are_computed_once() -> None:
    """A step writes the pooled key of the pool it completes and no other."""
    h = Harness(*specs(), slots=1, capacity=64, seed=5)
    chunks(h, 0, 0, [25])
    before = h.pooled.nan_to_num(7.0)  # pools 6.. not computed yet: NaN
    h.step([0], [25])
    h.step([0], [26])
    assert torch.equal(h.pooled.nan_to_num(7.0), before), "no pool completed, yet keys changed"
    h.step([0], [27])
    changed = (h.pooled.nan_to_num(7.0) != before).any(-1)[0].nonzero().flatten().tolist()
    assert changed == [6], changed


def test_mla_rows_without_tokens_and_splits() -> None:
    """Random selections of a wide index (1 and 3 splits), a row with no token, padding."""
    mla_splits_match_reference(mla_emitter)


def mla_reference(spec: MLASpec, latent0: torch.Tensor, q, c, wkvb, slot, pos,
                  index) -> tuple[torch.Tensor, torch.Tensor]:
    """The fp64 reference MLA of the rows (no padding) over a cache that starts as latent0;
    (out, the cache after)."""
    decl = StateDecl("m.latent", StateKind.TOKEN, TensorType.make("f64", "S", spec.rank))
    store = StateStore((decl,), latent0.shape[0], latent0.shape[1], "cpu", F64)
    store["m.latent"].copy_(latent0)
    at = ops.MLAAttrs(spec.heads, spec.qk_head_dim, spec.v_head_dim, spec.rank, spec.scale, "m")
    out = attn_sem.mla_attention(Ctx(F64, store, segments(slot, pos)), at, q.double(),
                                 c.double(), wkvb.double(), slot, pos, index)
    return out, store["m.latent"]


def run_mla(emitter, spec: MLASpec, latent: torch.Tensor, q, c, wkvb, slot, pos, index,
            max_splits: int, **dense) -> torch.Tensor:
    """The MLA kernels of `emitter` (mla's API) on the CPU, writing into `latent`; out.
    dense: seq_rows and dense_rows for the launch (none: the split form)."""
    src = emitter.source("mla", spec)
    kernels = tuple(load(src, n, "cpu", "mla") for n in emitter.kernel_names("mla"))
    out = torch.full((q.shape[0], spec.heads * spec.v_head_dim), float("nan"))
    emitter.launch(kernels, spec, q=q, c=c, wkvb=wkvb, slot=slot, pos=pos, index=index,
                   latent=latent, out=out, rows=q.shape[0], max_splits=max_splits,
                   work=emitter.scratch(spec, q.shape[0], torch.float32, "cpu", max_splits),
                   **dense)
    return out


def mla_splits_match_reference(emitter) -> None:
    """The MLA kernels of `emitter` (mla's API: source, kernel_names, scratch, launch) at 1 and
    3 splits of a 70-wide index against the fp64 reference (also run on the sweeps' variants)."""
    spec = MLASpec(5, 24, 16, 48, 24 ** -0.5, 70)
    gen = torch.Generator().manual_seed(6)
    slot, pos = torch.tensor([2, 0, 1, -1]), torch.tensor([100, 3, 69, 0])
    q, c = torch.randn(4, 5 * 24, generator=gen), torch.randn(4, 48, generator=gen)
    wkvb = torch.randn(5 * 40, 48, generator=gen) * 48 ** -0.5
    latent0 = torch.randn(3, 128, 48, generator=gen)
    index = torch.full((4, 70), -1, dtype=torch.int32)
    for r, p in enumerate([100, 3]):
        k = min(70, p + 1)
        index[r, torch.randperm(70, generator=gen)[:k]] = \
            torch.randperm(p + 1, generator=gen)[:k].int()
    want, cache = mla_reference(spec, latent0, q[:3], c[:3], wkvb, slot[:3], pos[:3], index[:3])
    for max_splits in (1, 3):
        latent = latent0.clone()
        out = run_mla(emitter, spec, latent, q, c, wkvb, slot, pos, index, max_splits)
        assert_close(out[:3], want, torch.float32, f"{max_splits} splits")
        assert (out[2:] == 0).all(), "a row with no token or padding attends to nothing"
        assert_close(latent, cache, torch.float32, "latents written")


def test_mla_bad_operands_are_refused_before_any_launch() -> None:
    """A wrong-width index or a scratch too small for the launch raises a ValueError that names
    the operand and its shape; no kernel runs (the kernels here are not callable)."""
    spec = MLASpec(5, 24, 16, 48, 24 ** -0.5, 70)
    gen = torch.Generator().manual_seed(7)
    q, c = torch.randn(4, 5 * 24, generator=gen), torch.randn(4, 48, generator=gen)
    latent = torch.randn(3, 128, 48, generator=gen)
    before = latent.clone()
    args = dict(q=q, c=c, wkvb=torch.randn(5 * 40, 48, generator=gen),
                slot=torch.tensor([2, 0, 1, -1]), pos=torch.tensor([100, 3, 69, 0]),
                latent=latent, out=torch.empty(4, 5 * 16), rows=4)
    index = torch.zeros((4, 70), dtype=torch.int32)
    with pytest.raises(ValueError, match=r"MLA index: \[rows, 70\] .* got \(4, 69\)"):
        mla_emitter.launch((None,) * 4, spec, index=index[:, :69].contiguous(),
                           work=mla_emitter.scratch(spec, 4, torch.float32, "cpu"), **args)
    with pytest.raises(ValueError, match=r"MLA scratch for 4 rows x \d+ splits: qa \(2, 5, 48\)"):
        mla_emitter.launch((None,) * 4, spec, index=index,
                           work=mla_emitter.scratch(spec, 2, torch.float32, "cpu"), **args)
    assert torch.equal(latent, before), "a refused launch writes no latent"


@pytest.mark.parametrize("max_splits", [1, 3])
def test_mla_walks_only_the_dsa_layout_columns(max_splits: int) -> None:
    """With head = topk the kernel reads a row at position p in columns [0, min(p + 1, topk))
    and [topk, W) only: tokens planted in the columns between (which the DSA layout keeps -1)
    are skipped, and attended to when no layout is promised (head 0)."""
    width, topk = 70, 64
    gen = torch.Generator().manual_seed(11)
    slot, pos = torch.tensor([0, 1]), torch.tensor([13, 100])
    q, c = torch.randn(2, 2 * 16, generator=gen), torch.randn(2, 32, generator=gen)
    wkvb = torch.randn(2 * 32, 32, generator=gen) * 32 ** -0.5
    latent0 = torch.randn(2, 128, 32, generator=gen)
    index = torch.full((2, width), -1, dtype=torch.int32)
    index[0, :8] = torch.tensor([0, 1, 2, 3, 8, 9, 10, 11])  # pools 0 and 2, then the tail
    index[0, topk: topk + 2] = torch.tensor([12, 13])
    index[0, 30:33] = torch.tensor([4, 5, 7])  # planted past p + 1 = 14: outside the layout
    index[1] = torch.randperm(101, generator=gen)[:width].int()  # a sparse row: every column
    laid_out = index.clone()
    laid_out[0, 30:33] = -1  # what the layout lets the kernel see
    got = {}
    for head, seen in ((0, index), (topk, laid_out)):
        spec = MLASpec(2, 16, 16, 32, 0.25, width, head=head)
        got[head] = run_mla(mla_emitter, spec, latent0.clone(), q, c, wkvb, slot, pos, index,
                            max_splits)
        want, _ = mla_reference(spec, latent0, q, c, wkvb, slot, pos, seen)
        assert_close(got[head], want, torch.float32, f"head {head}")
    assert (got[0][0] - got[topk][0]).abs().max() > 1e-3, "the planted tokens count"


# -- GPU ------------------------------------------------------------------------------------
def glm_specs(block_size: int = 0) -> tuple[DSASpec, MLASpec]:
    d = DSASpec(32, 128, 2048, 4, True, block_size)
    return d, MLASpec(64, 256, 256, 512, 256 ** -0.5, d.width, block_size, head=d.topk)


@pytest.mark.gpu
@pytest.mark.parametrize("block_size, capacity", [(0, 8192), (64, 8192), (64, 16384)])
def test_gpu_bf16_glm_sizes(block_size: int, capacity: int) -> None:
    """A 6000-token prompt in chunks of 1024 (sparse: 1500 pools, 512 chosen), then a decode
    step of 4 sequences; selections as sets up to bf16 near-ties, attention relative error.
    Capacity 16384 (4096 pools) selects in segments, from the score kernel's histogram."""
    h = Harness(*glm_specs(block_size), slots=4, capacity=capacity, device="cuda",
                act=torch.bfloat16, seed=7)
    sizes = [1024] * 5 + [880]
    chunks(h, 0, 0, sizes)
    for s in (1, 2, 3):
        chunks(h, s, 0, [300 * s])
    h.step([0, 1, 2, 3], [6000, 300, 600, 900])


@pytest.mark.gpu
def test_gpu_radix_select_32k_pools() -> None:
    spec = glm_specs()[0]
    gen = torch.Generator().manual_seed(0)
    n = 32768
    scores = torch.randn(4, n, generator=gen)
    scores[1] = torch.randint(-5, 6, (n,), generator=gen).float()
    scores[2, : n // 2] = scores[2, n // 2:]  # every score twice
    pos = torch.tensor([4 * n - 1, 4 * n - 1, 4 * n - 1, 4 * 1000 - 1])  # the last: 1000 pools
    out = run_select(spec, scores.cuda(), pos).cpu()
    for r, m in enumerate((n, n, n, 1000)):
        want = torch.tensor(stable_topk(scores[r, :m], 512))
        assert torch.equal(out[r, :2048].view(512, 4)[:, 0] // 4, want.int()), f"row {r}"


@pytest.mark.gpu
def test_gpu_decode_step_replays_from_a_cuda_graph() -> None:
    """A 4-row decode step (one padding row) captured once; two later steps replayed with new
    inputs in the captured buffers equal the same steps launched eagerly, bit for bit."""
    eager, graph = (Harness(*glm_specs(64), slots=3, capacity=4096, device="cuda",
                            act=torch.bfloat16, seed=8) for _ in range(2))
    lengths = [3000, 700, 2048]
    for h in (eager, graph):
        for s, n in enumerate(lengths):
            for lo in range(0, n, 1024):
                hi = min(n, lo + 1024)
                h.run([s] * (hi - lo), list(range(lo, hi)))
    slot = [0, 1, 2, -1]
    bufs = graph.buffers(slot, lengths + [0])
    graph.launch(bufs)  # step 0, eagerly: compiles every kernel before the capture
    eager.run(slot, lengths + [0])
    torch.cuda.synchronize()
    cuda_graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(cuda_graph):
        graph.launch(bufs)
    for step in (1, 2):
        pos = [n + step for n in lengths] + [0]
        for k, v in graph.inputs(slot, pos).items():
            bufs[k].copy_(v)
        bufs["pos"].copy_(torch.tensor(pos))
        cuda_graph.replay()
        _, index, out = eager.run(slot, pos)
        assert torch.equal(bufs["index"][:4], index), f"step {step} selection"
        assert torch.equal(bufs["out"][:4], out), f"step {step} attention"
