"""Eager replay (CONFIG.eager_replay): a step of Python launches records its kernels' replay
thunks (`cache.recording`) and later steps of the same shape run them instead of the launch
functions. The thunks themselves (a compiled kernel on bound values) exist only on a GPU; here
`Loaded.replay` is stood in by a thunk that launches the same kernel on the same arguments, so
the interpreter checks the plumbing: the replayed step's outputs equal the launched one's, no
launch function runs on replay, and a step that ran a torch op is never replayed."""

from __future__ import annotations

import pytest
import torch

from hyperloom import api
from hyperloom.codegen import cache
from hyperloom.ir.state import StateStore
from hyperloom.bench.scenarios import _as_model, site_graph
from hyperloom.codegen.compilation import compile_graph
from hyperloom.config import overrides
from hyperloom.models.random_weights import random_weights
from hyperloom.runtime import program
from hyperloom.runtime.program import Program


def test_bound_values_fill_defaults_in_order_and_drop_launch_options():
    def kern(a, b, c=3, D=7):
        pass

    got = cache.bound_values(kern, (1,), {"c": 5, "b": 2, "num_warps": 4, "launch_pdl": True})
    assert got == (1, 2, 5, 7)


class _Kernel:
    def __init__(self) -> None:
        self.launched = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launched.append((grid, args, kwargs))


def test_recording_launches_and_keeps_a_thunk(monkeypatch):
    k = _Kernel()
    loaded = cache.Loaded(k, pdl=True)
    monkeypatch.setattr(cache.Loaded, "replay",
                        lambda self, grid, args, kwargs: ("thunk", grid, args, kwargs))
    with cache.recording() as rec:
        loaded[(3,)](1, 2, num_warps=4)
    assert k.launched == [((3,), (1, 2), {"launch_pdl": True, "num_warps": 4})]
    assert rec == [("thunk", (3,), (1, 2), {"num_warps": 4, "launch_pdl": True})]
    loaded[(3,)](9)  # outside: launched, nothing recorded
    assert len(k.launched) == 2 and len(rec) == 1


def _site_program(rows: int) -> Program:
    graph = site_graph(api.build("llama", "tiny-hc"))
    comp = compile_graph(graph, rows)
    prog = Program(comp, random_weights(_as_model(graph), seed=2), StateStore((), 1, 1, "cpu"),
                   torch.device("cpu"))
    x = torch.randn(prog.inputs["%x"][:rows].shape, generator=torch.Generator().manual_seed(3))
    prog.inputs["%x"][:rows].copy_(x)
    return prog


def _replaying(monkeypatch, prog: Program) -> list:
    """Replays on for prog; returns the list that counts Loaded launches made through
    launch functions (replay thunks launch the kernel directly)."""
    calls = []
    getitem = cache.Loaded.__getitem__

    def counted(self, grid):
        calls.append(grid)
        return getitem(self, grid)

    monkeypatch.setattr(cache.Loaded, "__getitem__", counted)
    monkeypatch.setattr(cache.Loaded, "replay", lambda self, grid, args, kwargs:
                        lambda: self.kernel[grid](*args, **kwargs))
    monkeypatch.setattr(program, "replayable", lambda device: True)
    return calls


def test_a_shape_replays_its_first_step(monkeypatch):
    rows = 3
    prog = _site_program(rows)
    calls = _replaying(monkeypatch, prog)
    prog.step(rows, rows)
    first = prog.outputs(rows)["streams"]
    assert calls and prog._replays[(rows, rows)]
    calls.clear()
    for _, v in prog.graph.outputs:  # the replay must write them again
        prog.operands[v][:rows].fill_(float("nan"))
    prog.step(rows, rows)
    assert calls == []  # no launch function ran
    assert torch.equal(prog.outputs(rows)["streams"], first)
    prog.step(2, 2)  # another shape records its own
    assert calls and (2, 2) in prog._replays


def test_a_step_with_a_torch_op_is_never_replayed(monkeypatch):
    rows = 3
    prog = _site_program(rows)
    calls = _replaying(monkeypatch, prog)
    x = prog.inputs["%x"]
    prog.launches.append(lambda r, s: x[:r].mul_(1.0))  # a torch op a replay would skip
    prog.step(rows, rows)
    assert prog._replays[(rows, rows)] is None
    calls.clear()
    prog.step(rows, rows)
    assert calls  # launched as usual


@pytest.mark.gpu
@pytest.mark.parametrize("model, config", [("llama", "tiny-hc"), ("glm5next", "tiny")])
def test_gpu_replayed_prefills_equal_launched_ones(model: str, config: str):
    """On the H200 (bf16): the same prompt prefilled in chunks of one shape by an engine that
    replays its recorded kernels and by one that launches them: bitwise equal logits, and the
    replaying engine did record its chunk shape."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device (runs on the H200)")
    spec = api.build(model, config, dtype=torch.bfloat16)
    weights = random_weights(spec, seed=4)
    prompt = torch.randint(0, spec.vocab_size, (96,), generator=torch.Generator().manual_seed(5))
    got = {}
    for replay in (False, True):
        with overrides(eager_replay=replay):
            eng = api.compile(spec, weights, "cuda", torch.bfloat16, max_seq_len=128,
                              prefill_chunk=32)
            got[replay] = eng.prefill(eng.new_sequence(), prompt)
            recorded = eng.runners["main"].program._replays
    assert torch.equal(got[True], got[False])
    assert any(recorded.values()), recorded  # a 32-row chunk replayed its first one's kernels
