"""The variant sweeps of bench/sweeps (the chunked KDA prefill, the routed experts and router,
the KDA conv, the DSA indexer, the MLA prefill): on the CPU each checks every variant against
its reference (a dry run before a device call), and a variant that computes something else
shows its error."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.tolerances import REL

SWEEPS = Path(__file__).resolve().parents[2] / "bench" / "sweeps"


def _sweep(name: str = "kda_chunk"):
    """The sweep script bench/sweeps/{name}.py as a module."""
    spec = importlib.util.spec_from_file_location(f"{name}_sweep", SWEEPS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _variant(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text("from variant import make\n\nglobals().update(make(" + text + "))\n")
    return str(path)


def test_variants_are_checked_against_the_reference(tmp_path) -> None:
    import torch
    same = _variant(tmp_path, "warps", 'consts={"ROWS_WARPS": 2}')
    # Aqk's diagonal blocks zeroed: the output loses each row's own contribution
    wrong = _variant(tmp_path, "wrong", 'text=[("    pd = tl.where(j[:, None] >= j[None, :], '
                                        'pd, 0.)\\n", "    pd = pd * 0.\\n")]')
    got = {r["variant"]: r for r in _sweep().main(["40", "committed", same, wrong])}
    for ok in ("committed", same):
        assert got[ok]["out_err"] < REL[torch.float32], got[ok]
        assert got[ok]["state_err"] < REL[torch.float32], got[ok]
    assert got[wrong]["out_err"] > 1e-2, got[wrong]


def test_a_patch_that_does_not_apply_is_refused(tmp_path) -> None:
    bad = _variant(tmp_path, "bad", 'text=[("no such line\\n", "")]')
    with pytest.raises(ValueError, match="variant text not in the source"):
        _sweep().main(["20", bad])


def test_fp16_activations_and_the_tests_of_a_variant(tmp_path) -> None:
    import torch
    wrong = _variant(tmp_path, "wrong", 'text=[("    pd = tl.where(j[:, None] >= j[None, :], '
                                        'pd, 0.)\\n", "    pd = pd * 0.\\n")]')
    got = _sweep().main(["40", "committed", wrong, "--dtype", "fp16",
                         "--tests", "one_run_over_several_chunks"])
    err = {r["variant"]: r["out_err"] for r in got if "out_err" in r}
    assert err["committed"] < REL[torch.float16] and err[wrong] > 1e-2, err
    rc = {r["variant"]: r["tests_rc"] for r in got if "tests_rc" in r}
    assert rc == {"committed": 0, wrong: 1}, rc


def _host_variant(tmp_path: Path, name: str, host: str, text: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(f"from variant import make\nfrom hyperloom.codegen.emitters import {host}\n\n"
                    f"globals().update(make({text}, host={host}))\n")
    return str(path)


def test_moe_expert_variants_are_checked(tmp_path) -> None:
    """bench/sweeps/moe_experts.py: 256 rows of a tiny layer (64 an expert: tensor-core tiles);
    a variant that halves each pair's weight in down's epilogue shows its error."""
    import torch
    same = _host_variant(tmp_path, "same", "moe_experts", 'consts={"COMBINE_BLOCK": 256}')
    wrong = _host_variant(tmp_path, "wrong", "moe_experts",
                          'text=[("(acc * wt[:, None])", "(acc * wt[:, None] * 0.5)")]')
    got = {r["variant"]: r
           for r in _sweep("moe_experts").main(["256", "committed", same, wrong])}
    for ok in ("committed", same):
        assert got[ok]["err"] < REL[torch.float32] and got[ok]["vs_committed"] == 0, got[ok]
    assert got[wrong]["err"] > 0.1 and got[wrong]["vs_committed"] > 0.1, got[wrong]


def test_moe_router_variants_are_checked(tmp_path, monkeypatch) -> None:
    """--router: each variant's ids and weights against the committed router's, on its wide
    tiles (from WIDE_ROWS rows: lowered to 128 here, 1024 took minutes on the interpreter)."""
    from hyperloom.codegen.emitters import moe_router

    monkeypatch.setattr(moe_router, "WIDE_ROWS", 128)
    assert moe_router.WIDE_ROWS > moe_router.MID_ROWS  # 128 rows: the wide tiles
    same = _host_variant(tmp_path, "same", "moe_router", 'consts={"WIDE_SPLITS": 2}')
    wrong = _host_variant(tmp_path, "wrong", "moe_router",
                          'text=[("    ws = ws * ", "    ws = 2.0 * ws * ")]')
    got = {r["variant"]: r for r in _sweep("moe_experts").main(["128", "--router", "committed",
                                                                 same, wrong])}
    assert got["committed"]["err"] == 0 and got[same]["vs_committed"] == 0, got
    assert got[wrong]["err"] > 0.5, got[wrong]


def test_conv_variants_are_checked(tmp_path) -> None:
    """bench/sweeps/kda_conv.py on the CPU: the committed conv, each of its forms on every step
    and a retiled one match the reference on every step shape; one without the SiLU does not."""
    module = _sweep("kda_conv")
    wrong = _host_variant(tmp_path, "wrong", "kda_conv",
                          'text=[("(y * tl.sigmoid(y))", "(y)")]')
    good = ["committed", "runs", "tile:8x16x2"]
    got = module.main([*good, wrong])
    worst = {}
    for r in got:
        worst[r["variant"]] = max(worst.get(r["variant"], 0.0), r["err"])
    assert all(worst[v] < 1e-5 for v in good), worst
    assert worst[wrong] > 1e-2, worst


def test_gemv_tilings_are_checked() -> None:
    """bench/sweeps/gemv.py on the CPU: the committed tiling and a `W,S,N,K` one (its tiles
    used: SwiGLU splits W between gate and up) match torch on every shape."""
    got = _sweep("gemv").main(["committed", "16,3,2,32", "--shapes", "llama o,llama gate_up"])
    assert len(got) == 4 and all(r["err"] < 1e-5 for r in got), got
    assert [r["tiles"] for r in got if r["variant"] != "committed"] == [(16, 3, 2, 32),
                                                                       (8, 3, 2, 32)]


def test_a_wrong_mla_merge_is_caught(tmp_path) -> None:
    """An MLA variant (bench/sweeps/dsa_indexer.py --mla) whose merge drops the splits'
    weights passes at one split and fails at three."""
    from tests.codegen.test_dsa import mla_splits_match_reference
    module = _sweep("dsa_indexer")
    path = tmp_path / "wrong.py"
    path.write_text("from variant import make\nfrom hyperloom.codegen.emitters import mla\n"
                    "globals().update(make(text=[('o += f[:, None] * tl.load', "
                    "'o += tl.load')], host=mla))\n")
    with pytest.raises(AssertionError, match="3 splits"):
        mla_splits_match_reference(module.load_variant(str(path), "wrong", module.mla))


def test_mla_prefill_variants_are_checked(tmp_path) -> None:
    """bench/sweeps/mla_prefill.py on the CPU: the committed attention matches the reference
    on a dense (12 tokens) and a sparse (40) prefill; one whose dense form stops a token short
    does not, nor one whose split form (taking every row) stops a row's chosen columns short."""
    import torch
    wrong = {"dense": 'host=mla, text=[("lim = tl.where(mine, p + 1, 0)", '
                      '"lim = tl.where(mine, p, 0)")]',
             "split": 'host=mla, text=[("tl.minimum(p + 1, HEAD)", "tl.minimum(p, HEAD)")], '
                      'launch_kw={"seq_rows": None}'}
    paths = []
    for tag, args in wrong.items():
        path = Path(_variant(tmp_path, tag, args))
        path.write_text("from hyperloom.codegen.emitters import mla\n" + path.read_text())
        paths.append(str(path))
    got = _sweep("mla_prefill").main(["committed", *paths])
    err = {(r["variant"], r["tokens"]): r["err"] for r in got}
    assert all(err["committed", n] < REL[torch.float32] for n in (12, 40)), err
    assert all(err[p, n] > 1e-2 for p in paths for n in (12, 40)), err


