"""The cached GQA attention emitter (rope + KV write, then attention) against semantics.dense.rope
and semantics.attention.attention (fp64): a prefill chunk after an earlier chunk, batched decode
of sequences in different slots at different lengths, a chunk and decodes in one step, padding
rows (slot -1) that must leave every cache alone, GQA ratios 1, 2 and 3, odd head_dim, RoPE on
and off, both tilings. q, k, v are column slices of one fused qkv buffer. CPU: Triton's
interpreter in fp32; GPU (`gpu` mark): bf16 on the H200 at Llama-8B sizes, relative error.

Paged caches (block_size 16, 32): block tables shuffled and interleaved between sequences, unused
pool blocks, table entries past a sequence's blocks and positions past its end poisoned with NaN
(a read of any of them shows in the output), and a pool of more than 2^31 elements.

Split-KV decode (`launch_split`): one, several and a partial last split, chunks of one and of
several key blocks, programs past a row's keys, NaN-filled partials (a merge of a split that
stored nothing shows), one scratch reused by a shorter step (a replayed graph)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters.attention import (kernel_names, launch, launch_attend,
                                                  launch_rope_kv, source)
from hyperloom.codegen.emitters.attention_spec import AttentionSpec
from hyperloom.codegen.emitters.attention_split import MAX_SPLITS, launch_split, scratch, splits
from hyperloom.config import CONFIG
from hyperloom.ir import ops
from hyperloom.ir.semantics import Ctx, attention, dense
from hyperloom.ir.state import StateStore, segments
from hyperloom.ir.types import StateDecl, StateKind, TensorType
from tests.tolerances import assert_close, assert_rel

SLACK = 2  # rows allocated past `rows`: the kernels must leave them untouched
SPARE = 3  # pool blocks no sequence owns (paged): NaN, never read


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit equal, NaN where NaN (poisoned blocks)."""
    return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())


