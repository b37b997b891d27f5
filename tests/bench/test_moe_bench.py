"""The MoE kernel scenarios of `hyperloom bench` (bench.moe) on the CPU: the command's rows in the
JSON record (sizes from the model, distinct experts, bytes and FLOPs), no engine weights built,
and a wrong output of ours refused before timing. GPU (`gpu` mark): GLM-5.3-Flash sizes."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
import torch

import hyperloom
from hyperloom.bench.moe import MoEBench, moe_specs
from hyperloom.bench.scenarios import AgreementError, Bench
from hyperloom.cli import main
from hyperloom.codegen.emitters import moe_experts

CPU = torch.device("cpu")


def _bench() -> MoEBench:
    return MoEBench(hyperloom.build("glm5next", "tiny", dtype=torch.float32), CPU, torch.float32,
                    1e-4)


def test_moe_scenarios_write_their_rows(monkeypatch, tmp_path):
    def no_weights(*a, **kw):
        raise AssertionError("the MoE scenarios built the engine's bench (random weights)")

    monkeypatch.setattr(Bench, "__init__", no_weights)
    out = tmp_path / "moe.json"
    out_text = io.StringIO()
    with contextlib.redirect_stdout(out_text):
        rc = main(["bench", "glm5next", "--scenarios", "moe-decode,moe-prefill", "--moe-batch",
                   "1,3", "--moe-tokens", "9", "--json", str(out)])
    assert rc == 0
    rows = json.loads(out.read_text())["results"]
    assert [r["scenario"] for r in rows] == ["moe step b1", "moe step b3", "moe prefill 9"]
    for r, n in zip(rows, (1, 3, 9)):  # GLM tiny: 8 experts of 32 x 64, top-2
        assert (r["experts"], r["hidden"], r["inter"], r["top_k"], r["rows"]) == (8, 64, 32, 2, n)
        assert r["rel_err_vs_eager"] <= 1e-4 and r["kernels_per_step"] == 6
        assert list(r["baselines_s"]) == ["torch loop"]
    b1, b3, prefill = rows
    assert b1["distinct_experts"] == 2 and 2 <= b3["distinct_experts"] <= 6
    assert b1["unit"] == "bytes" and b1["work"] == 8 * 64 * 4 + 2 * 3 * 32 * 64 * 4 + 2 * 64 * 4
    assert prefill["unit"] == "flops" and prefill["work"] == 2 * 9 * 64 * (8 + 2 * 3 * 32)


def test_a_wrong_output_of_ours_is_refused(monkeypatch):
    real = moe_experts.launch

    def off(*a, **kw):
        real(*a, **kw)
        kw["out"][1] *= 1.01

    monkeypatch.setattr(moe_experts, "launch", off)
    with pytest.raises(AgreementError, match="moe step b2: our kernels and the torch loop"):
        _bench().step(2)


def test_sizes_default_to_glm_flash_on_a_gpu():
    router, experts = moe_specs(hyperloom.build("llama", "tiny"), gpu=True)
    assert (experts.experts, experts.hidden, experts.inter, experts.top_k) == (288, 4096, 2048, 8)
    assert router.n_group == 1 and router.scaling == 2.5


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 64, 4096])
def test_moe_bench_gpu(rows: int):
    bench = MoEBench(hyperloom.build("llama", "tiny"), torch.device("cuda"), torch.bfloat16, 2e-2)
    r = bench.step(rows) if rows <= 64 else bench.prefill(rows)
    assert r.ours_s > 0 and r.rel_err <= 2e-2
