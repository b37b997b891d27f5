"""The reference engine against transformers on tiny random checkpoints saved with
save_pretrained: fp32 logits for a prompt, then 8 cached decode steps, and identical greedy tokens.
GLM prompts are longer than index_topk so DSA selection is really sparse."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import hyperloom
from hyperloom.ir.interpreter import run_graph
from hyperloom.ir.ops import Op
from tests.hf_models import save_tiny
from tests.tolerances import assert_close

DSA, KDA = "indexed_attention", "linear_attention"
CASES = {
    "llama": ("llama", {}),
    "llama-tied": ("llama", {"tie_word_embeddings": True}),
    "glm": ("glm5next", {}),
    "glm-dense-topk": ("glm5next", {"index_topk": 64}),
    "glm-shared-index": ("glm5next", {
        "layer_types": (KDA, DSA, DSA, KDA), "indexer_types": ("full", "full", "shared", "full"),
        "mlp_layer_types": ("sparse", "dense", "sparse", "dense")}),
    "glm-softplus-gate": ("glm5next", {"linear_lower_bound": None, "n_group": 1}),
}


@pytest.fixture(scope="module", params=list(CASES))
def saved(request, tmp_path_factory):
    name, overrides = CASES[request.param]
    path = tmp_path_factory.mktemp(request.param)
    return save_tiny(name, path, seed=len(request.param), **overrides), path


@pytest.fixture(params=["reference", "compiled"])
def pair(request, saved):
    hf, path = saved
    return hf, hyperloom.from_pretrained(path, dtype=torch.float32, backend=request.param)


def _hf_step(hf, ids: torch.Tensor, cache):
    with torch.no_grad():
        out = hf(input_ids=ids[None], cache=cache, use_cache=True)
    return out.logits[0], getattr(out, "cache", None) or out.past_key_values


def test_prefill_and_decode_match_transformers(pair):
    hf, eng = pair
    prompt = torch.randint(0, 256, (21,), generator=torch.Generator().manual_seed(7))
    want, cache = _hf_step(hf, prompt, None)
    seq = eng.new_sequence()
    got = eng.prefill(seq, prompt)
    assert_close(got, want, torch.float32, "prefill logits")
    hf_tok = got_tok = int(want[-1].argmax())
    hf_tokens, our_tokens = [], []
    for step in range(8):
        want, cache = _hf_step(hf, torch.tensor([hf_tok]), cache)
        got = eng.decode([seq], [got_tok])
        assert_close(got[0], want[-1], torch.float32, f"decode step {step}")
        hf_tok, got_tok = int(want[-1].argmax()), int(got[0].argmax())
        hf_tokens.append(hf_tok)
        our_tokens.append(got_tok)
    assert our_tokens == hf_tokens


def _hf_selections(hf) -> list[torch.Tensor]:
    """Forward hooks that capture each transformers DSA indexer's top-k output."""
    got: list[torch.Tensor] = []
    for m in hf.modules():
        if type(m).__name__.endswith("Indexer"):
            m.register_forward_hook(lambda mod, args, out: got.append(out[0].clone()))
    return got


@pytest.mark.parametrize("topk", [8, 64])
def test_dsa_selected_sets_match_transformers(tmp_path, topk):
    """Compare the selected token sets row by row (ties make the order, not the set, arbitrary)."""
    hf = save_tiny("glm5next", tmp_path, seed=3, index_topk=topk)
    eng = hyperloom.from_pretrained(tmp_path, backend="reference")
    prompt = torch.randint(0, 256, (29,), generator=torch.Generator().manual_seed(11))
    hf_sel = _hf_selections(hf)
    _hf_step(hf, prompt, None)
    graph = eng.graphs["main"]
    index = [n.outs[0] for n in graph.nodes if n.op is Op.DSA_INDEX]
    probe = dataclasses.replace(graph, outputs=tuple((v, v) for v in index))
    seq = eng.new_sequence()
    rows = {"ids": prompt, "pos": torch.arange(29), "slot": torch.full((29,), seq.slot)}
    ours = run_graph(probe, eng.weights, rows, eng.state, torch.float32)
    assert len(hf_sel) == len(index) >= 1
    for want, got in zip(hf_sel, ours.values()):
        for r in range(29):
            w = {int(i) for i in want[r] if i >= 0}
            g = {int(i) for i in got[r] if i >= 0}
            assert g == w, f"row {r}: selected {sorted(g)} vs transformers {sorted(w)}"
            if topk >= 29:
                assert g == set(range(r + 1)), f"row {r}: dense selection must be causal-full"
        sparse_rows = [r for r in range(29) if len([i for i in got[r] if i >= 0]) < r + 1]
        assert topk >= 29 or sparse_rows, "the prompt must be long enough for sparse selection"
