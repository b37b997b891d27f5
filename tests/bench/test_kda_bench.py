"""The KDA kernel scenarios of `hyperloom bench` (bench.kda) on the CPU: the command's rows in the
JSON record and the table without flash-linear-attention, the check that refuses a wrong output
or state of ours, fla's baseline plumbing through a stand-in with fla's signature (a right one is
timed, a wrong one is reported and skipped), the width taken from the model, and fla never
imported unless a scenario runs; the whole-site scenario (kda-layer): its bytes, its check
against the reference interpreter refusing a wrong state, and a model without KDA refused. GPU
(`gpu` mark): real width, bf16, against the real fla."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

import hyperloom
from hyperloom.bench import kda as kda_bench
from hyperloom.bench import kda_layer
from hyperloom.bench import report
from hyperloom.bench.kda import KDABench, KDAResult, kda_bytes, kda_spec
from hyperloom.bench.measure import Limits
from hyperloom.bench.scenarios import AgreementError, Bench
from hyperloom.cli import main
from hyperloom.codegen.emitters import kda as recurrent
from hyperloom.codegen.emitters import kda_chunk_intra
from hyperloom.codegen.emitters.kda import KDASpec
from hyperloom.errors import InputError
from hyperloom.ir.types import DType
from hyperloom.passes import kernel_plan

CPU = torch.device("cpu")


def _main(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(list(argv))
    return rc, out.getvalue()


@pytest.fixture
def no_fla(monkeypatch):
    monkeypatch.setitem(sys.modules, "fla", None)  # `import fla` raises ImportError


def _bench(model: str = "glm5next") -> KDABench:
    return KDABench(hyperloom.build(model, "tiny", dtype=torch.float32), CPU, torch.float32, 1e-4)


def test_kda_scenarios_write_their_rows(no_fla, monkeypatch, tmp_path):
    def no_weights(*a, **kw):
        raise AssertionError("the KDA scenarios built the engine's bench (random weights)")

    monkeypatch.setattr(Bench, "__init__", no_weights)
    monkeypatch.setattr(kda_bench, "chunked_module", lambda: None)  # the recurrent prefill
    out = tmp_path / "kda.json"
    rc, text = _main("bench", "glm5next", "--scenarios", "kda-decode,kda-prefill",
                     "--kda-batch", "1,2", "--kda-tokens", "6", "--profile", "--json", str(out))
    assert rc == 0
    rows = json.loads(out.read_text())["results"]
    assert [r["scenario"] for r in rows] == ["kda step b1", "kda step b2", "kda prefill 6",
                                              "kda prefill 6 model decay"]
    spec = KDASpec(4, 16)  # GLM tiny's KDA layer
    for r, (batch, tokens) in zip(rows, [(1, 1), (2, 1), (1, 6), (1, 6)]):
        assert r["ours_s"] > 0 and r["unit"] == "bytes"
        assert r["work"] == kda_bytes(spec, batch, tokens, torch.float32)
        assert r["rel_err_vs_eager"] <= 1e-4 and r["kernels_per_step"] == 1
        assert (r["heads"], r["head_dim"], r["rows"]) == (4, 16, batch * tokens)
        assert r["baselines_s"] == {} and r["vs_fla"] is None and r["baseline"] is None
        assert "not importable" in r["notes"][0]
        assert r["profile"] and r["profile"][0]["us_per_step"] > 0
    b1, b2, prefill, steep = rows
    assert (b1["batch"], b2["batch"]) == (1, 2)
    assert b2["vs_b1"] == pytest.approx(b2["ours_s"] / b1["ours_s"])
    assert "batch" not in prefill
    for r in (prefill, steep):
        assert r["ours_kernel"].startswith("emitters.kda (recurrent) over the whole run")
    lines = [ln for ln in text.splitlines() if ln.startswith("kda ")]
    assert len(lines) == 2 * 4 and all("no baseline" in ln for ln in lines)
    assert text.count("note: flash-linear-attention not importable") == 2 * 4
    assert "targets" not in text  # no target's row ran at its size


def test_kda_state_bytes_are_the_issues():
    # GLM-5.3 at batch 1: 8 MiB of fp32 state moved (issue 6), plus 5 bf16 rows, b and slot
    assert kda_bytes(KDASpec(64, 128), 1, 1, torch.bfloat16) == \
        8 * 2 ** 20 + 5 * 8192 * 2 + 64 * 2 + 8


@pytest.mark.parametrize("what", ["out", "state"])
def test_a_wrong_output_of_ours_is_refused(no_fla, monkeypatch, what):
    """Sequence 1 of 2 off by 1% (100x the fp32 tolerance) in its output or its final state."""
    real = recurrent.launch

    def off(kernel, spec, **kw):
        real(kernel, spec, **kw)
        t = kw["out"] if what == "out" else kw["state"]
        t[1] *= 1.01

    monkeypatch.setattr(recurrent, "launch", off)
    with pytest.raises(AgreementError, match=f"kda step b2: ours {what}, sequence 1"):
        _bench().step(2)


def _fake_fused_recurrent(q, k, v, g, beta, scale=None, initial_state=None,
                          output_final_state=False, use_qk_l2norm_in_kernel=False,
                          use_beta_sigmoid_in_kernel=False, **kw):
    """fla's fused_recurrent_kda as its docstring has it: [B, T, H, d] rows, state [B, H, dk, dv]
    fp32, returned new; the flags as named."""
    q, k, v, g, beta = (t.float() for t in (q, k, v, g, beta))
    if use_qk_l2norm_in_kernel:
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    beta = torch.sigmoid(beta) if use_beta_sigmoid_in_kernel else beta
    s, o = initial_state.clone(), torch.empty_like(v)
    for t in range(q.shape[1]):
        s = s * g[:, t].exp()[..., None]
        delta = beta[:, t, :, None] * (v[:, t] - torch.einsum("bhkv,bhk->bhv", s, k[:, t]))
        s = s + k[:, t, ..., None] * delta[..., None, :]
        o[:, t] = torch.einsum("bhkv,bhk->bhv", s, q[:, t] * scale)
    return o, s if output_final_state else None


def test_fla_baseline_is_checked_then_timed(monkeypatch):
    """Both sides checked, then timed over state copies (two here, as a GPU's graph walks
    them): ours on slots of its own pool, fla on its own initial states."""
    ours, theirs, real = [], [], recurrent.launch

    def spy(kernel, spec, **kw):
        ours.append(kw["slot"].tolist())
        real(kernel, spec, **kw)

    def fake(*a, initial_state, **kw):
        theirs.append(initial_state.data_ptr())
        return _fake_fused_recurrent(*a, initial_state=initial_state, **kw)

    fla = SimpleNamespace(fused_recurrent_kda=fake)
    monkeypatch.setattr(kda_bench, "import_fla", lambda: (fla, "fla stand-in"))
    monkeypatch.setattr(kda_bench, "rotation", lambda spec, batch, gpu: 2)
    monkeypatch.setattr(recurrent, "launch", spy)
    r = _bench().step(3)
    assert set(r.baselines_s) == {"fla fused_recurrent_kda"} and r.extra["notes"] == []
    assert r.extra["baseline"] == "fla stand-in"
    assert r.extra["vs_fla"] == pytest.approx(r.baselines_s["fla fused_recurrent_kda"] / r.ours_s)
    assert ours[:3] == [[0, 1, 2], [0, 1, 2], [3, 4, 5]]  # the check, then a timed run
    assert len(set(theirs[:3])) == 2 and theirs[0] == theirs[1]


def test_a_wrong_fla_is_reported_not_timed(monkeypatch, capsys):
    """A baseline fed the wrong math (beta logits taken as beta) disagrees: not timed, the row
    and stderr say why, and our row stands."""
    def wrong(*a, **kw):
        return _fake_fused_recurrent(*a, **(kw | {"use_beta_sigmoid_in_kernel": False}))

    fla = SimpleNamespace(fused_recurrent_kda=wrong)
    monkeypatch.setattr(kda_bench, "import_fla", lambda: (fla, "fla stand-in"))
    r = _bench().step(2)
    assert r.baselines_s == {} and r.extra["vs_fla"] is None and r.ours_s > 0
    assert "fla fused_recurrent_kda not timed: AgreementError" in r.extra["notes"][0]
    assert "kda step b2: fla fused_recurrent_kda out, sequence" in capsys.readouterr().err


def test_prefill_feeds_fla_chunk_kda_the_run(monkeypatch):
    """chunk_kda gets one sequence of n rows, [1, n, H, d], with the decode's flags, plus
    safe_gate at GLM's lower bound in its second form."""
    calls = []

    def chunk(*a, **kw):
        calls.append((a[0].shape, {k: kw.get(k) for k in ("safe_gate", "lower_bound")}))
        return _fake_fused_recurrent(*a, **kw)

    fla = SimpleNamespace(chunk_kda=chunk)
    monkeypatch.setattr(kda_bench, "import_fla", lambda: (fla, "fla stand-in"))
    monkeypatch.setattr(kda_bench, "chunked_module", lambda: None)  # ours: the quick path
    r = _bench().prefill(5)
    assert set(r.baselines_s) == {"fla chunk_kda", "fla chunk_kda safe_gate"}
    assert calls[0] == ((1, 5, 4, 16), {"safe_gate": None, "lower_bound": None})
    assert calls[-1] == ((1, 5, 4, 16), {"safe_gate": True, "lower_bound": -5.0})


