"""The paged KV cache: block accounting, all-or-nothing reservation, and the compiled engine on
a block pool smaller than every slot at full length."""

from __future__ import annotations

import pytest
import torch

import hyperloom
from hyperloom.config import overrides
from hyperloom.errors import CapacityError
from hyperloom.ir.types import S, StateDecl, StateKind, TensorType
from hyperloom.models.random_weights import random_weights
from hyperloom.runtime.paged import PagedStateStore
from tests.tolerances import assert_close

KV = StateDecl("l0.k", StateKind.TOKEN, TensorType.make("f32", S, 2, 4))
CONV = StateDecl("l0.conv", StateKind.FIXED, TensorType.make("f32", 6, 3))


def store(blocks: int = 6) -> PagedStateStore:
    return PagedStateStore((KV, CONV), {"l0.k"}, slots=3, capacity=64, block_size=16,
                           num_blocks=blocks, device=torch.device("cpu"))


def test_blocks_follow_lengths_and_come_back():
    st = store()
    assert st["l0.k"].shape == (6, 16, 2, 4) and st["l0.conv"].shape == (3, 6, 3)
    st.reserve([(0, 1), (1, 33)])
    assert len(st.blocks[0]) == 1 and len(st.blocks[1]) == 3 and len(st.free) == 2
    assert st.table[1, :3].tolist() == st.blocks[1]
    assert len(set(st.blocks[0] + st.blocks[1])) == 4  # no block handed out twice
    st.reserve([(0, 16)])  # still within its first block
    assert len(st.blocks[0]) == 1
    st.release(1)
    assert len(st.free) == 5 and st.blocks[1] == [] and not st.table[1].any()


def test_reservation_is_all_or_nothing():
    st = store(blocks=4)
    st.reserve([(0, 40)])  # 3 blocks
    with pytest.raises(CapacityError, match="needs 3 more blocks of 16 tokens, 1 are free"):
        st.reserve([(1, 10), (2, 20)])
    assert st.blocks[1] == [] and st.blocks[2] == [] and len(st.free) == 1


def test_compiled_engine_on_a_small_pool():
    """4 blocks of 16 for 3 slots of 64: a request that does not fit fails before launch and
    leaves the others exactly as they were; freeing a sequence lets the next one in."""
    spec = hyperloom.build("llama", "tiny", dtype=torch.float32)
    w = random_weights(spec, seed=5)
    with overrides(kv_block_size=16, kv_blocks=4):
        eng = hyperloom.engine(spec, w, max_seq_len=64, max_sequences=3, prefill_chunk=16)
    ref = hyperloom.engine(spec, w, backend="reference", max_seq_len=64, max_sequences=3)
    ids = torch.randint(0, 256, (40,), generator=torch.Generator().manual_seed(0))
    a, b = eng.new_sequence(), eng.new_sequence()
    ra = ref.new_sequence()
    assert_close(eng.prefill(a, ids[:34]), ref.prefill(ra, ids[:34]), torch.float32, "a")
    with pytest.raises(CapacityError, match="out of blocks"):
        eng.prefill(b, ids[:20])  # needs 2 blocks, 1 is free
    assert b.length == 0
    assert_close(eng.decode([a], [7]), ref.decode([ra], [7]), torch.float32, "a after refusal")
    eng.free(a)
    rb = ref.new_sequence()
    assert_close(eng.prefill(b, ids[:20]), ref.prefill(rb, ids[:20]), torch.float32, "b")
    c = eng.new_sequence()  # reuses a's slot and blocks: must not continue a's text
    rc = ref.new_sequence()
    assert_close(eng.prefill(c, ids[20:25]), ref.prefill(rc, ids[20:25]), torch.float32, "c")


@pytest.mark.parametrize("max_len", [24, 40])  # below one 64-token block; not a multiple
def test_capacity_off_the_block_size(max_len: int):
    """Pages of 64 (the default) over a capacity that is not a whole number of blocks: GLM's
    per-slot pooled keys are sized for the blocks the table spans; a prompt and decode steps to
    max_seq_len equal the reference, and one token more is refused before launch."""
    spec = hyperloom.build("glm5next", "tiny", dtype=torch.float32)
    w = random_weights(spec, seed=2)
    with overrides(kv_block_size=64):
        eng = hyperloom.engine(spec, w, max_seq_len=max_len, max_sequences=2, prefill_chunk=8)
    ref = hyperloom.engine(spec, w, backend="reference", max_seq_len=max_len, max_sequences=2)
    ids = torch.randint(0, 256, (max_len - 2,), generator=torch.Generator().manual_seed(4))
    a, ra = eng.new_sequence(), ref.new_sequence()
    assert_close(eng.prefill(a, ids), ref.prefill(ra, ids), torch.float32, "prefill")
    for i, tok in enumerate((5, 77)):
        assert_close(eng.decode([a], [tok]), ref.decode([ra], [tok]), torch.float32, f"step {i}")
    with pytest.raises(CapacityError, match="max_seq_len"):
        eng.decode([a], [9])
    assert a.length == max_len


def test_compiled_glm_pages_its_dsa_caches():
    """GLM's indexer keys and MLA latents live in the block pool (the pooled keys, one row per
    pool, stay per slot); a 30-token prompt in chunks of 8, then decode across a pool edge
    (position 31), equal the reference; a request past the pool fails before launch."""
    spec = hyperloom.build("glm5next", "tiny", dtype=torch.float32)
    w = random_weights(spec, seed=1)
    with overrides(kv_block_size=16, kv_blocks=2):
        eng = hyperloom.engine(spec, w, max_seq_len=64, max_sequences=2, prefill_chunk=8)
    ref = hyperloom.engine(spec, w, backend="reference", max_seq_len=64, max_sequences=2)
    paged = {n.rsplit(".", 1)[-1] for n in eng.state.paged}
    assert paged == {"keys", "latent"} and "pooled" not in paged
    ids = torch.randint(0, 256, (30,), generator=torch.Generator().manual_seed(3))
    a, ra = eng.new_sequence(), ref.new_sequence()
    assert_close(eng.prefill(a, ids), ref.prefill(ra, ids), torch.float32, "prefill")
    b = eng.new_sequence()
    with pytest.raises(CapacityError, match="out of blocks"):
        eng.prefill(b, ids[:20])  # a's 30 tokens hold both blocks
    assert b.length == 0
    for i, tok in enumerate((5, 77)):
        assert_close(eng.decode([a], [tok]), ref.decode([ra], [tok]), torch.float32, f"step {i}")
