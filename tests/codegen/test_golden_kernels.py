"""Golden snapshots of the generated kernels of one tiny config, so a change to codegen shows up
in review. Regenerate with HYPERLOOM_UPDATE_GOLDEN=1 after checking the change is intended."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import hyperloom
from hyperloom.codegen.compilation import compile_graph
from hyperloom.config import overrides

GOLDEN = Path(__file__).parent / "golden" / "llama_tiny_hc"


def sources() -> dict[str, str]:
    """Every kernel of layer 0, the embedding and the head (layer 1 only repeats layer 0)."""
    with overrides(interpret=False):  # the GPU form of the source (no fp32 upcast of dots)
        comp = compile_graph(hyperloom.build("llama", "tiny-hc").main, 64)
    return {k.name: comp.sources[k.name] for k in comp.plan.kernels
            if not any(r.startswith(("@layers.1.", "layers.1."))
                       for r in (*k.node.args, k.node.state or ""))}


def test_generated_kernels_match_golden():
    got = sources()
    if os.environ.get("HYPERLOOM_UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(parents=True, exist_ok=True)
        for old in GOLDEN.glob("*.py"):
            old.unlink()
        for name, src in got.items():
            (GOLDEN / f"{name}.py").write_text(src)
    want = {p.stem: p.read_text() for p in GOLDEN.glob("*.py")}
    assert sorted(got) == sorted(want)
    for name in got:
        assert got[name] == want[name], f"{name}: generated source changed"


def test_sources_are_deterministic_and_carry_their_header():
    a, b = sources(), sources()
    assert a == b
    for name, src in a.items():
        assert src.startswith(f"# {name}:") and "# fuses: " in src


@pytest.mark.parametrize("interpret", [False, True])
def test_interpreter_form_differs_only_where_dots_are_upcast(interpret):
    with overrides(interpret=interpret):
        src = compile_graph(hyperloom.build("llama", "tiny-hc").main, 64).sources
    gemm = next(s for n, s in src.items() if "q_k_v" in n)
    assert ("float32" in gemm) or not interpret


def test_layers_of_a_stack_share_their_kernels():
    """Entries of one spec in different layers load one module: Triton compiles each once."""
    import hyperloom
    from hyperloom.codegen.cache import canonical, shared_name
    from hyperloom.codegen.compilation import compile_graph

    comp = compile_graph(hyperloom.build("llama", "bench").main, 64)
    shared: dict[str, set[str]] = {}
    for name, src in comp.sources.items():
        if "_l3_" not in name:  # the last layer's down GEMM folds no site (the head follows)
            shared.setdefault(shared_name(name), set()).add(canonical(src, name))
    assert all(len(v) == 1 for v in shared.values()), [k for k, v in shared.items() if len(v) > 1]
    assert len(shared) <= len(comp.sources) // 3  # 4 layers: 7 per layer + embedding + head