def test_prefill_runs_the_chunked_kernel_when_there_is_one(no_fla):
    """emitters.kda_chunk's launches (plan, in-chunk products, solve, row products, chunk walk,
    output) over a chunk and a ragged tail, checked like the recurrent kernel."""
    pytest.importorskip("hyperloom.codegen.emitters.kda_chunk")
    r = _bench().prefill(70)
    assert r.extra["ours_kernel"] == "emitters.kda_chunk (chunk 64)" and r.kernels == 6
    assert r.rel_err <= 1e-4


def test_a_timed_decode_graph_walks_state_copies_past_the_l2():
    glm = KDASpec(64, 128)  # 4 MiB of state a sequence
    assert [kda_bench.rotation(glm, b, gpu=True) for b in (1, 16, 128)] == [64, 4, 1]
    assert kda_bench.rotation(glm, 1, gpu=False) == 1


def test_kda_width_comes_from_the_model():
    glm = hyperloom.build("glm5next", "glm-5.3-flash", 1, dtype=torch.bfloat16)
    llama = hyperloom.build("llama", "tiny", dtype=torch.float32)
    assert kda_spec(glm, gpu=True) == KDASpec(64, 128)
    assert kda_spec(hyperloom.build("glm5next", "tiny"), gpu=False) == KDASpec(4, 16)
    assert kda_spec(llama, gpu=False) == KDASpec(2, 16)
    assert kda_spec(llama, gpu=True) == KDASpec(64, 128)  # GLM-5.3's, not a tiny one on a GPU