def test_dsa_indexer_variants_are_checked(tmp_path) -> None:
    """bench/sweeps/dsa_indexer.py on the CPU (GLM tiny's indexer): the committed kernels pass
    the bench's check; scores negated select other pools and are refused, and so are scores
    left unwritten past pool 8 (the sweep poisons the scratch an earlier run filled)."""
    from hyperloom.bench.scenarios import AgreementError
    module = _sweep("dsa_indexer")
    got = module.main(["committed", "--batch", "2"])
    assert got[0]["near_ties"] is not None, got
    wrong = _host_variant(tmp_path, "wrong", "dsa",
                          'text=[("tl.store(sc_ptr + r * ssc + j, sc, mask=jm)", '
                          '"tl.store(sc_ptr + r * ssc + j, -sc, mask=jm)")]')
    with pytest.raises(AgreementError, match="selection"):
        module.main([wrong, "--batch", "2"])
    short = _host_variant(tmp_path, "short", "dsa",
                          'text=[("tl.store(sc_ptr + r * ssc + j, sc, mask=jm)", '
                          '"tl.store(sc_ptr + r * ssc + j, sc, mask=jm & (j < 8))")]')
    with pytest.raises(AgreementError, match="selection"):
        module.main(["committed", short, "--batch", "2"])


def test_queued_dsa_select_variants_pass_the_check() -> None:
    """The queued variants of the segmented DSA select (bench/sweeps/queued/dsa_select) patch
    the committed source as it stands and pass the bench's check at 3008 pools (three segments
    of the select), beside the committed kernels."""
    paths = sorted(str(p) for p in (SWEEPS / "queued" / "dsa_select").glob("*.py"))
    assert len(paths) >= 4, paths
    got = _sweep("dsa_indexer").main(["committed", *paths, "--batch", "3", "--ctx", "12000"])
    assert [r["variant"] for r in got] == ["committed", *paths], got
    assert all(r["near_ties"] is not None for r in got), got


