"""Checkpoint loading (save_pretrained'd transformers models and hyperloom's own writer), the
errors a bad checkpoint raises, and runtime bad input that must leave every sequence untouched."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import hyperloom
from hyperloom.errors import CapacityError, CheckpointError, InputError, SpecError
from hyperloom.ir.engine import ReferenceEngine, Sequence
from hyperloom.models import family
from hyperloom.models.checkpoint import save_checkpoint
from hyperloom.models.random_weights import random_weights
from tests.hf_models import TINY_VISION, save_tiny
from tests.tolerances import assert_close

VOCAB = 256  # both tiny configs
GLM = "model.language_model."
Tensors = dict[str, torch.Tensor]
Ckpt = tuple[Path, torch.nn.Module]  # directory, the transformers model saved there
Ckpts = dict[str, Ckpt]


def prompt(n: int = 20, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(seed))


def prefill(eng: ReferenceEngine, ids: torch.Tensor) -> torch.Tensor:
    return eng.prefill(eng.new_sequence(), ids)


def hf_logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids[None]).logits[0].float()


def clone(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def edit_tensors(path: Path, fn: Callable[[Tensors], None]) -> None:
    """Rewrite the directory's single safetensors file after `fn` edits its tensors in place."""
    (f,) = path.glob("*.safetensors")
    tensors = load_file(str(f))
    fn(tensors)
    save_file(tensors, str(f), metadata={"format": "pt"})


def edit_config(path: Path, fn: Callable[[dict], None]) -> None:
    cfg = json.loads((path / "config.json").read_text())
    fn(cfg)
    (path / "config.json").write_text(json.dumps(cfg))


@pytest.fixture(scope="module")
def llama_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Ckpt:
    path = tmp_path_factory.mktemp("ckpt") / "llama"
    return path, save_tiny("llama", path, seed=1)


@pytest.fixture(scope="module")
def glm_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Ckpt:
    path = tmp_path_factory.mktemp("ckpt") / "glm"
    return path, save_tiny("glm5next", path, seed=2)


@pytest.fixture(scope="module")
def ckpts(llama_ckpt: Ckpt, glm_ckpt: Ckpt) -> Ckpts:
    return {"llama": llama_ckpt, "glm5next": glm_ckpt}


# -- loading ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["llama", "glm5next"])
def test_from_pretrained_matches_hf(ckpts: Ckpts, name: str) -> None:
    path, hf = ckpts[name]
    ids = prompt()
    assert_close(prefill(hyperloom.from_pretrained(path), ids), hf_logits(hf, ids),
                 torch.float32, f"{name} prefill vs transformers")


def test_glm_checkpoint_has_vision_tensors(glm_ckpt: Ckpt) -> None:
    # The skip path is only exercised if save_pretrained really wrote a vision tower.
    (f,) = glm_ckpt[0].glob("*.safetensors")
    names = load_file(str(f)).keys()
    assert any(n.startswith("model.visual.") for n in names)
    assert GLM + "layers.2.mlp.experts.3.up_proj.weight" in names  # experts stored per expert


def _hf_from_writer(name: str, path: Path) -> tuple[torch.nn.Module, dict[str, list]]:
    import transformers

    if name == "llama":
        return transformers.LlamaForCausalLM.from_pretrained(
            path, dtype=torch.float32, output_loading_info=True)
    # The writer has no vision tower: a tiny one keeps the (randomly initialised) tower cheap.
    cfg = transformers.Glm5NextConfig.from_pretrained(path)
    cfg.vision_config = transformers.Glm5NextVisionConfig(**TINY_VISION)
    return transformers.Glm5NextForConditionalGeneration.from_pretrained(
        path, config=cfg, dtype=torch.float32, output_loading_info=True)


@pytest.mark.parametrize("name", ["llama", "glm5next"])
def test_writer_roundtrip_through_transformers(tmp_path: Path, name: str) -> None:
    spec = hyperloom.build(name, "tiny", dtype=torch.float32)
    weights = random_weights(spec, seed=3)
    save_checkpoint(tmp_path, family(name), spec, weights)
    hf, info = _hf_from_writer(name, tmp_path)
    # Names line up: only the MTP layer (unknown to transformers) and the vision tower differ.
    mtp = f"layers.{spec.config.num_hidden_layers}."
    assert all(mtp in k for k in info["unexpected_keys"]), info["unexpected_keys"]
    assert all(k.startswith("model.visual.") for k in info["missing_keys"]), info["missing_keys"]
    assert not info["mismatched_keys"]
    eng = hyperloom.from_pretrained(tmp_path, backend="reference")
    for k, w in weights.items():
        assert torch.equal(eng.weights[k], w), k
    ids = prompt(seed=4)
    assert_close(prefill(eng, ids), hf_logits(hf.eval(), ids), torch.float32,
                 f"{name}: hyperloom vs transformers on the writer's checkpoint")


