"""The DSA scenario of `hyperloom bench` (bench.dsa) on the CPU: the command's rows in the JSON
record (sizes from the model, kernel groups' times, byte floors, the attend kernel's growth over
contexts), a wrong attention or selection of ours refused before timing, the state a step reads
(pooled keys by the reference formula), timing over cache copies, a paged cache, and GLM-5.3-
Flash's sizes and memory on a GPU. GPU (`gpu` mark): bf16 at GLM-5.3-Flash sizes."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
import torch

import hyperloom
from hyperloom.bench import dsa as dsa_bench
from hyperloom.bench import report
from hyperloom.bench.dsa import (DSABench, DSAResult, capacity, copy_bytes, dsa_specs, floors,
                                 rotation)
from hyperloom.bench.measure import Limits
from hyperloom.bench.scenarios import AgreementError, Bench
from hyperloom.cli import main
from hyperloom.codegen.emitters import dsa as dsa_emitter
from hyperloom.codegen.emitters import mla as mla_emitter
from hyperloom.config import overrides
from hyperloom.errors import InputError
from hyperloom.ir import ops
from hyperloom.ir.semantics import dsa as dsa_sem

CPU = torch.device("cpu")
LIMITS = Limits(1e10, 1e12)
GIB = 2 ** 30


def _bench() -> DSABench:
    return DSABench(hyperloom.build("glm5next", "tiny", dtype=torch.float32), CPU, torch.float32,
                    1e-4, LIMITS)


def test_dsa_scenario_writes_its_rows(monkeypatch, tmp_path):
    """The CPU defaults (contexts 39 and 100, batch 1 and 3) on GLM tiny's DSA layer."""
    def no_weights(*a, **kw):
        raise AssertionError("the DSA scenario built the engine's bench (random weights)")

    monkeypatch.setattr(Bench, "__init__", no_weights)
    out, text = tmp_path / "dsa.json", io.StringIO()
    with contextlib.redirect_stdout(text):
        rc = main(["bench", "glm5next", "--config", "tiny", "--scenarios", "dsa-decode",
                   "--json", str(out)])
    assert rc == 0
    rec = json.loads(out.read_text())
    rows, bw = rec["results"], rec["meta"]["hbm_bytes_per_s"]
    shapes = [(1, 39), (1, 100), (3, 39), (3, 100)]
    assert [r["scenario"] for r in rows] == [f"dsa step b{b} ctx{c}" for b, c in shapes]
    index, attn = dsa_specs(hyperloom.build("glm5next", "tiny"), gpu=False)
    for r, (b, c) in zip(rows, shapes):
        assert (r["batch"], r["ctx"], r["kernels_per_step"], r["unit"]) == (b, c, 6, "bytes")
        assert (r["index_heads"], r["index_head_dim"], r["index_topk"], r["index_kpool"],
                r["heads"], r["kv_lora_rank"]) == (4, 16, 8, 4, 4, 32)
        assert r["pools"] == (c + 1) // 4 and r["selected_tokens"] == 8 + (c + 1) % 4
        fl = floors(index, attn, b, c, 4)
        assert (r["work"], r["indexer_bytes"], r["attend_bytes"]) == \
            (fl.step, fl.indexer, fl.attend)
        assert r["rel_err_vs_eager"] <= 1e-4 and r["copies"] == 1 and r["baselines_s"] == {}
        for g in ("indexer", "score", "select", "mla", "attend"):
            assert r[f"{g}_s"] > 0
        assert r["indexer_hbm_fraction"] == pytest.approx(r["indexer_bytes"] / r["indexer_s"] / bw)
        assert r["attend_hbm_fraction"] == pytest.approx(r["attend_bytes"] / r["attend_s"] / bw)
        growth = r["attend_growth"]
        assert (growth is None) == (c == 39)
        if growth:
            first = next(o for o in rows if (o["batch"], o["ctx"]) == (b, 39))
            assert growth == pytest.approx(r["attend_s"] / first["attend_s"])
            assert r["attend_growth_vs_ctx"] == 39
    assert rows[3]["vs_b1"] == pytest.approx(rows[3]["ours_s"] / rows[1]["ours_s"])
    lines = text.getvalue().splitlines()
    assert sum(ln.startswith("dsa step ") for ln in lines) == 2 * 4  # a row each, run and table
    assert sum("note: indexer" in ln for ln in lines) == 2 * 4
    assert "targets" not in text.getvalue()  # no 128K row