def test_unknown_scenarios_are_refused(capsys):
    assert main(["bench", "glm5next", "--scenarios", "kda-decode,kda"]) == 2
    assert "unknown kda; known: decode, site, prefill, kda-decode, kda-prefill" in \
        capsys.readouterr().err


def test_the_table_and_targets_carry_kda_rows():
    step = KDAResult("kda step b1", 1.0, "bytes", 1e-3, {"fla fused_recurrent_kda": 3e-3},
                     kernels=1, batch=1, extra={"vs_fla": 3.0, "notes": []})
    wide = KDAResult("kda step b16", 0.75, "bytes", 1e-3, kernels=1, batch=16,
                     extra={"vs_fla": None, "notes": ["fla absent"]})
    rec = report.record([step, wide], Limits(1e3, 1.0), report.meta(CPU, Limits(1.0, 1.0), "x"))
    assert rec["results"][0]["vs_fla"] == 3.0 and rec["results"][1]["notes"] == ["fla absent"]
    text = report.table(rec)
    assert "kda step b1: vs_fla 3.000 (target >= 2): met" in text
    assert "kda step b16: fraction_of_limit 0.750 (target >= 0.8): MISSED" in text
    assert "    note: fla absent" in text
    b16 = next(ln for ln in text.splitlines() if ln.startswith("kda step b16"))
    assert "no baseline" in b16 and b16.endswith("1.00x")  # vs b1