class Step:
    """One step: rows (slot, pos), random qkv and random prior cache contents, NaN outputs.
    With spec.block_size the caches are block pools behind a shuffled block table; the pool's
    first `block_base` blocks are left unallocated memory (pages never touched) and unused."""

    def __init__(self, spec: AttentionSpec, slot: list[int], pos: list[int], *, slots: int,
                 capacity: int, device: str = "cpu", act: torch.dtype = torch.float32,
                 seed: int = 0, block_base: int = 0) -> None:
        self.spec, self.device, self.rows = spec, device, len(slot)
        self.slot = torch.tensor(slot, device=device)
        self.pos = torch.tensor(pos, device=device)
        gen = torch.Generator().manual_seed(seed)
        h, hkv, d = spec.heads, spec.kv_heads, spec.head_dim
        qkv = torch.randn((self.rows + SLACK, (h + 2 * hkv) * d), generator=gen)
        qkv = qkv.to(device, act)
        self.q, self.k, self.v = qkv.split([h * d, hkv * d, hkv * d], dim=1)
        self.base, self.table = block_base, None
        if spec.block_size:
            self.pools(gen, slot, pos, slots, capacity, act)
        else:
            kv_shape = (slots, capacity, hkv, d)
            self.k_cache = torch.randn(kv_shape, generator=gen).to(device, act)
            self.v_cache = torch.randn(kv_shape, generator=gen).to(device, act)
        # prior contents of the part of the caches in use (a paged pool: blocks base..)
        self.k0, self.v0 = self.k_cache[block_base:].clone(), self.v_cache[block_base:].clone()
        self.q_out = torch.full((self.rows + SLACK, h * d + 8), float("nan"), device=device,
                                dtype=act)[:, 3: 3 + h * d]
        self.o = torch.full((self.rows + SLACK, h * d), float("nan"), device=device, dtype=act)
        self.rope = ops.RopeAttrs(head_dim=d, theta=10000.0, kind="llama3", factor=8.0,
                                  original_max_position=64)
        self.live = self.slot >= 0

    def pools(self, gen: torch.Generator, slot: list[int], pos: list[int], slots: int,
              capacity: int, act: torch.dtype) -> None:
        """Block pools and table: each slot owns the blocks its sequence needs (slot 0 one more),
        handed out round robin from a shuffled list, so the sequences' blocks interleave; the
        SPARE blocks nobody owns, table entries past a slot's blocks (they name a spare block)
        and positions past a sequence's end are NaN."""
        b, hkv, d = self.spec.block_size, self.spec.kv_heads, self.spec.head_dim
        ends = {s: 1 + max(p for s2, p in zip(slot, pos) if s2 == s) for s in slot if s >= 0}
        # slots idle this step hold b + 1 tokens
        ends = [ends.get(s, min(b + 1, capacity)) for s in range(slots)]
        max_blocks = -(-capacity // b)
        owned = [min(-(-e // b) + (s == 0), max_blocks) for s, e in enumerate(ends)]
        used = sum(owned)
        phys = (torch.randperm(used + SPARE, generator=gen) + self.base).tolist()
        table = torch.full((slots, max_blocks), phys[-1], dtype=torch.int32)
        free = iter(phys[:used])
        for j in range(max(owned)):
            for s in range(slots):
                if j < owned[s]:
                    table[s, j] = next(free)
        self.table = table.to(self.device)
        shape = (self.base + used + SPARE, b, hkv, d)
        self.k_cache = torch.empty(shape, device=self.device, dtype=act)
        self.v_cache = torch.empty(shape, device=self.device, dtype=act)
        for pool in (self.k_cache, self.v_cache):
            pool[self.base:] = torch.randn((used + SPARE, *shape[1:]), generator=gen).to(pool)
            pool[phys[used:]] = float("nan")
            for s, e in enumerate(ends):
                tail = torch.arange(e, owned[s] * b, device=self.device)
                pool[self.table[s, tail // b].long(), tail % b] = float("nan")

    def kernels(self) -> tuple[object, ...]:
        """(rope_kv, attend, split), loaded."""
        src = source("attn", self.spec, header="test attention")
        return tuple(load(src, name, self.device) for name in kernel_names("attn"))

    def run_rope_kv(self, kernel) -> None:
        inv_freq = dense.rope_inv_freq(self.rope, torch.float32).to(self.device)
        launch_rope_kv(kernel, self.spec, q=self.q, k=self.k, v=self.v, pos=self.pos,
                       slot=self.slot, inv_freq=inv_freq, k_cache=self.k_cache,
                       v_cache=self.v_cache, q_out=self.q_out, rows=self.rows,
                       block_table=self.table)

    def run_attend(self, kernel, seq_rows: int) -> None:
        launch_attend(kernel, self.spec, q=self.q_out, k_cache=self.k_cache,
                      v_cache=self.v_cache, pos=self.pos, slot=self.slot, o=self.o,
                      rows=self.rows, seq_rows=seq_rows, block_table=self.table)

    def scratch(self, max_splits: int) -> tuple[torch.Tensor, ...]:
        """Split-KV partials for rows + SLACK rows, NaN (a read of a split no program stored
        shows in the output), and zeroed ticket counters."""
        cap = self.k_cache.shape[1] if self.table is None else \
            self.table.shape[1] * self.spec.block_size
        part = scratch(self.spec, self.rows + SLACK, cap, self.device, max_splits)
        for t in part[:2]:
            t.fill_(float("nan"))
        return part

    def run_split(self, kernel, part: tuple[torch.Tensor, ...]) -> None:
        """RoPE, KV write and attention in the split kernel alone (q_out stays NaN)."""
        inv_freq = dense.rope_inv_freq(self.rope, torch.float32).to(self.device)
        launch_split(kernel, self.spec, q=self.q, k=self.k, v=self.v, inv_freq=inv_freq,
                     k_cache=self.k_cache, v_cache=self.v_cache, pos=self.pos, slot=self.slot,
                     o=self.o, rows=self.rows, part=part, block_table=self.table)
        assert not part[2].any(), "ticket counters not reset"

    def locate(self, slot: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Where (slot, pos) lives in k0 / v0: [slot, pos], or [table block - base, pos % B]."""
        if self.table is None:
            return slot, pos
        b = self.spec.block_size
        return self.table[slot, pos // b].long() - self.base, pos % b

    def logical(self, cache0: torch.Tensor) -> torch.Tensor:
        """Prior contents as [slots, positions, kv_heads, d], seen through the block table."""
        if self.table is None:
            return cache0
        positions = torch.arange(self.table.shape[1] * self.spec.block_size, device=self.device)
        return cache0[self.locate(torch.arange(self.table.shape[0], device=self.device)[:, None],
                                  positions[None, :])]

    def reference(self, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """(roped q, o, k cache, v cache) of the live rows; padding rows are not in any segment."""
        s, live = self.spec, self.live
        ctx = Ctx(dtype, None, ())
        q, k = self.q[: self.rows][live].to(dtype), self.k[: self.rows][live].to(dtype)
        pos, slot = self.pos[live], self.slot[live]
        if s.rope:
            q, k = dense.rope(ctx, self.rope, q, pos), dense.rope(ctx, self.rope, k, pos)
        decl = TensorType.make(dtype, "S", s.kv_heads, s.head_dim)
        decls = (StateDecl("a.k", StateKind.TOKEN, decl), StateDecl("a.v", StateKind.TOKEN, decl))
        k0, v0 = self.logical(self.k0), self.logical(self.v0)
        store = StateStore(decls, k0.shape[0], k0.shape[1], self.device, dtype)
        store["a.k"].copy_(k0)
        store["a.v"].copy_(v0)
        at = ops.AttentionAttrs(s.heads, s.kv_heads, s.head_dim, s.scale, "a")
        o = attention.attention(Ctx(dtype, store, segments(slot, pos)), at, q, k,
                                self.v[: self.rows][live].to(dtype), slot, pos)
        return q, o, store["a.k"], store["a.v"]

    def check_caches(self, k_cache: torch.Tensor, v_cache: torch.Tensor, close) -> None:
        """The live rows' entries hold the reference's (logical) RoPE(k) and v, found through
        the table when paged; every other entry, NaN poison included, is bit for bit as before."""
        slot, pos = self.slot[self.live], self.pos[self.live]
        at = self.locate(slot, pos)
        written = torch.zeros(self.k0.shape[:2], dtype=torch.bool, device=self.device)
        written[at] = True
        assert int(written.sum()) == len(slot), "two rows mapped to one cache entry"
        for got, want, old, what in ((self.k_cache, k_cache, self.k0, "k"),
                                     (self.v_cache, v_cache, self.v0, "v")):
            got = got[self.base:]
            close(got[at].float(), want[slot, pos].float(), f"{what} written")
            assert same(got[~written], old[~written]), f"{what} cache touched elsewhere"

    def run(self, seq_rows: int, part: tuple | None) -> None:
        """part (scratch): the split-KV decode kernel alone; else rope_kv, then attend."""
        rope_kv, attend, split = self.kernels()
        if part:
            self.run_split(split, part)
            assert self.q_out.isnan().all(), "split-KV decode must not write q_out"
            return
        self.run_rope_kv(rope_kv)
        self.run_attend(attend, seq_rows)

    def check_cpu(self, seq_rows: int, part: tuple | None = None) -> None:
        self.run(seq_rows, part)
        q, o, k_cache, v_cache = self.reference(torch.float64)
        # every prior cache entry kept, the live rows' RoPE(k) and v written
        self.check_caches(k_cache, v_cache,
                          lambda got, want, what: assert_close(got, want, torch.float32, what))
        if not part:
            assert_close(self.q_out[: self.rows][self.live], q, torch.float32, "roped q")
        assert_close(self.o[: self.rows][self.live], o, torch.float32, "attention")
        assert (self.o[: self.rows][~self.live] == 0).all(), "padding rows must write zeros"
        assert self.o[self.rows:].isnan().all() and self.q_out[self.rows:].isnan().all()


GQA = [(4, 4, 16), (4, 2, 16), (6, 2, 24)]  # (heads, kv_heads, head_dim): ratios 1, 2, 3


def spec_for(heads: int, kv_heads: int, head_dim: int, rope: bool = True,
             block_size: int = 0) -> AttentionSpec:
    return AttentionSpec(heads, kv_heads, head_dim, scale=head_dim ** -0.5, rope=rope,
                         block_size=block_size)


@pytest.mark.parametrize("heads,kv_heads,head_dim", GQA)
@pytest.mark.parametrize("tiling", ["prefill", "decode"])
def test_prefill_after_earlier_chunk(heads: int, kv_heads: int, head_dim: int,
                                     tiling: str) -> None:
    # rows 0..36 of slot 1 at positions 45..81 (key blocks of 64: the chunk straddles two);
    # positions 0..44 hold the earlier chunk, 82.. stale entries that must not be seen
    n = 37
    step = Step(spec_for(heads, kv_heads, head_dim), [1] * n, list(range(45, 45 + n)),
                slots=3, capacity=99, seed=heads + kv_heads)
    step.check_cpu(seq_rows=n if tiling == "prefill" else 1)


@pytest.mark.parametrize("heads,kv_heads,head_dim", GQA)
def test_batched_decode_with_padding(heads: int, kv_heads: int, head_dim: int) -> None:
    # four sequences at lengths 1, 71, 130 and 6, a padding row between them
    step = Step(spec_for(heads, kv_heads, head_dim), [3, 0, -1, 2, 1], [0, 70, 5, 129, 5],
                slots=4, capacity=131, seed=7 * heads + kv_heads)
    step.check_cpu(seq_rows=1)


@pytest.mark.parametrize("rope", [True, False])
def test_chunk_and_decodes_in_one_step(rope: bool) -> None:
    # a chunk, two decodes and padding, tiled as prefill: row blocks span several sequences
    slot = [2] * 20 + [0, -1, 1, -1]
    pos = list(range(10, 30)) + [50, 0, 99, 3]
    step = Step(spec_for(4, 2, 16, rope), slot, pos, slots=3, capacity=100, seed=5)
    step.check_cpu(seq_rows=20)
    if not rope:
        assert torch.equal(step.q_out[: step.rows], step.q[: step.rows]), "q must be copied"


@pytest.mark.parametrize("block_size", [0, 16])
def test_only_padding_rows(block_size: int) -> None:
    # through `launch`, both kernels in one call
    step = Step(spec_for(4, 2, 16, block_size=block_size), [-1, -1], [0, 4], slots=2,
                capacity=8, seed=9)
    inv_freq = dense.rope_inv_freq(step.rope, torch.float32)
    launch(step.kernels(), step.spec, q=step.q, k=step.k, v=step.v, pos=step.pos,
           slot=step.slot, inv_freq=inv_freq, k_cache=step.k_cache, v_cache=step.v_cache,
           q_out=step.q_out, o=step.o, rows=step.rows, block_table=step.table)
    assert same(step.k_cache, step.k0) and same(step.v_cache, step.v0)
    assert (step.o[: step.rows] == 0).all()


# paged caches: lengths are not multiples of the block size; chunks start and end mid-block


@pytest.mark.parametrize("block_size,gqa,tiling", [(16, GQA[1], "prefill"),
                                                   (32, GQA[2], "prefill"),
                                                   (32, GQA[1], "decode"),
                                                   (64, GQA[2], "prefill"),  # a page a key block
                                                   (64, GQA[1], "decode")])
def test_paged_prefill_after_earlier_chunk(block_size: int, gqa: tuple[int, int, int],
                                           tiling: str) -> None:
    # as the contiguous test: slot 1's rows at positions 45..81 after an earlier chunk
    n = 37
    step = Step(spec_for(*gqa, block_size=block_size), [1] * n, list(range(45, 45 + n)),
                slots=3, capacity=99, seed=block_size + gqa[0])
    assert step.table[1, : -(-82 // block_size)].diff().ne(1).any(), "table must be shuffled"
    step.check_cpu(seq_rows=n if tiling == "prefill" else 1)


@pytest.mark.parametrize("block_size,gqa", [(16, GQA[1]), (32, GQA[2]), (32, GQA[0]),
                                            (64, GQA[1]), (128, GQA[2])])
def test_paged_batched_decode_with_padding(block_size: int, gqa: tuple[int, int, int]) -> None:
    # lengths 1, 71, 130 and 6 in four slots, a padding row between them
    step = Step(spec_for(*gqa, block_size=block_size), [3, 0, -1, 2, 1], [0, 70, 5, 129, 5],
                slots=4, capacity=131, seed=block_size + 7 * gqa[0])
    step.check_cpu(seq_rows=1)


@pytest.mark.parametrize("block_size,rope", [(16, True), (32, False)])
def test_paged_chunk_and_decodes_in_one_step(block_size: int, rope: bool) -> None:
    slot = [2] * 20 + [0, -1, 1, -1]
    pos = list(range(10, 30)) + [50, 0, 99, 3]
    step = Step(spec_for(4, 2, 16, rope, block_size), slot, pos, slots=3, capacity=100,
                seed=block_size)
    step.check_cpu(seq_rows=20)


def test_paged_pool_past_int32() -> None:
    # the blocks in use start 2^31 elements into each pool: int32 block offsets would wrap (the
    # interpreter then faults); the first blocks are never touched, so never backed by memory
    spec = spec_for(2, 1, 16, block_size=16)
    base = 2 ** 31 // (16 * spec.kv_heads * spec.head_dim)
    try:
        step = Step(spec, [1, 1, 1, -1, 0], [20, 21, 22, 0, 40], slots=2, capacity=64, seed=3,
                    block_base=base)
    except RuntimeError as e:  # an OS that will not overcommit 2 x 8 GiB of address space
        pytest.skip(f"cannot reserve the pools: {e}")
    assert step.k_cache.numel() > 2 ** 31
    step.check_cpu(seq_rows=3)
    # split-KV too (it is exact for any rows, decode or not): 4 splits, 64-key chunks
    step.o.fill_(float("nan"))
    step.run_split(step.kernels()[2], step.scratch(4))
    o = step.reference(torch.float64)[1]
    assert_close(step.o[: step.rows][step.live], o, torch.float32, "split-KV attention")


def test_paged_arguments_are_checked() -> None:
    step = Step(spec_for(4, 2, 16, block_size=16), [0], [3], slots=1, capacity=16)
    rope_kv, attend, _ = step.kernels()
    with pytest.raises(ValueError, match="needs a block_table"):
        launch_attend(attend, step.spec, q=step.q_out, k_cache=step.k_cache,
                      v_cache=step.v_cache, pos=step.pos, slot=step.slot, o=step.o, rows=1)
    step.table = step.table.long()
    with pytest.raises(ValueError, match="int32"):
        step.run_rope_kv(rope_kv)
    flat = Step(spec_for(4, 2, 16), [0], [3], slots=1, capacity=16)
    flat.table = step.table.int()
    with pytest.raises(ValueError, match="contiguous cache"):
        flat.run_rope_kv(rope_kv)
    for bad in (8, 24):
        with pytest.raises(AssertionError):
            spec_for(4, 2, 16, block_size=bad)


def test_strided_last_dim_is_named() -> None:
    step = Step(spec_for(4, 2, 16), [0], [3], slots=1, capacity=16)
    _, attend, _ = step.kernels()
    o = torch.empty(step.o.shape[1], step.o.shape[0]).t()  # last dim strided
    with pytest.raises(ValueError, match=r"attention o: a contiguous last dim, got \(\d+, 64\)"):
        launch_attend(attend, step.spec, q=step.q_out, k_cache=step.k_cache,
                      v_cache=step.v_cache, pos=step.pos, slot=step.slot, o=o, rows=1)


# split-KV decode: chunk = pos + 1 keys over the splits, in whole SPLIT_N (64) key blocks.
# Lengths 1, 64, 200 and 300 at 4 splits: one split of 1 key; one of 64; four 64-key chunks,
# the last of 8; 128-key chunks (two blocks each), the last of 44. Capacity 300.
SPLIT_SLOTS, SPLIT_POS = [3, 0, -1, 2, 1], [0, 63, 5, 199, 299]


@pytest.mark.parametrize("gqa,block_size,max_splits,rope", [
    (GQA[0], 0, 4, True), (GQA[2], 0, 4, True), (GQA[1], 16, 4, True), (GQA[2], 32, 4, True),
    (GQA[1], 0, 1, True),  # one split: the whole context in one program
    (GQA[1], 32, 32, True),  # 5 splits (capacity 300): 64-key chunks
    (GQA[2], 64, 4, False),  # no RoPE: q and k pass through
])
def test_split_decode(gqa: tuple[int, int, int], block_size: int, max_splits: int,
                      rope: bool) -> None:
    # the split kernel alone rotates q and k and writes the row's key and value: the split
    # holding the row's position reads them back in its own key loop
    step = Step(spec_for(*gqa, rope, block_size), SPLIT_SLOTS, SPLIT_POS, slots=4,
                capacity=300, seed=block_size + max_splits + gqa[0])
    assert splits(300, max_splits) == min(max_splits, 5)
    step.check_cpu(seq_rows=1, part=step.scratch(max_splits))


@pytest.mark.parametrize("sms", [1, 3])
def test_split_decode_fewer_splits_when_wide(sms: int, monkeypatch) -> None:
    # a wide step launches fewer splits than its scratch holds: 5 rows x 2 kv heads over
    # 4 * sms programs -> 1 or 2 of 4 splits, partials packed by the launched count
    monkeypatch.setattr(CONFIG, "sms", sms)
    step = Step(spec_for(*GQA[1]), SPLIT_SLOTS, SPLIT_POS, slots=4, capacity=300, seed=sms)
    step.check_cpu(seq_rows=1, part=step.scratch(4))


def test_split_scratch_reused_at_shorter_lengths() -> None:
    # one scratch, as a replayed graph: the shorter step must not merge the longer one's
    # partials of splits past its own keys (nor anything of its padding row)
    spec = spec_for(4, 2, 16, block_size=16)
    long = Step(spec, [0, 1, 2], [299, 250, 200], slots=3, capacity=300, seed=11)
    part = long.scratch(4)
    long.check_cpu(seq_rows=1, part=part)
    short = Step(spec, [0, -1, 2], [40, 3, 130], slots=3, capacity=300, seed=12)
    short.check_cpu(seq_rows=1, part=part)


@pytest.mark.parametrize("seq_rows", [1, 3])
def test_launch_splits_only_decode(seq_rows: int) -> None:
    # through `launch` with a scratch: a decode step runs split-KV, a chunk the one-pass kernel
    step = Step(spec_for(4, 2, 16), [1] * seq_rows + [0], list(range(70, 70 + seq_rows)) + [9],
                slots=2, capacity=128, seed=seq_rows)
    part = step.scratch(MAX_SPLITS)
    launch(step.kernels(), step.spec, q=step.q, k=step.k, v=step.v, pos=step.pos,
           slot=step.slot, inv_freq=dense.rope_inv_freq(step.rope, torch.float32),
           k_cache=step.k_cache, v_cache=step.v_cache, q_out=step.q_out, o=step.o,
           rows=step.rows, seq_rows=seq_rows, part=part)
    assert_close(step.o[: step.rows], step.reference(torch.float64)[1], torch.float32, "o")
    assert part[0].isnan().all() == (seq_rows > 1), "split-KV must run for decode only"


def check_gpu(step: Step, seq_rows: int, part: tuple | None = None) -> None:
    step.run(seq_rows, part)
    torch.cuda.synchronize()
    q, o, k_cache, v_cache = step.reference(torch.float32)
    live = step.live
    if not part:
        assert_rel(step.q_out[: step.rows][live].float(), q, 1e-2, "roped q")
    step.check_caches(k_cache, v_cache, lambda got, want, what: assert_rel(got, want, 1e-2, what))
    assert_rel(step.o[: step.rows][live].float(), o, 1e-2, "attention")
    assert (step.o[: step.rows][~live] == 0).all()
    assert step.o[step.rows:].isnan().all()


LLAMA8B = spec_for(32, 8, 128)


@pytest.mark.gpu
@pytest.mark.parametrize("context", [1024, 3000])
def test_prefill_gpu(context: int) -> None:
    n = 512
    pos = list(range(context - n, context))
    step = Step(LLAMA8B, [1] * n, pos, slots=3, capacity=3072, device="cuda",
                act=torch.bfloat16, seed=context)
    check_gpu(step, seq_rows=n)


@pytest.mark.gpu
def test_batched_decode_gpu() -> None:
    # contexts 1024 and 3000 and two others, one padding row
    step = Step(LLAMA8B, [2, 0, -1, 3, 1], [1023, 2999, 7, 17, 1500], slots=4, capacity=3072,
                device="cuda", act=torch.bfloat16, seed=1)
    check_gpu(step, seq_rows=1)


@pytest.mark.gpu
@pytest.mark.parametrize("context,block_size", [(1024, 16), (3000, 32), (3000, 64)])
def test_paged_prefill_gpu(context: int, block_size: int) -> None:
    n = 512
    pos = list(range(context - n, context))
    step = Step(dataclasses.replace(LLAMA8B, block_size=block_size), [1] * n, pos, slots=3,
                capacity=3072, device="cuda", act=torch.bfloat16, seed=context)
    check_gpu(step, seq_rows=n)


@pytest.mark.gpu
@pytest.mark.parametrize("block_size", [16, 32, 64, 128])
def test_paged_batched_decode_gpu(block_size: int) -> None:
    step = Step(dataclasses.replace(LLAMA8B, block_size=block_size), [2, 0, -1, 3, 1],
                [1023, 2999, 7, 17, 1500], slots=4, capacity=3072, device="cuda",
                act=torch.bfloat16, seed=block_size)
    check_gpu(step, seq_rows=1)


@pytest.mark.gpu
def test_paged_pool_past_int32_gpu() -> None:
    # blocks in use 2^31 elements into 4 GiB bf16 pools; a prefill chunk and decodes
    spec = dataclasses.replace(LLAMA8B, block_size=16)
    base = 2 ** 31 // (16 * spec.kv_heads * spec.head_dim)
    slot, pos = [1] * 64 + [0, -1, 2], list(range(100, 164)) + [700, 0, 33]
    step = Step(spec, slot, pos, slots=3, capacity=1024, device="cuda", act=torch.bfloat16,
                seed=2, block_base=base)
    check_gpu(step, seq_rows=64)


@pytest.mark.gpu
@pytest.mark.parametrize("block_size,max_splits", [(0, 32), (16, 32), (0, 5), (32, 5), (64, 5),
                                                  (128, 32)])
def test_split_decode_gpu(block_size: int, max_splits: int) -> None:
    step = Step(dataclasses.replace(LLAMA8B, block_size=block_size), [2, 0, -1, 3, 1],
                [1023, 2999, 7, 17, 1500], slots=4, capacity=3072, device="cuda",
                act=torch.bfloat16, seed=block_size + max_splits)
    check_gpu(step, seq_rows=1, part=step.scratch(max_splits))


@pytest.mark.gpu
@pytest.mark.parametrize("block_size", [0, 16, 64])
def test_split_decode_long_context_gpu(block_size: int) -> None:
    # one sequence at 8192 (32 splits of 256 keys) and one at 8000, a padding row
    step = Step(dataclasses.replace(LLAMA8B, block_size=block_size), [0, -1, 1], [8191, 0, 7999],
                slots=2, capacity=8192, device="cuda", act=torch.bfloat16, seed=3)
    check_gpu(step, seq_rows=1, part=step.scratch(MAX_SPLITS))