@pytest.mark.parametrize("name", ["llama", "glm5next"])
def test_sharded_checkpoint_loads_the_same(tmp_path: Path, ckpts: Ckpts, name: str) -> None:
    src = ckpts[name][0]
    path = clone(src, tmp_path / "sharded")
    (f,) = path.glob("*.safetensors")
    tensors = load_file(str(f))
    f.unlink()
    names = sorted(tensors)  # interleave so every layer spans both shards
    for i in range(2):
        part = {k: tensors[k] for k in names[i::2]}
        save_file(part, str(path / f"model-0000{i + 1}-of-00002.safetensors"),
                  metadata={"format": "pt"})
    ids = prompt(seed=5)  # the same weights: the reference backend shows it in milliseconds
    want = prefill(hyperloom.from_pretrained(src, backend="reference"), ids)
    assert torch.equal(prefill(hyperloom.from_pretrained(path, backend="reference"), ids), want)


def test_tied_embeddings_llama(tmp_path: Path) -> None:
    hf = save_tiny("llama", tmp_path, seed=6, tie_word_embeddings=True)
    eng = hyperloom.from_pretrained(tmp_path, backend="reference")
    assert "lm_head.weight" not in eng.weights  # the head reads embed_tokens
    ids = prompt(seed=7)
    assert_close(prefill(eng, ids), hf_logits(hf, ids), torch.float32, "tied llama")


# -- bad checkpoints -------------------------------------------------------------------------

def _drop(name: str) -> Callable[[Tensors], None]:
    return lambda t: t.pop(name)


def _reshape(name: str, shape: tuple[int, ...]) -> Callable[[Tensors], None]:
    return lambda t: t.__setitem__(name, torch.zeros(shape))


def _add(name: str) -> Callable[[Tensors], None]:
    return lambda t: t.__setitem__(name, torch.zeros(4, 4))


@pytest.mark.parametrize("name, edit, needles", [
    ("llama", _drop("model.layers.1.mlp.up_proj.weight"),
     ["model.layers.1.mlp.up_proj.weight", "[128, 64]"]),
    ("llama", _reshape("model.layers.0.self_attn.k_proj.weight", (16, 64)),
     ["model.layers.0.self_attn.k_proj.weight", "[16, 64]", "[32, 64]"]),
    ("llama", _add("model.layers.0.self_attn.foo.weight"), ["model.layers.0.self_attn.foo.weight"]),
    ("glm5next", _drop(GLM + "layers.2.mlp.experts.3.up_proj.weight"),
     [GLM + "layers.2.mlp.experts.3.up_proj.weight", "[32, 64]"]),
    ("glm5next", _reshape(GLM + "layers.3.mlp.experts.5.down_proj.weight", (64, 16)),
     [GLM + "layers.3.mlp.experts.5.down_proj.weight", "[64, 16]", "[64, 32]"]),
    ("glm5next", _add(GLM + "layers.1.self_attn.foo.weight"),
     [GLM + "layers.1.self_attn.foo.weight"]),
], ids=["missing", "shape", "extra", "missing-expert", "expert-shape", "glm-extra"])
def test_bad_tensors(tmp_path: Path, ckpts: Ckpts, name: str,
                    edit: Callable[[Tensors], None], needles: list[str]) -> None:
    path = clone(ckpts[name][0], tmp_path / "bad")
    edit_tensors(path, edit)
    with pytest.raises(CheckpointError) as e:
        hyperloom.from_pretrained(path)
    for s in needles:
        assert s in str(e.value), (s, str(e.value))


def test_missing_config_json(tmp_path: Path, llama_ckpt: Ckpt) -> None:
    path = clone(llama_ckpt[0], tmp_path / "noconfig")
    (path / "config.json").unlink()
    with pytest.raises(CheckpointError, match="config.json"):
        hyperloom.from_pretrained(path)


