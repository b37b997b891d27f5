"""The reference interpreter on the GPU: the same graphs and engine API on CUDA, compared with
transformers on the same card (fp32) and with the CPU run (fp64). Run on the H200."""

from __future__ import annotations

import pytest
import torch

import hyperloom
from tests.hf_models import save_tiny
from tests.tolerances import assert_close

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", ["llama", "glm5next"])
def test_cuda_reference_matches_transformers_on_cuda(tmp_path, name):
    hf = save_tiny(name, tmp_path, seed=5).cuda()
    eng = hyperloom.from_pretrained(tmp_path, device="cuda", dtype=torch.float32,
                                    backend="reference")
    prompt = torch.randint(0, 256, (40,), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out = hf(input_ids=prompt[None].cuda(), use_cache=True)
    seq = eng.new_sequence()
    got = eng.prefill(seq, prompt)
    assert got.device.type == "cuda"
    assert_close(got, out.logits[0], torch.float32, f"{name} prefill on cuda")
    cache, tok = getattr(out, "cache", None) or out.past_key_values, int(got[-1].argmax())
    for step in range(4):
        with torch.no_grad():
            out = hf(input_ids=torch.tensor([[tok]], device="cuda"), cache=cache, use_cache=True)
        row = eng.decode([seq], [tok])[0]
        assert_close(row, out.logits[0, -1], torch.float32, f"{name} decode {step} on cuda")
        cache, tok = getattr(out, "cache", None) or out.past_key_values, int(row.argmax())


@pytest.mark.parametrize("name, config", [("llama", "tiny-hc"), ("glm5next", "tiny")])
def test_cuda_and_cpu_agree_in_fp64(name, config):
    prompt = torch.randint(0, 256, (24,), generator=torch.Generator().manual_seed(4))
    outs = []
    for device in ("cpu", "cuda"):
        eng = hyperloom.load(name, config, device=device, dtype=torch.float64,
                             backend="reference")
        a, b = eng.new_sequence(), eng.new_sequence()
        first = eng.prefill(a, prompt)
        eng.prefill(b, prompt[:9])
        batch = eng.decode([a, b], [7, 8])
        outs.append(torch.cat([first, batch]).cpu())
    assert_close(outs[1], outs[0], torch.float64, f"{name} {config} cuda vs cpu")
