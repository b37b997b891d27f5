"""`cache.compile_ahead`: launches inside compile their kernels (on a thread pool, through
Triton's AsyncCompileMode) and run nothing; the real launches after it find them compiled."""

from __future__ import annotations

import pytest
import torch
import triton

from hyperloom.codegen import cache
from hyperloom.codegen.emitters.text import PDL_WAIT
from hyperloom.config import overrides


class _Kernel:
    """A stand-in JIT function: records launches and warm-ups (compiles without a launch)."""

    def __init__(self) -> None:
        self.launched, self.warmed = [], []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launched.append((grid, args, kwargs))

    def warmup(self, *args, grid, **kwargs):
        self.warmed.append((grid, args, kwargs, triton.runtime._async_compile.active_mode.get()))


def test_launches_inside_only_compile_with_the_same_arguments():
    k = _Kernel()
    loaded = cache.Loaded(k, pdl=True)
    with cache.compile_ahead(2):
        loaded[(4, 2)](1, 2, num_warps=8)
    assert k.launched == []
    (grid, args, kwargs, mode), = k.warmed
    assert (grid, args, kwargs) == ((4, 2), (1, 2), {"launch_pdl": True, "num_warps": 8})
    assert mode is not None  # compiled under Triton's async mode: on the pool's threads
    loaded[(4, 2)](1, 2, num_warps=8)  # outside: a real launch again
    assert k.launched == [((4, 2), (1, 2), {"launch_pdl": True, "num_warps": 8})]
    assert triton.runtime._async_compile.active_mode.get() is None


def test_an_error_inside_leaves_launches_real():
    k = _Kernel()
    with pytest.raises(ValueError), cache.compile_ahead(1):
        raise ValueError("boom")
    cache.Loaded(k, pdl=False)[(1,)](3)
    assert k.launched == [((1,), (3,), {})] and k.warmed == []


_SRC = f"""import triton
import triton.language as tl


@triton.jit
def ahead_fill(x_ptr, n, BLOCK: tl.constexpr):
    {PDL_WAIT}
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + i, i.to(tl.float32) + 1.0, mask=i < n)
"""


@pytest.mark.gpu
def test_gpu_compiled_ahead_runs_nothing_then_launches_without_compiling(tmp_path):
    dev = torch.device("cuda")
    with overrides(kernel_cache_dir=str(tmp_path)):
        kern = cache.load(_SRC, "ahead_fill", dev)
    x = torch.zeros(1000, device=dev)
    idx = torch.cuda.current_device()  # Triton's per-device compiled-kernel cache
    before = len(kern.kernel.device_caches[idx][0])
    with cache.compile_ahead(4):
        kern[(8,)](x, 1000, BLOCK=128)
    torch.cuda.synchronize()
    assert torch.count_nonzero(x) == 0  # nothing ran
    compiled = kern.kernel.device_caches[idx][0]
    assert len(compiled) == before + 1
    kern[(8,)](x, 1000, BLOCK=128)
    torch.cuda.synchronize()
    assert len(compiled) == before + 1  # the launch found it
    torch.testing.assert_close(x, torch.arange(1000, device=dev, dtype=torch.float32) + 1)


@pytest.mark.gpu
def test_gpu_engine_compiled_ahead_equals_compiled_at_first_launch(tmp_path, monkeypatch):
    """The same prefill and decodes, kernels compiled ahead on 8 threads and one by one: bitwise
    the same logits. Each engine loads its kernels afresh (new modules, so Triton's in-memory
    caches start empty)."""
    import hyperloom
    from hyperloom.models.random_weights import random_weights

    spec = hyperloom.build("llama", "tiny-hc", dtype=torch.bfloat16)
    weights = random_weights(spec, seed=3)
    ids = torch.randint(0, spec.vocab_size, (40,), generator=torch.Generator().manual_seed(4))
    outs = []
    for threads in (8, 0):
        monkeypatch.setattr(cache, "_LOADED", {})
        with overrides(compile_threads=threads, kernel_cache_dir=str(tmp_path / str(threads))):
            eng = hyperloom.compile(spec, weights, device="cuda", dtype=torch.bfloat16,
                                    max_seq_len=128)
            seq = eng.new_sequence()
            got = [eng.prefill(seq, ids)]
            got += [eng.decode([seq], [int(ids[i])]) for i in range(3)]
        assert eng.runners["main"].replays == 3
        outs.append(got)
    for a, b in zip(*outs):
        assert torch.equal(a, b)
