"""The H200's kernels compiled for sm_90 on the CPU (Triton's bundled ptxas, no device): shared
memory within the 227 KB a block may take, and the weight and key streams software-pipelined.
The arguments are specialised as the device's launches specialise them (pointers and the
strides named 16-divisible), so the pipeliner sees what it sees there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hyperloom.codegen.emitters import dsa as dsa_emitter
from hyperloom.codegen.emitters import dsa_select
from hyperloom.codegen.emitters import hc_pre, kda, kda_chunk, kda_conv, matmul, mla, moe_experts
from hyperloom.codegen.emitters.dsa_spec import DSASpec
from hyperloom.codegen.emitters.kda_gate import KDAGateSpec
from hyperloom.codegen.emitters.mla import MLASpec
from hyperloom.config import overrides

SM90_SHARED = 227 * 1024  # dynamic shared memory a block may take on Hopper
ROOT = Path(__file__).resolve().parents[2]


def _sm90(tmp_path, source: str, name: str, types: dict[str, str], consts: dict, warps: int,
          stages: int, divisible: tuple[str, ...] = ()) -> dict:
    """{shared, async_copies} of `name` from the GPU-form `source` compiled for sm_90 in a
    process of its own (`sm90_compile`); `types` gives the runtime arguments' Triton types (a
    superset: the kernel's own are kept), `consts` the constexprs without defaults."""
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    job = tmp_path / f"{name}.json"
    job.write_text(json.dumps({"path": str(path), "name": name, "types": types,
                               "consts": consts, "warps": warps, "stages": stages,
                               "divisible": list(divisible)}))
    env = os.environ | {"TRITON_INTERPRET": "0"}
    run = subprocess.run([sys.executable, "-m", "tests.codegen.sm90_compile", str(job)],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    if run.returncode and "ptxas" in run.stderr and "not found" in run.stderr:
        pytest.skip("Triton without ptxas for sm_90")
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


GLM_EXPERTS = moe_experts.ExpertsSpec(288, 4096, 2048, 8, 7.0)
EXPERT_TYPES = {"order_ptr": "*i32", "meta_ptr": "*i32", "tiles_ub": "i32"}


@pytest.mark.parametrize("rows, dtype", [(4096, "bf16"), (4096, "fp32"), (600, "bf16"),
                                         (1, "bf16")])
def test_expert_gemms_fit_shared_memory_and_pipeline(rows: int, dtype: str, tmp_path) -> None:
    """gate_up and down at GLM-5.3-Flash's size with the tiles `moe_experts.tiles` picks."""
    size = 2 if dtype == "bf16" else 4
    t = moe_experts.tiles(GLM_EXPERTS, rows, None, size, size)
    with overrides(interpret=False):
        source = moe_experts.source("probe", GLM_EXPERTS)
    kinds = {"gate_up": ({"x_ptr": f"*{dtype}", "wg_ptr": f"*{dtype}", "wu_ptr": f"*{dtype}",
                          "h_ptr": f"*{dtype}", "sx": "i32"}, t.bn, "sx"),
             "down": ({"h_ptr": f"*{dtype}", "wd_ptr": f"*{dtype}", "wt_ptr": "*fp32",
                       "part_ptr": f"*{dtype}", "sw": "i32"}, t.bn_down, "sw")}
    for kind, (types, bn, stride) in kinds.items():
        k = _sm90(tmp_path, source, f"probe_{kind}", types | EXPERT_TYPES,
                  {"BM": t.bm, "BN": bn, "BK": t.bk, "GROUP_M": t.group_m}, t.warps, t.stages,
                  (stride,))
        assert k["shared"] <= SM90_SHARED, (kind, t, k)
        assert k["async_copies"] > 0, (kind, t, k)


def test_dsa_score_streams_the_pooled_keys_pipelined(tmp_path) -> None:
    """The indexer's score kernel at GLM-5.3-Flash's size: its key blocks are loaded ahead."""
    spec = DSASpec(32, 128, 2048, 4, True, 64)
    with overrides(interpret=False):
        source = dsa_emitter.source("probe", spec)
    types = {"qi_ptr": "*bf16", "w_ptr": "*bf16", "slot_ptr": "*i64", "pos_ptr": "*i64",
             "pc_ptr": "*bf16", "sc_ptr": "*fp32", "hist_ptr": "*i32", "cnt_ptr": "*i32",
             "sq": "i32", "sw": "i32", "pc_s0": "i32", "pc_s1": "i32", "ssc": "i32",
             "npools": "i32", "count": "i32"}
    it = dsa_emitter.score_blocks(16, 32768)
    k = _sm90(tmp_path, source, "probe_score", types, {"IT": it}, dsa_emitter.WARPS, 3,
              ("sq", "sw", "pc_s0", "pc_s1", "ssc"))
    assert k["shared"] <= SM90_SHARED and k["async_copies"] > 0, k


MLA_WIDE = {"BM": 64, "BR": mla.WIDE_COLS, "BV": mla.WIDE_COLS, "SPLITS": 1}


@pytest.mark.parametrize("kernel, consts, warps, spills", [
    ("dense", {}, mla.DENSE_WARPS, 256), ("", {}, mla.ATTEND_WARPS, 0),
    ("", {"BH": mla.WIDE_BH}, mla.ATTEND_WARPS, 0), ("absorb", MLA_WIDE, 8, 0),
    ("out", MLA_WIDE, 8, 0)])
def test_mla_kernels_do_not_spill(kernel: str, consts: dict, warps: int, spills: int,
                                  tmp_path) -> None:
    """The MLA's kernels at GLM-5.3-Flash's size (rank 512, paged latents): the dense and split
    attention (an fp32 accumulator [rows x heads or heads, 512] each; the split form at a wide
    step's WIDE_BH heads too), and a wide step's absorb and merge on their 64-row x WIDE_COLS
    tiles, as `mla.launch` runs them. The dense form at M 64 spills 196 bytes and was still the
    fastest on the H200 (mla.DENSE_BM); more would be a regression."""
    spec = MLASpec(64, 256, 256, 512, 256 ** -0.5, 2051, 64, head=2048)
    with overrides(interpret=False):
        source = mla.source("probe", spec)
    types = {"qa_ptr": "*bf16", "idx_ptr": "*i32", "slot_ptr": "*i64", "pos_ptr": "*i64",
             "lat_ptr": "*bf16", "acc_ptr": "*fp32", "ml_ptr": "*fp32", "bt_ptr": "*i32",
             "q_ptr": "*bf16", "c_ptr": "*bf16", "w_ptr": "*bf16", "o_ptr": "*bf16"}
    ints = ("rows", "sidx", "lat_s0", "lat_s1", "bt_s0", "sq", "sc", "so", "capacity")
    k = _sm90(tmp_path, source, f"probe_{kernel}" if kernel else "probe",
              types | {n: "i32" for n in ints}, consts, warps, 3,
              ("sidx", "lat_s0", "lat_s1", "bt_s0", "sq", "sc", "so"))
    assert k["shared"] <= SM90_SHARED and k["spill_bytes"] <= spills, k


def test_kda_conv_with_its_gate_does_not_spill(tmp_path) -> None:
    """The run-walking conv carrying the f_b GEMM + decay gate at GLM-5.3-Flash's width (8192
    channels a part, rank 128), as `kda_conv.launch` runs it at decode."""
    spec = kda_conv.ConvSpec(8192, 4, gate=KDAGateSpec(64, 128, -5.0), rank=128)
    with overrides(interpret=False):
        source = kda_conv.source("probe", spec)
    types = {n: "*bf16" for n in ("q_ptr", "k_ptr", "v_ptr", "wq_ptr", "wk_ptr", "wv_ptr",
                                  "oq_ptr", "ok_ptr", "ov_ptr", "f_ptr", "wf_ptr")}
    types |= {"slot_ptr": "*i64", "win_ptr": "*fp32", "bias_ptr": "*fp32", "alog_ptr": "*fp32",
              "g_ptr": "*fp32"}
    ints = ("rows", "sq", "sk", "sv", "soq", "sok", "sov", "sw_slot", "sf", "sg")
    k = _sm90(tmp_path, source, "probe_runs", types | {n: "i32" for n in ints},
              {"BC": 128}, 4, 1, ints[1:])
    assert k["shared"] <= SM90_SHARED and k["spill_bytes"] == 0, k


def test_kda_recurrence_with_its_gated_norm_does_not_spill(tmp_path) -> None:
    """The decode recurrence carrying g_b's GEMM + gated norm (64 heads x 128, rank 128) at its
    one tiling (kda.BV state columns on kda.WARPS warps)."""
    with overrides(interpret=False):
        source = kda.source("probe", kda.KDASpec(64, 128, rank=128, eps=1e-5))
    types = {n: "*bf16" for n in ("q_ptr", "k_ptr", "v_ptr", "g_ptr", "b_ptr", "o_ptr", "ga_ptr",
                                  "wg_ptr", "nw_ptr", "h_ptr")}
    types |= {"slot_ptr": "*i64", "state_ptr": "*fp32", "gs_ptr": "*fp32", "cnt_ptr": "*i32"}
    ints = ("rows", "sq", "sk", "sv", "sg", "sb", "so", "st_slot", "st_head", "sga", "sh")
    k = _sm90(tmp_path, source, "probe", types | {n: "i32" for n in ints},
              {"BV": kda.BV, "SINGLE": True, "EARLY": True, "NORM": True}, kda.WARPS, 1,
              ints[1:])
    assert k["shared"] <= SM90_SHARED and k["spill_bytes"] == 0, k
    print(k)


def _kda_chunk_kernels() -> dict[str, tuple[dict, dict, int, int, tuple[str, ...]]]:
    """name -> (runtime types, constexprs, warps, stages, 16-divisible ints) as
    `kda_chunk.launch` launches them at GLM-5.3-Flash's width in bf16 (fp16 row products)."""
    rows = {n: "*bf16" for n in ("q_ptr", "k_ptr", "v_ptr", "g_ptr", "b_ptr")}
    ints = {n: "i32" for n in ("rows", "sq", "sk", "sv", "sg", "sb", "so", "st_slot", "st_head")}
    tables = {"slot_ptr": "*i64", "chunk_ptr": "*i32", "count_ptr": "*i32", "run_ptr": "*i32",
              "tp_ptr": "*fp32", "coef_ptr": "*fp32", "o_ptr": "*bf16", "state_ptr": "*fp32"}
    products = {"w_ptr": "*fp16", "u_ptr": "*fp16", "usc_ptr": "*fp32", "kd_ptr": "*fp16",
                "decay_ptr": "*fp32", "qe_ptr": "*fp16", "hs_ptr": "*fp16", "hsc_ptr": "*fp32",
                "t_ptr": "*fp16", "tsc_ptr": "*fp32"}
    types = rows | ints | tables | products
    shape = {"H": 64, "D": 128, "C": 64}
    strided = ("sq", "sk", "sv", "sg", "so", "st_slot", "st_head")
    return {"intra": (types, shape, kda_chunk.INTRA_WARPS, 1, strided),
            "solve": (types, shape, kda_chunk.SOLVE_WARPS, 1, ()),
            "rows": (types, shape | {"BK": kda_chunk.BK}, kda_chunk.ROWS_WARPS, 1, strided),
            "": (types, shape | {"BV": kda_chunk.BV}, kda_chunk.WALK_WARPS, kda_chunk.WALK_STAGES,
                 strided),
            "out": (types, shape | {"BV": kda_chunk.BV, "BVO": kda_chunk.OUT_BV},
                    kda_chunk.OUT_WARPS, 1, strided)}


@pytest.mark.parametrize("kernel", ["intra", "solve", "rows", "", "out"])
def test_kda_chunk_kernels_fit_shared_memory(kernel: str, tmp_path) -> None:
    """The chunked KDA prefill's kernels (the walk with its stages of fp16 products)."""
    with overrides(interpret=False):
        source = kda_chunk.source("probe", kda_chunk.KDAChunkSpec(64, 128))
    types, consts, warps, stages, strided = _kda_chunk_kernels()[kernel]
    name = f"probe_{kernel}" if kernel else "probe"
    k = _sm90(tmp_path, source, name, types, consts, warps, stages, strided)
    assert k["shared"] <= SM90_SHARED, k
    if not kernel:
        assert k["async_copies"] > 0, k  # the walk loads the next chunk's products ahead



@pytest.mark.parametrize("rows", [1, 40, 512])  # GEMV; tensor-core tiles; the wide step's GEMM
def test_shared_down_with_routed_addend_pipelines(rows: int, tmp_path) -> None:
    """GLM-5.3-Flash's shared expert down projection with the routed output added and hc_post
    (a wide step: the GEMM storing result + addend to y) as `matmul_launch.launch` runs it."""
    spec = matmul.MatmulSpec(k=2048, n=4096, epilogue="hc_post", hc=4, addend=True)
    wide = rows > matmul.SPLIT_ROWS
    gemm = matmul.split_spec(spec) if wide else spec
    t = matmul.tiles(gemm, rows)
    with overrides(interpret=False):
        source = matmul.source("probe", spec)
    out = "*bf16" if wide else "*fp32"
    types = {"x_ptr": "*bf16", "w_ptr": "*bf16", "out_ptr": out, "add_ptr": "*bf16",
             "stream_ptr": "*bf16" if wide else "*fp32", "post_ptr": "*fp32",
             "comb_ptr": "*fp32"} | {n: "i32" for n in (
                 "rows", "sx_t", "so_t", "so_h", "sa_t", "sst_t", "sst_h", "sp_t", "sc_t", "sc_i")}
    consts = {"BLOCK_M": t.block_m, "BLOCK_N": t.block_n, "BLOCK_K": t.block_k,
              "GROUP_M": t.group_m, "GEMV": t.gemv}
    k = _sm90(tmp_path, source, "probe_y" if wide else "probe", types, consts, t.num_warps,
              t.num_stages, ("sx_t", "so_t", "so_h", "sa_t", "sst_t", "sst_h"))
    assert k["shared"] <= SM90_SHARED and k["async_copies"] > 0, (rows, t, k)


LLAMA_SITE = hc_pre.HCPreSpec(4, 4096, 1e-5, 1e-6, 20, 1e-5)  # llama bench's sites


@pytest.mark.parametrize("kind", ["down", "gate_up", "q_k_v"])
def test_formed_sites_pipeline_without_spills(kind: str, tmp_path) -> None:
    """llama bench's one-row GEMVs around a formed site (form_sites): down with hc_post writing
    the next site's partials and stream parts, and the GEMVs that form a site's y from those
    parts (2n A rows, their Gram, one more program for the gates) as `matmul_launch.launch` runs
    them: the weight stream stays pipelined and nothing spills."""
    spec = {"down": matmul.MatmulSpec(12288, 4096, epilogue="hc_post", hc=4, site=LLAMA_SITE,
                                      site_parts=True),
            "gate_up": matmul.MatmulSpec(4096, 24576, epilogue="swiglu", site_in=LLAMA_SITE),
            "q_k_v": matmul.MatmulSpec(4096, 6144, site_in=LLAMA_SITE)}[kind]
    t = matmul.tiles(spec, 1)
    with overrides(interpret=False):
        source = matmul.source("probe", spec)
    ptrs = ("x_ptr", "w_ptr", "out_ptr", "parts_ptr", "stream_ptr", "post_ptr", "comb_ptr",
            "fn_ptr", "part_ptr", "base_ptr", "scale_ptr", "spost_ptr", "scomb_ptr")
    types = {p: "*bf16" if p in ("x_ptr", "w_ptr", "parts_ptr", "fn_ptr") else "*fp32"
             for p in ptrs}
    if kind != "down":
        types["out_ptr"] = "*bf16"
    ints = ("rows", "sx_t", "so_t", "so_h", "sst_t", "sst_h", "sp_t", "sc_t", "sc_i", "s_fn",
            "s_comb_i")
    consts = {"BLOCK_M": t.block_m, "BLOCK_N": t.block_n, "BLOCK_K": t.block_k,
              "GROUP_M": t.group_m, "GEMV": t.gemv}
    consts |= {"SITE": True} if kind == "down" else {"FORM": True}
    k = _sm90(tmp_path, source, "probe", types | {n: "i32" for n in ints}, consts, t.num_warps,
              t.num_stages, ("sx_t", "so_t", "so_h", "sst_t", "sst_h", "s_fn"))
    assert k["shared"] <= SM90_SHARED and k["spill_bytes"] == 0 and k["async_copies"] > 0, k
    print(kind, k)


def test_formed_site_parts_kernel_does_not_spill(tmp_path) -> None:
    """The first site's parts at one row (hc_pre's parts kernel, site_programs programs of
    site_block columns) at llama bench's size."""
    with overrides(interpret=False):
        source = hc_pre.source("probe", LLAMA_SITE)
    types = {"x_ptr": "*fp32", "fn_ptr": "*bf16", "part_ptr": "*fp32", "parts_ptr": "*bf16",
             "sx_stream": "i32", "s_fn": "i32"}
    k = _sm90(tmp_path, source, hc_pre.parts_name("probe"), types,
              {"BLOCK_N": matmul.site_block(LLAMA_SITE.d)}, hc_pre.FUSED_WARPS, 1,
              ("sx_stream", "s_fn"))
    assert k["shared"] <= SM90_SHARED and k["spill_bytes"] == 0, k
    print(k)


def test_wide_apply_keeps_two_programs_a_multiprocessor(tmp_path) -> None:
    """A wide hc_pre at llama bench's site: the apply's programs (a row each, 16 warps) within
    64 registers a thread, so two stay resident, and the projection pipelines without spills."""
    with overrides(interpret=False):
        source = hc_pre.source("probe", LLAMA_SITE)
    types = {n: "*fp32" for n in ("x_ptr", "base_ptr", "scale_ptr", "post_ptr", "comb_ptr",
                                  "part_ptr")}
    types |= {"fn_ptr": "*bf16", "y_ptr": "*bf16"}
    types |= {n: "i32" for n in hc_pre.signature(LLAMA_SITE) if not n.endswith("_ptr")}
    strides = ("sx_row", "sx_stream", "s_fn", "sy_row")
    apply = _sm90(tmp_path, source, "probe_apply", types, {}, hc_pre.APPLY_WARPS, 1, strides)
    assert apply["registers"] <= 64 and apply["spill_bytes"] == 0, apply
    proj = _sm90(tmp_path, source, "probe_proj", types, {}, hc_pre.PROJ_WARPS,
                 hc_pre.PROJ_STAGES, strides)
    assert proj["spill_bytes"] == 0 and proj["async_copies"] > 0, proj
    print(apply, proj)


@pytest.mark.parametrize("few", [True, False])
def test_few_row_finish_does_not_spill(few: bool, tmp_path) -> None:
    """hc_pre's finish of 2 to WIDE_ROWS rows at llama bench's site, in the streams form (up
    to FEW_ROWS rows, FEW_WARPS warps) and the row form (FINISH_WARPS warps): no spills."""
    with overrides(interpret=False):
        source = hc_pre.source("probe", LLAMA_SITE)
    types = {n: "*fp32" for n in ("x_ptr", "base_ptr", "scale_ptr", "post_ptr", "comb_ptr",
                                  "part_ptr")}
    types |= {"fn_ptr": "*bf16", "y_ptr": "*bf16"}
    types |= {n: "i32" for n in hc_pre.signature(LLAMA_SITE) if not n.endswith("_ptr")}
    warps = hc_pre.FEW_WARPS if few else hc_pre.FINISH_WARPS
    k = _sm90(tmp_path, source, "probe_finish", types, {"FEW": few}, warps, 1,
              ("sx_row", "sx_stream", "s_fn", "sy_row"))
    assert k["registers"] <= 128 and k["spill_bytes"] == 0, k
    print(k)


SELECT_TYPES = {"sc_ptr": "*fp32", "slot_ptr": "*i64", "pos_ptr": "*i64", "out_ptr": "*i32",
                "hist_ptr": "*i32", "state_ptr": "*i32", "sure_ptr": "*i32", "cnt_ptr": "*i32",
                "cand_ptr": "*i32", "ssc": "i32", "so": "i32", "scand": "i32",
                "npools": "i32", "segs_cap": "i32"}


@pytest.mark.parametrize("kernel, copies", [("cands", 1), ("cands", 4), ("write", 1),
                                            ("write", 4)])
def test_dsa_select_kernels_compile_without_spills(kernel: str, copies: int, tmp_path) -> None:
    """The segmented select's kernels at GLM-5.3-Flash's size compile in their GPU form (the PDL
    wait in), each write program holding its row's candidates' keys in registers: ptxas gives
    write 72 registers, cands 80, neither spilling (the ticketed cands before: 128 registers
    and 4 bytes of spill)."""
    spec = DSASpec(32, 128, 2048, 4, True, 64)
    with overrides(interpret=False):
        source = dsa_emitter.source("probe", spec)
    k = _sm90(tmp_path, source, f"probe_{kernel}", SELECT_TYPES,
              {"GB": dsa_select.GB, "CP": copies}, dsa_select.WARPS, 3)
    assert k["registers"] <= 128 and k["spill_bytes"] == 0, k
