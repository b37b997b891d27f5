"""The GLM MTP drafter against an independent reference composed (SPEC "MTP drafter layer") from
transformers' own GLM-5.3 attention (MLA + DSA indexer), MoE and RMSNorm modules."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import hyperloom
from hyperloom.ir.engine import ReferenceEngine
from hyperloom.models import family
from hyperloom.models.checkpoint import save_checkpoint
from hyperloom.models.random_weights import random_weights
from tests.hf_models import hf_config
from tests.tolerances import assert_close

PREFIX = "model.language_model."
MTP_LAYER = family("glm5next").configs["tiny"].num_hidden_layers
Tensors = dict[str, torch.Tensor]
N = 17  # prompt tokens: 16 draft rows, twice index_topk (8), so DSA selection is sparse


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = hyperloom.build("glm5next", "tiny", dtype=torch.float32)
    assert spec.config.mtp_layer_type == "indexed_attention"
    assert spec.config.mtp_mlp_layer_type == "sparse"
    path = tmp_path_factory.mktemp("mtp") / "glm"
    save_checkpoint(path, family("glm5next"), spec, random_weights(spec, seed=11))
    return path


@pytest.fixture(scope="module")
def disk(ckpt: Path) -> Tensors:
    return load_file(str(ckpt / "model.safetensors"))


@pytest.fixture(scope="module")
def ids() -> torch.Tensor:
    return torch.randint(0, 256, (N,), generator=torch.Generator().manual_seed(12))


class Reference:
    """The drafter built from transformers modules and the on-disk tensors of layer L."""

    def __init__(self, disk: Tensors):
        from transformers.models.glm5_next import modeling_glm5_next as hf

        config, cfg = hf_config("glm5next", num_nextn_predict_layers=1)
        tc, layer = config.text_config, cfg.num_hidden_layers
        # The modules index the per-layer lists by layer_idx: give the MTP layer an entry.
        tc.layer_types = [*tc.layer_types, "indexed_attention"]
        tc.indexer_types = [*tc.indexer_types, "full"]
        tc.mlp_layer_types = [*tc.mlp_layer_types, "sparse"]
        tc._attn_implementation = "eager"
        pre = f"{PREFIX}layers.{layer}."
        w = {k[len(pre):]: v for k, v in disk.items() if k.startswith(pre)}
        self.w, self.embed = w, disk[PREFIX + "embed_tokens.weight"]
        self.head = w.get("shared_head.head.weight", disk["lm_head.weight"])

        self.attn = hf.Glm5NextTextAttention(tc, layer_idx=layer).eval()
        self.attn.load_state_dict(_under(w, "self_attn."))
        self.moe = hf.Glm5NextTextMoE(tc).eval()
        experts = range(tc.n_routed_experts)
        moe = {k: v for k, v in _under(w, "mlp.").items() if not k.startswith("experts.")}
        # transformers fuses the per-expert tensors: gate_up_proj [E, 2I, D] = [gate; up].
        per = [_under(w, f"mlp.experts.{e}.") for e in experts]
        moe["experts.gate_up_proj"] = torch.stack(
            [torch.cat([x["gate_proj.weight"], x["up_proj.weight"]]) for x in per])
        moe["experts.down_proj"] = torch.stack([x["down_proj.weight"] for x in per])
        self.moe.load_state_dict(moe)
        self.norms = {}
        for n in ("enorm", "hnorm", "input_layernorm", "post_attention_layernorm",
                  "shared_head.norm"):
            self.norms[n] = hf.Glm5NextTextRMSNorm(tc.hidden_size, tc.rms_norm_eps)
            self.norms[n].load_state_dict({"weight": w[n + ".weight"]})

    @torch.no_grad()
    def __call__(self, next_ids: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """Draft logits of every row at once: no cache, an all-ones padding mask."""
        n = self.norms
        u = torch.cat([n["enorm"](self.embed[next_ids]), n["hnorm"](hidden)], -1)
        u = (u @ self.w["eh_proj.weight"].T)[None]
        u = u + self.attn(n["input_layernorm"](u), attention_mask=self.mask(u), cache=None)[0]
        u = u + self.moe(n["post_attention_layernorm"](u))
        return n["shared_head.norm"](u[0]) @ self.head.T

    @torch.no_grad()
    def selected(self, next_ids: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """The indexer's key selection per row (-1 = none), for the sparsity sanity check."""
        n = self.norms
        u = torch.cat([n["enorm"](self.embed[next_ids]), n["hnorm"](hidden)], -1)
        x = n["input_layernorm"]((u @ self.w["eh_proj.weight"].T)[None])
        q = self.attn.q_a_layernorm(self.attn.q_a_proj(x))
        return self.attn.indexer(x, q, self.mask(x), None)[0]

    @staticmethod
    def mask(u: torch.Tensor) -> torch.Tensor:
        return torch.ones(u.shape[:2], dtype=torch.bool)


