"""Programmatic dependent launch: a kernel launched early must wait for its predecessor grid
before it touches any activation, and only a kernel that waits may be launched early."""

from __future__ import annotations

import re

import pytest

import hyperloom
from hyperloom.codegen import cache
from hyperloom.codegen.compilation import compile_graph
from hyperloom.codegen.emitters import kda
from hyperloom.codegen.emitters.kda import KDASpec
from hyperloom.codegen.emitters.text import PDL_WAIT
from hyperloom.config import overrides

# what a kernel must not do before its wait: touch memory, or call a helper that may
TOUCHES = re.compile(r"tl\.(load|store|atomic_\w+)\(|\b_\w+\(")


def _kernels(source: str) -> dict[str, list[str]]:
    """Every @triton.jit function of a module: name -> its body lines (after the signature)."""
    out: dict[str, list[str]] = {}
    for chunk in source.split("@triton.jit")[1:]:
        lines = chunk.splitlines()
        name = re.search(r"def (\w+)\(", chunk)[1]
        start = next(i for i, line in enumerate(lines) if line.rstrip().endswith("):"))
        out[name] = [line for line in lines[start + 1:] if line.startswith("    ")]
    return out


def _sources(**knobs) -> dict[str, str]:
    with overrides(interpret=False, **knobs):  # the GPU form of the sources
        return compile_graph(hyperloom.build("llama", "tiny-hc").main, 64).sources


def _waiting(sources: dict[str, str], exempt: str | None = None) -> list[tuple[str, str]]:
    """(entry, kernel) of every launched kernel, each checked to wait before it touches memory;
    helpers, and kernels whose name holds `exempt`, must not wait at all."""
    out = []
    for entry, source in sources.items():
        for name, body in _kernels(source).items():
            at = next((i for i, line in enumerate(body) if PDL_WAIT in line), None)
            if name.startswith("_") or (exempt and exempt in name):  # helpers run after it
                assert at is None, (entry, name)
                continue
            assert at is not None, (entry, name)
            early = [line for line in body[:at] if TOUCHES.search(line)]
            assert not early, (entry, name, early)
            out.append((entry, name))
    return out


@pytest.mark.parametrize("knobs", [{}, {"kv_block_size": 16}, {"fold_sites": False}])
def test_every_launched_kernel_waits_before_it_touches_memory(knobs):
    # embed, hc_pre x5, GEMMs, rope + attention kernels, hc_post, norm
    assert len(_waiting(_sources(**knobs))) >= 12


def test_glm_kernels_wait_before_they_touch_memory():
    """GLM's sources: every launched kernel waits before it touches memory, but the chunked
    KDA prefill's five (milliseconds a launch: nothing for an early start to hide)."""
    spec = hyperloom.build("glm5next", "tiny")
    waiting = set()
    for graph in (spec.main, spec.mtp):  # the MTP drafter's has the concat and cast kernels
        with overrides(interpret=False):
            sources = compile_graph(graph, 64).sources
        waiting |= {cache.shared_name(e) for e, _ in _waiting(sources, exempt="_chunk")}
    for kind in ("dsa", "mla", "moe_router", "moe_experts", "kda", "hc_head_mean", "concat",
                 "cast"):
        assert any(kind in e for e in waiting), kind


@pytest.mark.parametrize("knobs", [{"pdl": False}, {"pdl": True, "interpret": True}])
def test_no_wait_without_pdl_or_on_the_interpreter(knobs):
    with overrides(**knobs):
        src = compile_graph(hyperloom.build("llama", "tiny-hc").main, 64).sources
    assert not any("gdc_" in s for s in src.values())


class _Kernel:
    """A stand-in JIT function recording its launches."""

    def __init__(self, src: str) -> None:
        self.src, self.calls = src, []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append((grid, args, kwargs))


def test_early_launch_adds_the_attribute_and_forwards_everything_else():
    k = _Kernel(f"def f(x):\n    {PDL_WAIT}\n")
    early = cache.Loaded(k, pdl=True)
    early[(3, 1)](1, 2, num_warps=4)
    assert k.calls == [((3, 1), (1, 2), {"num_warps": 4, "launch_pdl": True})]
    assert early.src is k.src
    plain = cache.Loaded(_Kernel("def f(x):\n    pass\n"), pdl=False)
    plain[(2,)](5)
    assert plain.kernel.calls == [((2,), (5,), {})]


def test_the_loader_launches_early_exactly_the_kernels_that_wait(tmp_path):
    waits = f"import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef kw(x):\n" \
            f"    {PDL_WAIT}\n    tl.store(x, 1)\n"
    plain = "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef kp(x):\n" \
            "    tl.store(x, 1)\n"
    with overrides(kernel_cache_dir=str(tmp_path)):
        assert cache.load(waits, "kw", "cpu").pdl
        assert not cache.load(plain, "kp", "cpu").pdl


def test_kda_early_state_reads_only_slots_and_state_before_its_wait():
    """The recurrence's EARLY form loads its slot and state (no kernel of a step writes them
    before it) ahead of the wait; every other read waits. Off, the wait opens the body."""
    with overrides(interpret=False):
        body = _kernels(kda.source("rec", KDASpec(2, 16)))["rec"]
    waits = [i for i, line in enumerate(body) if PDL_WAIT in line]
    assert len(waits) == 2 and body[waits[0] - 1].strip() == "if not EARLY:"
    assert body[waits[1] - 1].strip() == "if EARLY:" and waits[0] == 1
    early = [line.strip() for line in body[:waits[1]] if TOUCHES.search(line)]
    allowed = ("s = tl.load(slot_ptr + r)", "stop = _run_stop(slot_ptr, r, rows)",
               "S = tl.load(st,")
    assert len(early) == 3 and all(line.startswith(allowed) for line in early), early
    later = "\n".join(body[waits[1]:])
    assert all(f"tl.load({p}_ptr" in later for p in "qkvgb"), later