def test_options_pick_batches_and_contexts(tmp_path):
    out = tmp_path / "dsa.json"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["bench", "glm5next", "--scenarios", "dsa-decode", "--dsa-ctx", "20,7",
                     "--dsa-batch", "2", "--profile", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["results"]
    assert [r["scenario"] for r in rows] == ["dsa step b2 ctx7", "dsa step b2 ctx20"]
    assert rows[0]["selected_tokens"] == 8 and rows[1]["selected_tokens"] == 9  # dense, tail
    assert all(r["profile"][0]["us_per_step"] > 0 for r in rows)


def test_the_issue_targets_at_128k():
    def res(batch: int, growth: float, fraction: float) -> DSAResult:
        r = DSAResult(f"dsa step b{batch} ctx131072", 1.0, "bytes", 1e-3, batch=batch,
                      ctx=131072)
        r.extra = {"attend_growth": growth, "indexer_hbm_fraction": fraction}
        return r

    text = report.table(report.record([res(1, 1.2, 0.5), res(16, 1.6, 0.7)], LIMITS,
                                      report.meta(CPU, LIMITS, "glm5next")))
    for line in ("dsa step b1 ctx131072: attend_growth 1.200 (target <= 1.5): met",
                 "dsa step b1 ctx131072: indexer_hbm_fraction 0.500 (target >= 0.6): MISSED",
                 "dsa step b16 ctx131072: attend_growth 1.600 (target <= 1.5): MISSED",
                 "dsa step b16 ctx131072: indexer_hbm_fraction 0.700 (target >= 0.6): met"):
        assert line in text


def test_the_pooled_keys_a_step_reads_are_the_references():
    b = _bench()
    keys, pooled, latent = b._caches(2, 39)
    d = b.index.head_dim
    for s in range(2):
        want = dsa_sem.pool_keys(keys[s, :39, :d], keys[s, :39, d:], b.ape)
        assert want.shape[0] == 9 and torch.allclose(pooled[s, :9], want)
        assert (pooled[s, 9:] == 0).all()  # pool 9 completes in the step itself
    assert keys.shape == (2, 64, 32) and latent.shape == (2, 64, 32) and pooled.shape == (2, 16, 16)


def _after(monkeypatch, emitter, change) -> None:
    """emitter.launch, then change(its keyword operands)."""
    real = emitter.launch

    def launch(*a, **kw):
        real(*a, **kw)
        change(kw)

    monkeypatch.setattr(emitter, "launch", launch)


def test_a_wrong_attention_of_ours_is_refused(monkeypatch):
    """Sequence 1 of 2 off by 1% (100x the fp32 tolerance)."""
    _after(monkeypatch, mla_emitter, lambda kw: kw["out"][1].mul_(1.01))
    with pytest.raises(AgreementError, match="dsa step b2 ctx100: sequence 1's attention"):
        _bench().step(2, 100)


def test_a_wrong_selection_of_ours_is_refused(monkeypatch):
    """Sequence 0's first selected pool swapped for the lowest pool it did not select (the
    attention, run on the wrong selection, is consistent with it: only the set check sees it)."""
    def swap(kw: dict) -> None:
        index = kw["out"]
        other = min(set(range(25)) - set((index[0, :8:4] // 4).tolist()))
        index[0, :4] = other * 4 + torch.arange(4, dtype=torch.int32)

    _after(monkeypatch, dsa_emitter, swap)
    with pytest.raises(AgreementError, match="sequence 0's selection: pools .* in one selection"):
        _bench().step(2, 100)


def test_a_malformed_selection_is_refused(monkeypatch):
    def twice(kw: dict) -> None:  # a token twice, the pool not whole
        kw["out"][1, 1] = kw["out"][1, 0]

    _after(monkeypatch, dsa_emitter, twice)
    with pytest.raises(AgreementError, match="sequence 1's selection: .* is not whole pools"):
        _bench().step(2, 39)


def test_a_near_tie_may_differ():
    """Pools in one set only pass when they score within the tolerance of the k-th score."""
    at = ops.DSAIndexAttrs(4, 16, 8, 4, True, "x")
    want = torch.tensor([0, 1, 2, 3, 8, 9, 10, 11, 40, -1, -1], dtype=torch.int32)
    got = torch.tensor([0, 1, 2, 3, 12, 13, 14, 15, 40, -1, -1], dtype=torch.int32)
    scores = torch.tensor([5.0, 1.0, 2.0, 2.0 - 1e-6, 0.5, 0.1, 0.2, 0.3, 0.1, 0.0])
    assert dsa_bench.same_pools(at, got, want, 40, lambda: scores, 1e-4, "row") == 2
    scores[3] = 1.5
    with pytest.raises(AgreementError, match=r"pools \[3\] are in one selection only"):
        dsa_bench.same_pools(at, got, want, 40, lambda: scores, 1e-4, "row")


def test_timing_walks_cache_copies(monkeypatch):
    """Two copies (as a GPU's timed graph walks them): the check runs copy 0, every timed run
    steps copy 0's slots and then copy 1's, each copy with its own kv_b_proj."""
    slots, weights = [], []

    def spy(kw: dict) -> None:
        slots.append(kw["slot"].tolist())
        weights.append(kw["wkvb"].data_ptr())

    monkeypatch.setattr(dsa_bench, "rotation", lambda step, one, free: 2)
    _after(monkeypatch, mla_emitter, spy)
    r = _bench().step(3, 39)
    assert r.extra["copies"] == 2 and r.rel_err <= 1e-4
    assert slots[:3] == [[0, 1, 2], [0, 1, 2], [3, 4, 5]]  # the check, then a timed run
    assert weights[1] != weights[2] and weights[0] == weights[1]


def test_a_paged_cache_behind_an_identity_table():
    with overrides(kv_block_size=16):
        b = _bench()
        assert b.index.block_size == b.attn.block_size == 16
        r = b.step(2, 100)
    assert r.rel_err <= 1e-4 and r.extra["capacity"] == 128


def test_sizes_default_to_glm_flash_on_a_gpu():
    llama = hyperloom.build("llama", "tiny")
    index, attn = dsa_specs(llama, gpu=True)
    assert (index.heads, index.head_dim, index.topk, index.kpool, index.width) == \
        (32, 128, 2048, 4, 2051)
    assert (attn.heads, attn.qk_head_dim, attn.v_head_dim, attn.rank, attn.width) == \
        (64, 256, 256, 512, 2051)
    assert dsa_specs(llama, gpu=False) == dsa_specs(hyperloom.build("glm5next", "tiny"), False)


def test_glm_flash_floors_and_memory():
    """At 128K the indexer reads 32768 pooled keys of 128 bf16 (8 MiB) a sequence, the attend
    kernel gathers 2049 latents of 512 (topk + a 1-token tail) whatever the context; 16
    sequences' caches take 3.2 GiB a copy and a timed graph walks 2 copies."""
    index, attn = dsa_specs(hyperloom.build("llama", "tiny"), gpu=True)
    fl = floors(index, attn, 1, 131072, 2)
    assert fl.indexer == (32768 * 128 + 32 * 128 + 32 + 2 * 128) * 2
    assert fl.attend == (2049 + 64) * 512 * 2 == floors(index, attn, 1, 4096, 2).attend
    assert fl.step == fl.indexer + 2049 * 512 * 2 + (64 * 512 * 512 + 64 * 512 + 2 * 512) * 2
    assert capacity(index, 131072) == 131072 + 64
    one = copy_bytes(index, attn, 16, 131072, 2)
    assert 3 * GIB < one < 3.3 * GIB
    big = floors(index, attn, 16, 131072, 2).step
    assert rotation(big, one, 139 * GIB) == 2 and rotation(fl.step, one, None) == 1
    assert rotation(floors(index, attn, 1, 4096, 2).step, 40 << 20, 139 * GIB) == 8
    with pytest.raises(InputError, match="lower --dsa-batch"):
        rotation(big, one, 8 * GIB)


@pytest.mark.gpu
def test_dsa_bench_gpu():
    bench = DSABench(hyperloom.build("llama", "tiny"), torch.device("cuda"), torch.bfloat16,
                     2e-2, LIMITS)
    r = bench.step(2, 4096)
    assert r.ours_s > 0 and r.rel_err <= 2e-2 and r.extra["copies"] > 1
