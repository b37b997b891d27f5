"""`hyperloom bench` on the CPU (tiny config, interpreter): the command, its JSON record, its
agreement check, and the lowered PyTorch baseline against the reference interpreter."""

from __future__ import annotations

import json

import pytest
import torch

import hyperloom
from hyperloom.bench import baseline_ops
from hyperloom.bench.lowering import lower
from hyperloom.bench.scenarios import AgreementError, Bench
from hyperloom.cli import main
from hyperloom.models.random_weights import random_weights
from tests.tolerances import assert_close


@pytest.mark.parametrize("config", ["tiny", "tiny-hc"])
def test_baseline_module_matches_the_reference(config):
    spec = hyperloom.build("llama", config, dtype=torch.float32)
    w = random_weights(spec, seed=4)
    ref = hyperloom.engine(spec, w, backend="reference", max_seq_len=32)
    base = lower(spec.main, w, 32, "cpu")
    ids = torch.randint(0, 256, (9,), generator=torch.Generator().manual_seed(1))
    s = ref.new_sequence()
    assert_close(base(ids, torch.arange(9))[0], ref.prefill(s, ids), torch.float32, "prefill")
    for step, tok in enumerate([3, 200, 17]):
        got = base(torch.tensor([tok]), torch.tensor([9 + step]))[0]
        assert_close(got, ref.decode([s], [tok]), torch.float32, f"decode {step}")


def test_bench_command_writes_its_record(tmp_path, capsys):
    out = tmp_path / "bench.json"
    rc = main(["bench", "llama", "--config", "tiny-hc", "--no-compile", "--ctx", "6",
               "--prefill-tokens", "10", "--site-rows", "3", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "these numbers mean nothing" in text and "decode b1 ctx6" in text
    rec = json.loads(out.read_text())
    assert {"model", "device", "commit", "torch", "triton", "hbm_bytes_per_s",
            "matmul_flop_per_s", "meaningful"} <= set(rec["meta"])
    assert rec["meta"]["meaningful"] is False
    scen = [r["scenario"] for r in rec["results"]]
    assert scen == ["decode b1 ctx6", "prefill 10", "mhc site 3"]
    for r in rec["results"]:
        assert r["ours_s"] > 0 and r["baselines_s"]["eager"] > 0 and r["work"] > 0
        assert r["rel_err_vs_eager"] <= 1e-4 and r["kernels_per_step"] >= 2
        assert r["speedup"]["eager"] == pytest.approx(r["baselines_s"]["eager"] / r["ours_s"])


def test_bench_refuses_to_time_different_work(monkeypatch):
    spec = hyperloom.build("llama", "tiny-hc", dtype=torch.float32)
    bench = Bench(spec, torch.device("cpu"), torch.float32, 1e-4, compile_modes=False)
    real = baseline_ops.hc_post
    monkeypatch.setattr(baseline_ops, "hc_post", lambda *a: real(*a) * 1.01)
    with pytest.raises(AgreementError, match="disagree"):
        bench.site(3)


def test_bench_on_cpu_refuses_big_configs(capsys):
    assert main(["bench", "llama", "--config", "bench"]) == 2
    assert "tiny configs only" in capsys.readouterr().err


def test_torch_compile_baseline_runs():
    spec = hyperloom.build("llama", "tiny", dtype=torch.float32)
    bench = Bench(spec, torch.device("cpu"), torch.float32, 1e-4)
    r = bench.decode(5)
    assert set(r.baselines_s) == {"eager", "reduce-overhead"}
    assert r.compile_s["torch.compile"] > 0