def test_nothing_imports_fla_until_a_scenario_runs():
    code = ("import sys, hyperloom.cli, hyperloom.bench.kda, hyperloom.bench.report; "
            "sys.exit('fla' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0


@pytest.mark.gpu
def test_kda_scenarios_against_fla_gpu():
    """Real width (GLM-5.3: 64 heads x 128), bf16 rows, fp32 state, against the real fla."""
    pytest.importorskip("fla.ops.kda")
    model = hyperloom.build("glm5next", "glm-5.3-flash", 1, dtype=torch.bfloat16)
    bench = KDABench(model, torch.device("cuda"), torch.bfloat16, 2e-2)
    for r in (bench.step(1), bench.step(16), bench.prefill(1024)):
        assert r.extra["notes"] == [], r.extra["notes"]
        assert r.extra["vs_fla"] is not None and r.rel_err <= 2e-2


def test_kda_layer_rows(no_fla, tmp_path):
    out = tmp_path / "layer.json"
    rc, text = _main("bench", "glm5next", "--scenarios", "kda-layer", "--kda-batch", "1,2",
                     "--json", str(out))
    assert rc == 0
    rows = json.loads(out.read_text())["results"]
    assert [r["scenario"] for r in rows] == ["kda layer b1", "kda layer b2"]
    graph = kda_layer.layer_graph(hyperloom.build("glm5next", "tiny", dtype=torch.float32),
                                  DType.F32)
    state = 4 * 16 * 16 * 4 + 3 * 64 * 3 * 4  # recurrent [4, 16, 16] + conv windows [3 x 64, 3]
    assert sum(d.type.nbytes() for d in graph.states()) == state
    for r, batch in zip(rows, (1, 2)):
        assert r["work"] == kda_layer.layer_bytes(graph, batch)
        assert r["work"] == sum(p.type.nbytes() for p in graph.params) \
            + batch * (2 * state + 2 * 4 * 64 * 4)  # GLM tiny: 4 fp32 streams of 64
        # hc_pre (one launch at one row; at two projection + finish, or on the interpreter
        # projection + apply + gates: kernel_plan.HC_WIDE_ROWS), the merged front GEMV, the
        # conv (f_b and the gate in its launch), the recurrence (g_b and the gated norm in its
        # launch at one row: CONFIG.kda_norm_rows; their own GEMV at two), o with hc_post
        assert 0 < r["rel_err_vs_eager"] <= 1e-4
        hc_pre_at_two = 2 if kernel_plan.HC_WIDE_ROWS >= 2 else 3
        assert r["kernels_per_step"] == {1: 5, 2: 5 + hc_pre_at_two}[batch]
        assert r["batch"] == batch and r["baselines_s"] == {}
        # off a GPU one eager step is timed; on one, LAYER_RUN steps in a graph and one alone
        assert r["timing"] == "eager launches" and r["one_step_graph_s"] is None


def test_kda_layer_refuses_a_wrong_state(monkeypatch):
    real = recurrent.launch

    def off(kernel, spec, **kw):
        real(kernel, spec, **kw)
        kw["state"][1] *= 1.01

    monkeypatch.setattr(recurrent, "launch", off)
    with pytest.raises(AgreementError, match="kda layer b2: state .*recurrent, sequence 1"):
        _bench().layer(2)


def test_kda_layer_needs_an_mhc_kda_model():
    with pytest.raises(InputError, match="kda-layer: llama has no mHC KDA layer"):
        _bench("llama").layer(1)


def test_prefill_decays_mild_and_as_the_model():
    """kda-prefill's inputs: the mild decay and the model's (GLM-5.3's gate on random weights),
    medians -0.6 and -2.5 in [-5, 0); the model's puts a share of 16-row blocks past the
    in-chunk kernel's -64 (its exact form), the mild none."""
    gen = torch.Generator().manual_seed(0)
    for decay, median, steep in (("mild", -0.6, (0.0, 0.0)), ("model", -2.5, (0.2, 0.6))):
        g = kda_bench.make_inputs(KDASpec(64, 128), 1, 512, torch.device("cpu"), torch.float32,
                                  gen, decay).g
        assert g.median().item() == pytest.approx(median, abs=0.1), decay
        assert (g < 0).all() and (g >= kda_bench.LOWER_BOUND).all(), decay
        blocks = g.view(32, 16, 64, 128).cumsum(1)[:, -1].amin(-1)  # [block, head]
        share = (blocks < -kda_chunk_intra.STEEP).float().mean().item()
        assert steep[0] <= share <= steep[1], (decay, share)
