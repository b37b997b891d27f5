"""The `hyperloom` command: its output comes from the same engine the API gives, and bad input
is one clear line with exit status 2."""

from __future__ import annotations

import json

import pytest
import torch

import hyperloom
from hyperloom.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_run_default_is_tiny_glm_and_matches_the_api(capsys):
    rc, out, _ = run(capsys, "run", "--json", "--prompt-ids", "5,6,7,8,9,10,11,12,13,14",
                     "--max-new-tokens", "5")
    assert rc == 0
    got = json.loads(out)
    ref = hyperloom.load("glm5next", "tiny", seed=0, backend="reference")  # the CLI compiles
    want = ref.generate(list(range(5, 15)), 5)
    assert got["tokens"] == want and len(want) == 5


def test_run_text_output_names_model_and_tokens(capsys):
    rc, out, _ = run(capsys, "run", "llama", "--config", "tiny-hc", "--max-new-tokens", "3")
    assert rc == 0
    assert "llama --config tiny-hc" in out and "hc_pre" in out and "tokens:" in out


def test_dump_ir_shows_every_glm_site_and_mixer(capsys):
    rc, out, _ = run(capsys, "dump-ir", "glm5next", "--config", "tiny")
    assert rc == 0
    for op in ("hc_expand(", "hc_pre(", "hc_post(", "hc_head_mean(", "kda_conv(", "kda(",
               "dsa_index(", "mla_attention(", "moe_router(", "moe_experts(", "lm_head("):
        assert op in out, op
    assert out.count("graph ") == 2  # main graph and the MTP drafter


def test_dump_ir_layers_of_the_real_config(capsys, tmp_path):
    rc, out, _ = run(capsys, "dump-ir", "glm5next", "--config", "glm-5.3-flash", "--layers", "4",
                     "--out", str(tmp_path))
    assert rc == 0
    text = (tmp_path / "00_input.ir").read_text()
    assert text.count("kda(") == 3 and text.count("dsa_index(") == 1
    assert text.count("moe_router(") == 1 and text.count("swiglu(") == 3 + 1  # 3 dense + shared
    assert "bf16[T, 4096]" in text


@pytest.mark.parametrize("argv, needle", [
    (("run", "--prompt-ids", "1,2,999"), "token id 999 at position 2"),
    (("run", "--prompt-ids", "1,x"), "--prompt-ids"),
    (("run", "nosuchmodel"), "unknown model 'nosuchmodel'"),
    (("run", "llama", "--config", "huge"), "no config 'huge'"),
    (("run", "llama", "--layers", "9"), "--layers 9: wants 1 to 2"),
    (("run", "--top-p", "2", "--temperature", "-1"),
     "temperature=-1.0 (wants >= 0), top_p=2.0 (wants 0 < top_p <= 1)"),
    (("run", "--stop", "a"), "--stop must be comma-separated integers, got 'a'"),
    (("bench", "llama", "--config", "tiny-hc", "--scenarios", "site", "--site-rows", "0"),
     "--site-rows items must be positive integers, got '0'"),
    (("bench", "glm5next", "--scenarios", "kda-decode", "--kda-batch", "x"),
     "--kda-batch must be comma-separated integers, got 'x'"),
    (("bench", "llama", "--ctx", "16x"), "--ctx items are CTX or BATCHxCTX"),
    (("run", "--device", "foo"), "--device 'foo': not a torch device"),
    (("bench", "llama", "--device", "foo"), "--device 'foo': not a torch device"),
    (("run", "glm5next", "--config", "glm-5.3-flash"), "use --layers N"),
])
def test_errors_are_one_line(capsys, argv, needle):
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == ""
    assert err.startswith("error: ") and needle in err and err.count("\n") == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="names a CUDA device this machine has")
def test_a_cuda_device_without_cuda_is_one_line(capsys):
    rc, out, err = run(capsys, "run", "--device", "cuda")
    assert rc == 2 and out == "" and err.startswith("error: --device cuda: no CUDA device here")


def test_an_unwritable_dump_path_is_one_line(capsys, tmp_path):
    (tmp_path / "file").write_text("")
    rc, out, err = run(capsys, "dump-ir", "llama", "--out", str(tmp_path / "file" / "dump"))
    assert rc == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1
    assert str(tmp_path / "file") in err