def test_hc_finish_forms_are_checked() -> None:
    """bench/sweeps/hc_rows.py on the CPU: both finish forms (4 rows: the streams form; 20: the
    row form) and the wide form (also with its gates in another tiling, then timed alone) match
    `semantics.hc.hc_pre`; the projection alone, and the wide projection in another tiling,
    match X_flat @ fn^T; X read alone is not checked (it computes no projection)."""
    names = ["committed", "row (16 warps, 16384 elements)", "wide (apply + gates)",
             "wide gates, 64 rows, 4 warps, 4 splits", "projection alone",
             "wide projection, K 64, 6 stages", "wide projection's X read alone"]
    got = _sweep("hc_rows").main(["--variants", ";".join(names)])
    assert len(got) == 2 * len(names), got
    for r in got:
        ok = r["err"] != r["err"] if "read alone" in r["variant"] else r["err"] < 1e-5
        assert ok, r


def test_site_orders_are_checked() -> None:
    """bench/sweeps/site_order.py on the CPU: the site scenario with every hc_post walk, each
    checked against the PyTorch lowering inside `Bench.site` (a wrong walk raises there)."""
    from hyperloom.codegen.emitters import hc_post
    committed = hc_post.ORDER
    got = _sweep("site_order").main(["--rounds", "1"])
    assert sorted(got) == sorted(f"{o} mhc site 8" for o in hc_post.ORDERS), got
    assert hc_post.ORDER == committed  # the sweep puts the committed walk back


def test_site_program_sizes_are_checked() -> None:
    """site_order.py's `--blocks`: hc_post programs of other widths pass the same check (8
    columns: eight programs a row of the tiny config's 64; 128: a row in one program), and the
    committed size comes back."""
    from hyperloom.codegen.emitters import hc_post
    committed = hc_post.BLOCK_D, hc_post.WARPS
    got = _sweep("site_order").main(["--orders", "rows_last", "--blocks", "8x1,128x2"])
    assert sorted(got) == ["rows_last 128x2 mhc site 8", "rows_last 8x1 mhc site 8"], got
    assert (hc_post.BLOCK_D, hc_post.WARPS) == committed


def test_knob_variants_of_decode_are_checked() -> None:
    """bench/sweeps/knob_decode.py on the CPU: each variant's decode built under its knobs
    and checked against the PyTorch lowering inside `Bench.decode`; the knobs come back."""
    from hyperloom.config import CONFIG
    got = _sweep("knob_decode").main(["--variants", ";head_mean=false", "--ctx", "12"])
    assert sorted(got) == ["defaults | decode b1 ctx12", "head_mean=false | decode b1 ctx12"]
    assert CONFIG.head_mean


def test_kda_state_layouts_are_checked(monkeypatch) -> None:
    import torch
    sweep = _sweep("kda_state_layout")
    got = sweep.main(["vdk:8x1", "kdv:16x1", "vdk:16x2", "copy-vdk:8x1", "copy-kdv:16x1",
                      "launch:8x1", "--batches", "2"])
    assert all(r["err"] < REL[torch.float32] for r in got), got
    assert [r["err"] for r in got if sweep.bare(r["variant"])] == [0, 0, 0]
    # the transposed pool read through the other layout's pointer: the state read is S^T
    monkeypatch.setitem(sweep.LAYOUT_PTR, "vdk", sweep.LAYOUT_PTR["kdv"])
    got = sweep.main(["vdk:8x1", "--batches", "2"])
    assert got[0]["err"] > 1e-2, got