def test_missing_safetensors(tmp_path: Path, llama_ckpt: Ckpt) -> None:
    path = clone(llama_ckpt[0], tmp_path / "noweights")
    for f in path.glob("*.safetensors"):
        f.unlink()
    with pytest.raises(CheckpointError, match="safetensors"):
        hyperloom.from_pretrained(path)


def test_unknown_model_type(tmp_path: Path, llama_ckpt: Ckpt) -> None:
    path = clone(llama_ckpt[0], tmp_path / "mystery")
    edit_config(path, lambda c: c.__setitem__("model_type", "mystery_lm"))
    with pytest.raises(SpecError) as e:
        hyperloom.from_pretrained(path)
    for s in ("mystery_lm", "llama", "glm5_next"):
        assert s in str(e.value)


# -- runtime bad input -----------------------------------------------------------------------

LIVE_PROMPT = [5, 17, 99, 3, 250, 42]
NEXT = 11
MAX_LEN = 32


def _engine(name: str) -> ReferenceEngine:
    return hyperloom.load(name, "tiny", seed=8, max_seq_len=MAX_LEN)


@pytest.fixture(scope="module")
def clean_logits() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """What the live sequence yields in a fresh engine that never saw a failed call."""
    out = {}
    for name in ("llama", "glm5next"):
        eng = _engine(name)
        seq = eng.new_sequence()
        out[name] = (eng.prefill(seq, LIVE_PROMPT), eng.decode([seq], [NEXT]))
    return out


def _full(eng: ReferenceEngine, v: Sequence) -> None:
    eng.prefill(v, list(range(MAX_LEN - v.length)))


def _free(eng: ReferenceEngine, v: Sequence) -> None:
    eng.free(v)


# (prepare the victim, the failing call, error, substrings of its message)
BAD_CALLS = {
    "id-too-large": (None, lambda e, live, v: e.prefill(v, [1, 2, VOCAB, 3]), InputError,
                     [str(VOCAB), "position 2"]),
    "id-negative": (None, lambda e, live, v: e.prefill(v, [4, 5, 6, -3]), InputError,
                    ["-3", "position 3"]),
    "batch-bad-id": (None, lambda e, live, v: e.decode([live, v], [NEXT, 1000]), InputError,
                     ["1000", "position 1"]),
    "past-capacity": (None, lambda e, live, v: e.prefill(v, [7] * 30), CapacityError,
                      ["30", str(MAX_LEN)]),
    "batch-at-capacity": (_full, lambda e, live, v: e.decode([live, v], [NEXT, 1]),
                          CapacityError, [str(MAX_LEN)]),
    "freed": (_free, lambda e, live, v: e.decode([v], [1]), InputError, ["freed"]),
    "batch-freed": (_free, lambda e, live, v: e.decode([live, v], [NEXT, 1]), InputError,
                    ["freed"]),
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
@pytest.mark.parametrize("name", ["llama", "glm5next"])
def test_bad_call_leaves_state_untouched(clean_logits: dict, name: str, case: str) -> None:
    prepare, call, error, needles = BAD_CALLS[case]
    eng = _engine(name)
    live = eng.new_sequence()  # slot 0, as in the clean engine
    first = eng.prefill(live, LIVE_PROMPT)
    victim = eng.new_sequence()
    eng.prefill(victim, [9, 8, 7, 6, 5])
    if prepare:
        prepare(eng, victim)
    lengths = (live.length, victim.length)
    with pytest.raises(error) as e:
        call(eng, live, victim)
    for s in needles:
        assert s in str(e.value), (s, str(e.value))
    assert (live.length, victim.length) == lengths
    want_first, want_next = clean_logits[name]
    assert torch.equal(first, want_first)
    assert torch.equal(eng.decode([live], [NEXT]), want_next)


@pytest.mark.parametrize("n", [1, 3])
def test_glm_prompt_shorter_than_kpool(glm_ckpt: Ckpt, n: int) -> None:
    # Fewer cached tokens than index_kpool (4) means no complete DSA pool yet.
    path, hf = glm_ckpt
    ids = prompt(n, seed=9)
    assert_close(prefill(hyperloom.from_pretrained(path), ids), hf_logits(hf, ids),
                 torch.float32, f"GLM {n}-token prompt")