def test_models_lists_every_config(capsys):
    rc, out, _ = run(capsys, "models")
    assert rc == 0
    for name in ("tiny", "tiny-hc", "bench", "llama-3.2-1b", "llama-3-8b", "glm-5.3-flash"):
        assert f"--config {name}" in out


def test_run_a_checkpoint_directory(capsys, tmp_path):
    from hyperloom.models import family
    from hyperloom.models.checkpoint import save_checkpoint
    from hyperloom.models.random_weights import random_weights

    spec = hyperloom.build("llama", "tiny", dtype=torch.float32)
    save_checkpoint(tmp_path, family("llama"), spec, random_weights(spec, seed=9))
    rc, out, _ = run(capsys, "run", str(tmp_path), "--json", "--prompt-ids", "3,1,4,1,5")
    assert rc == 0
    want = hyperloom.from_pretrained(tmp_path).generate([3, 1, 4, 1, 5], 8)
    assert json.loads(out)["tokens"] == want
    assert want != hyperloom.load("llama", "tiny", seed=0).generate([3, 1, 4, 1, 5], 8)


def test_compile_dumps_every_stage_plan_and_kernel(capsys, tmp_path):
    from hyperloom.ir import parse_graph
    from hyperloom.passes import PIPELINE

    rc, out, _ = run(capsys, "compile", "llama", "--config", "tiny-hc", "--dump", str(tmp_path))
    assert rc == 0 and f"{len(PIPELINE)} passes" in out
    names = {p.name for p in tmp_path.iterdir()}
    assert {"00_input.ir", "01_after_merge_sibling_linears.ir", "declined_fusions.txt",
            "arena_plan.txt", "kernel_plan.txt", "kernels"} <= names
    assert len([n for n in names if n.endswith(".ir")]) == 1 + len(PIPELINE)
    last = f"{len(PIPELINE):02d}_after_{PIPELINE[-1].__name__}.ir"
    final = parse_graph((tmp_path / last).read_text())
    kernels = sorted(p.stem for p in (tmp_path / "kernels").glob("*.py"))
    assert len(kernels) == len(final.nodes)  # every fused node of llama has an emitter
    assert "arena:" in (tmp_path / "arena_plan.txt").read_text()


def test_dump_plan_one_line_per_kernel(capsys):
    rc, out, _ = run(capsys, "dump-plan", "llama", "--config", "bench")
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].startswith("kernel plan of llama_4l: 30 entries")
    assert len(lines) == 31 and all(" fuses " in ln for ln in lines[1:])


def test_dump_dir_knob_dumps_any_compile(tmp_path):
    from hyperloom.config import overrides

    with overrides(dump_dir=str(tmp_path)):
        hyperloom.load("llama", "tiny", prefill_chunk=4)
    assert (tmp_path / "kernel_plan.txt").is_file() and (tmp_path / "kernels").is_dir()


@pytest.mark.parametrize("item, needle", [
    ("kv_block_size", "want KNOB=VALUE"),
    ("no_such_knob=1", "want KNOB=VALUE"),
    ("kv_block_size=big", "kv_block_size takes an int"),
    ("interpret=maybe", "interpret takes true/false"),
])
def test_set_rejects_bad_knobs(capsys, item, needle):
    with pytest.raises(SystemExit) as exc:
        main(["--set", item, "models"])
    assert exc.value.code == 2 and needle in capsys.readouterr().err


@pytest.mark.parametrize("argv", [("dump-plan", "llama", "--max-rows", "0"),
                                  ("compile", "llama", "--dump", "out", "--max-rows", "-1")])
def test_max_rows_must_be_positive(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    assert exc.value.code == 2
    assert "--max-rows: wants an integer >= 1, got" in capsys.readouterr().err


def test_set_overrides_a_knob_for_the_command_only(capsys, tmp_path):
    from hyperloom.config import CONFIG, Config

    rc, out, _ = run(capsys, "--set", f"dump_dir={tmp_path}", "--set", "kv_block_size=16", "run",
                     "llama", "--max-new-tokens", "2", "--json")
    assert rc == 0 and json.loads(out)["tokens"]
    assert (tmp_path / "kernel_plan.txt").is_file()  # the knob reached the compile
    kernels = "".join(p.read_text() for p in (tmp_path / "kernels").iterdir())
    assert "PAGE: tl.constexpr = 16" in kernels  # paged attention kernels were generated
    assert CONFIG.dump_dir != str(tmp_path) and \
        CONFIG.kv_block_size == Config().kv_block_size  # restored after
