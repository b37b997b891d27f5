"""The cached GQA attention emitter (rope + KV write, then attention) against semantics.dense.rope
and semantics.attention.attention (fp64): a prefill chunk after an earlier chunk, batched decode
of sequences in different slots at different lengths, a chunk and decodes in one step, padding
rows (slot -1) that must leave every cache alone, GQA ratios 1, 2 and 3, odd head_dim, RoPE on
and off, both tilings. q, k, v are column slices of one fused qkv buffer. CPU: Triton's
interpreter in fp32; GPU (`gpu` mark): bf16 on the H200 at Llama-8B sizes, relative error."""

from __future__ import annotations

import pytest
import torch

from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters.attention import AttentionSpec, kernel_names, launch_attend
from hyperloom.codegen.emitters.attention import launch, launch_rope_kv, source
from hyperloom.config import overrides
from hyperloom.ir import ops
from hyperloom.ir.semantics import Ctx, attention, dense
from hyperloom.ir.state import StateStore, segments
from hyperloom.ir.types import StateDecl, StateKind, TensorType
from tests.tolerances import assert_close, assert_rel

SLACK = 2  # rows allocated past `rows`: the kernels must leave them untouched


@pytest.fixture(autouse=True, scope="module")
def _kernel_cache(tmp_path_factory):
    with overrides(kernel_cache_dir=str(tmp_path_factory.mktemp("kernels"))):
        yield


class Step:
    """One step: rows (slot, pos), random qkv and random prior cache contents, NaN outputs."""

    def __init__(self, spec: AttentionSpec, slot: list[int], pos: list[int], *, slots: int,
                 capacity: int, device: str = "cpu", act: torch.dtype = torch.float32,
                 seed: int = 0) -> None:
        self.spec, self.device, self.rows = spec, device, len(slot)
        self.slot = torch.tensor(slot, device=device)
        self.pos = torch.tensor(pos, device=device)
        gen = torch.Generator().manual_seed(seed)
        h, hkv, d = spec.heads, spec.kv_heads, spec.head_dim
        qkv = torch.randn((self.rows + SLACK, (h + 2 * hkv) * d), generator=gen)
        qkv = qkv.to(device, act)
        self.q, self.k, self.v = qkv.split([h * d, hkv * d, hkv * d], dim=1)
        kv_shape = (slots, capacity, hkv, d)
        self.k_cache = torch.randn(kv_shape, generator=gen).to(device, act)
        self.v_cache = torch.randn(kv_shape, generator=gen).to(device, act)
        self.k0, self.v0 = self.k_cache.clone(), self.v_cache.clone()
        self.q_out = torch.full((self.rows + SLACK, h * d + 8), float("nan"), device=device,
                                dtype=act)[:, 3: 3 + h * d]
        self.o = torch.full((self.rows + SLACK, h * d), float("nan"), device=device, dtype=act)
        self.rope = ops.RopeAttrs(head_dim=d, theta=10000.0, kind="llama3", factor=8.0,
                                  original_max_position=64)
        self.live = self.slot >= 0

    def kernels(self) -> tuple[object, object]:
        src = source("attn", self.spec, header="test attention")
        return tuple(load(src, name, self.device) for name in kernel_names("attn"))

    def run_rope_kv(self, kernel) -> None:
        inv_freq = dense.rope_inv_freq(self.rope, torch.float32).to(self.device)
        launch_rope_kv(kernel, self.spec, q=self.q, k=self.k, v=self.v, pos=self.pos,
                       slot=self.slot, inv_freq=inv_freq, k_cache=self.k_cache,
                       v_cache=self.v_cache, q_out=self.q_out, rows=self.rows)

    def run_attend(self, kernel, seq_rows: int) -> None:
        launch_attend(kernel, self.spec, q=self.q_out, k_cache=self.k_cache,
                      v_cache=self.v_cache, pos=self.pos, slot=self.slot, o=self.o,
                      rows=self.rows, seq_rows=seq_rows)

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
        store = StateStore(decls, self.k0.shape[0], self.k0.shape[1], self.device, dtype)
        store["a.k"].copy_(self.k0)
        store["a.v"].copy_(self.v0)
        at = ops.AttentionAttrs(s.heads, s.kv_heads, s.head_dim, s.scale, "a")
        o = attention.attention(Ctx(dtype, store, segments(slot, pos)), at, q, k,
                                self.v[: self.rows][live].to(dtype), slot, pos)
        return q, o, store["a.k"], store["a.v"]

    def check_cpu(self, seq_rows: int) -> None:
        rope_kv, attend = self.kernels()
        self.run_rope_kv(rope_kv)
        q, o, k_cache, v_cache = self.reference(torch.float64)
        # caches first: every prior entry kept, the live rows' RoPE(k) and v written
        assert_close(self.k_cache, k_cache, torch.float32, "k cache")
        assert_close(self.v_cache, v_cache, torch.float32, "v cache")
        assert_close(self.q_out[: self.rows][self.live], q, torch.float32, "roped q")
        self.run_attend(attend, seq_rows)
        assert_close(self.o[: self.rows][self.live], o, torch.float32, "attention")
        assert (self.o[: self.rows][~self.live] == 0).all(), "padding rows must write zeros"
        assert self.o[self.rows:].isnan().all() and self.q_out[self.rows:].isnan().all()


GQA = [(4, 4, 16), (4, 2, 16), (6, 2, 24)]  # (heads, kv_heads, head_dim): ratios 1, 2, 3


def spec_for(heads: int, kv_heads: int, head_dim: int, rope: bool = True) -> AttentionSpec:
    return AttentionSpec(heads, kv_heads, head_dim, scale=head_dim ** -0.5, rope=rope)


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


def test_only_padding_rows() -> None:
    # through `launch`, both kernels in one call
    step = Step(spec_for(4, 2, 16), [-1, -1], [0, 4], slots=2, capacity=8, seed=9)
    inv_freq = dense.rope_inv_freq(step.rope, torch.float32)
    launch(step.kernels(), step.spec, q=step.q, k=step.k, v=step.v, pos=step.pos,
           slot=step.slot, inv_freq=inv_freq, k_cache=step.k_cache, v_cache=step.v_cache,
           q_out=step.q_out, o=step.o, rows=step.rows)
    assert torch.equal(step.k_cache, step.k0) and torch.equal(step.v_cache, step.v0)
    assert (step.o[: step.rows] == 0).all()


def check_gpu(step: Step, seq_rows: int) -> None:
    rope_kv, attend = step.kernels()
    step.run_rope_kv(rope_kv)
    step.run_attend(attend, seq_rows)
    torch.cuda.synchronize()
    q, o, k_cache, v_cache = step.reference(torch.float32)
    live = step.live
    slot, pos = step.slot[live], step.pos[live]
    assert_rel(step.q_out[: step.rows][live].float(), q, 1e-2, "roped q")
    assert_rel(step.k_cache[slot, pos].float(), k_cache[slot, pos], 1e-2, "k written")
    assert_rel(step.v_cache[slot, pos].float(), v_cache[slot, pos], 1e-2, "v written")
    written = torch.zeros(step.k0.shape[:2], dtype=torch.bool, device=step.device)
    written[slot, pos] = True
    assert torch.equal(step.k_cache[~written], step.k0[~written]), "k cache touched elsewhere"
    assert torch.equal(step.v_cache[~written], step.v0[~written]), "v cache touched elsewhere"
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