def _under(w: Tensors, prefix: str) -> Tensors:
    return {k[len(prefix):]: v for k, v in w.items() if k.startswith(prefix)}


def main_hidden(eng: ReferenceEngine, ids: torch.Tensor) -> torch.Tensor:
    return eng.hidden(eng.new_sequence(), ids)["hidden"]


def draft_all(eng: ReferenceEngine, ids: torch.Tensor) -> torch.Tensor:
    """Row t drafts from h_t and x_{t+1}: hidden of ids[:-1], next ids ids[1:]."""
    h = main_hidden(eng, ids[:-1])
    return eng.draft(eng.new_sequence(), ids[1:], h)


def test_draft_matches_transformers_modules(ckpt: Path, disk: Tensors, ids: torch.Tensor) -> None:
    eng = hyperloom.from_pretrained(ckpt)
    h = main_hidden(eng, ids[:-1])
    ref = Reference(disk)
    # Sanity: late rows see fewer keys than their causal prefix, so selection really is sparse.
    chosen = (ref.selected(ids[1:], h) >= 0).sum(-1)
    assert (chosen < torch.arange(1, N)).any(), chosen
    got = eng.draft(eng.new_sequence(), ids[1:], h)
    assert_close(got, ref(ids[1:], h), torch.float32, "MTP draft vs transformers modules")


# first < index_kpool (4): the opening rows are drafted before any DSA pool is complete.
@pytest.mark.parametrize("first", [1, 3, 9])
def test_incremental_draft_equals_one_shot(ckpt: Path, ids: torch.Tensor, first: int) -> None:
    eng = hyperloom.from_pretrained(ckpt)
    want = draft_all(eng, ids)
    # The speculative loop: a prefill, then per token one main step and one draft row.
    seq, out = eng.new_sequence(), []
    h = eng.hidden(seq, ids[:first])["hidden"]
    out.append(eng.draft(seq, ids[1:first + 1], h))
    for t in range(first, N - 1):
        h = eng.hidden(seq, ids[t:t + 1])["hidden"]
        out.append(eng.draft(seq, ids[t + 1:t + 2], h))
    assert seq.draft_length == N - 1
    assert_close(torch.cat(out), want, torch.float32, "row-by-row drafts vs one shot")


def test_shared_head_falls_back_to_lm_head(tmp_path: Path, ckpt: Path, disk: Tensors,
                                           ids: torch.Tensor) -> None:
    head = f"{PREFIX}layers.{MTP_LAYER}.shared_head.head.weight"
    assert not torch.equal(disk[head], disk["lm_head.weight"])  # else the check proves nothing
    variants = {"absent": {k: v for k, v in disk.items() if k != head},
                "copied": disk | {head: disk["lm_head.weight"].clone()}}
    drafts = {}
    for name, tensors in variants.items():
        path = tmp_path / name
        path.mkdir()
        (path / "config.json").write_bytes((ckpt / "config.json").read_bytes())
        save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
        drafts[name] = draft_all(hyperloom.from_pretrained(path), ids)
    assert torch.equal(drafts["absent"], drafts["copied"])
    assert not torch.allclose(drafts["absent"], draft_all(hyperloom.from_pretrained(ckpt), ids))
    # The reference agrees once it, too, reads lm_head.
    eng = hyperloom.from_pretrained(tmp_path / "absent")
    h = main_hidden(eng, ids[:-1])
    assert_close(drafts["absent"], Reference(variants["absent"])(ids[1:], h), torch.float32,
                 "fallback draft vs transformers modules")
