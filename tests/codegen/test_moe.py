"""The MoE router and experts emitters against semantics.moe on fresh random inputs.

Router: grouped and ungrouped specs, the split-K GEMV, mid and wide tilings, and deliberate ties
(zero router rows score exactly sigmoid(0)): tied experts and tied groups go to the lowest index,
as the reference's stable sort does. Experts: the GEMV and grouped-GEMM tilings (forced), experts
hit by many rows and some by none, row tiles spanning an expert, the route kernel over several
chunks, padding rows skipped, bitwise-repeatable output. CPU: Triton's interpreter in fp32; GPU
(`gpu` mark): bf16 activations and experts at GLM-5.3-Flash-like sizes on the H200 against fp32.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters import moe_experts, moe_router
from hyperloom.codegen.emitters.moe_experts import ExpertsSpec
from hyperloom.codegen.emitters.moe_router import RouterSpec
from hyperloom.ir import ops
from hyperloom.ir.derive import join_bf16, pack_k, split_bf16
from hyperloom.ir.semantics import Ctx, moe
from tests.tolerances import assert_close, assert_rel

CTX = Ctx(torch.float32, None, ())


def _route(spec: RouterSpec, x, w, bias, rows: int):
    src = moe_router.source("router", spec, header="test")
    kerns = [load(src, n, x.device, "router") for n in moe_router.kernel_names("router")]
    weights = torch.full((rows + 2, spec.top_k), float("nan"), device=x.device)
    ids = torch.full((rows + 2, spec.top_k), -7, dtype=torch.int32, device=x.device)
    moe_router.launch(kerns, spec, x=x, w=split_bf16(w) if spec.split else w, bias=bias,
                      weights=weights, ids=ids, rows=rows,
                      part=moe_router.scratch(spec, rows, x.device))
    assert weights[rows:].isnan().all() and (ids[rows:] == -7).all(), "slack rows written"
    at = ops.RouterAttrs(spec.top_k, spec.n_group, spec.topk_group, spec.norm_topk_prob,
                         spec.scaling)
    want_w, want_ids = moe.moe_router(CTX, at, x[:rows].float(), w, bias)
    return weights[:rows], ids[:rows], want_w, want_ids


def _router_inputs(spec: RouterSpec, rows: int, seed: int, device="cpu", dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((rows, spec.hidden + 3), generator=gen)[:, :spec.hidden]  # strided rows
    w = torch.randn((spec.experts, spec.hidden), generator=gen) / spec.hidden ** 0.5
    bias = torch.randn(spec.experts, generator=gen) * 0.1
    return x.to(device, dtype), w.to(device), bias.to(device)


ROUTERS = [RouterSpec(8, 64, 2, 2, 1, True, 2.5),  # GLM tiny
           RouterSpec(16, 48, 4, 4, 2, True, 2.5),
           RouterSpec(24, 96, 3, 3, 3, False, 1.0),  # every group kept, no renormalisation
           RouterSpec(36, 300, 8, 1, 1, True, 2.5)]  # one group of a non-power-of-two size


@pytest.mark.parametrize("spec", ROUTERS, ids=lambda s: f"E{s.experts}G{s.n_group}k{s.top_k}")
@pytest.mark.parametrize("rows", [1, 5, 20, 70])  # split-K GEMV, GEMV, mid and wide tiles
def test_router(spec: RouterSpec, rows: int) -> None:
    x, w, bias = _router_inputs(spec, rows, seed=rows + spec.experts)
    got_w, got_ids, want_w, want_ids = _route(spec, x, w, bias, rows)
    assert torch.equal(got_ids, want_ids), (got_ids, want_ids)
    assert_close(got_w, want_w, torch.float32, f"router weights {spec}")


def test_router_wide_tiles(monkeypatch) -> None:
    """The 128 x 64 tiles of long prefills (from WIDE_ROWS rows), H split in three here."""
    monkeypatch.setattr(moe_router, "WIDE_ROWS", 100)
    spec = ROUTERS[3]
    t = moe_router.tiles(spec, 130)
    assert t.bm == 128 and moe_router._split(spec, t)[1] == 3
    x, w, bias = _router_inputs(spec, 130, seed=11)
    got_w, got_ids, want_w, want_ids = _route(spec, x, w, bias, 130)
    assert torch.equal(got_ids, want_ids)
    assert_close(got_w, want_w, torch.float32, "router weights, wide tiles")


def test_router_split_weight_is_exact_and_checked() -> None:
    """split_bf16 terms add up to W exactly; a split router refuses fp32 W and fp32 rows."""
    w = torch.randn(36, 300, dtype=torch.float32)
    assert torch.equal(join_bf16(split_bf16(w)), w)
    spec = dataclasses.replace(ROUTERS[3], split=True)
    x, _, bias = _router_inputs(spec, 4, seed=2)
    args = dict(bias=bias, weights=torch.empty(4, 8), ids=torch.empty(4, 8, dtype=torch.int32),
                part=moe_router.scratch(spec, 4, "cpu"), rows=4)
    with pytest.raises(ValueError, match=r"router W: contiguous split_bf16 terms \[3, 36, 300\]"):
        moe_router.launch([None] * 2, spec, x=x.bfloat16(), w=w, **args)
    with pytest.raises(ValueError, match="router x: bf16 rows for split_bf16 W terms"):
        moe_router.launch([None] * 2, spec, x=x, w=split_bf16(w), **args)


@pytest.mark.parametrize("topk_group, top_k, want", [(2, 3, [1, 2, 5]), (1, 3, [1, 2, 0]),
                                                     (2, 4, [1, 2, 5, 6])])
def test_router_ties_go_to_the_lowest_index(topk_group: int, top_k: int, want) -> None:
    """Experts 1, 2, 5, 6, 9, 13 have zero router rows and bias 1: they tie at 1.5 (sigmoid(0)
    + 1), above every other expert. Groups of 4: groups 0 and 1 tie at 3 (two tied experts
    each), above groups 2 and 3 (one each). Keeping one group keeps group 0, and its third
    choice is the best of its untied experts 0 and 3 (made 0 here)."""
    spec = RouterSpec(16, 40, top_k, 4, topk_group, True, 2.5)
    x, w, bias = _router_inputs(spec, 3, seed=11)
    tied = [1, 2, 5, 6, 9, 13]
    w[tied], bias[tied] = 0.0, 1.0
    bias[0], bias[3] = 0.45, -0.6  # expert 0 beats 3 whatever x, and loses to the tied
    got_w, got_ids, want_w, want_ids = _route(spec, x, w, bias, 3)
    assert want_ids.tolist() == [want] * 3, want_ids  # the reference's rule, spelled out
    assert torch.equal(got_ids, want_ids), (got_ids, want_ids)
    assert_close(got_w, want_w, torch.float32, "router weights with ties")


def test_router_all_tied_takes_the_first_experts() -> None:
    spec = RouterSpec(12, 32, 3, 3, 2, True, 2.5)
    x, _, _ = _router_inputs(spec, 4, seed=5)
    got_w, got_ids, want_w, want_ids = _route(spec, x, torch.zeros(12, 32), torch.zeros(12), 4)
    assert got_ids.tolist() == want_ids.tolist() == [[0, 1, 2]] * 4
    assert_close(got_w, torch.full((4, 3), 2.5 / 3), torch.float32, "equal weights")


# ---------------------------------------------------------------- experts


def _experts_inputs(spec: ExpertsSpec, rows: int, seed: int, device="cpu",
                    dtype=torch.float32, hot: int | None = None):
    """Random x, weights and distinct ids per row (expert `hot`, if given, in every row),
    made on `device`; weights scaled so the output is O(1)."""
    gen = torch.Generator(device).manual_seed(seed)
    e, h, i = spec.experts, spec.hidden, spec.inter
    f = dict(generator=gen, device=device)
    x = torch.randn((rows, h + 5), **f)[:, :h]  # strided rows
    ids = torch.stack([torch.randperm(e, **f)[:spec.top_k] for _ in range(rows)])
    if hot is not None:
        ids[~(ids == hot).any(1), 0] = hot
    wts = torch.rand((rows, spec.top_k), **f)
    wg, wu = (torch.randn((e, i, h), **f) * (2 / h ** 0.5) for _ in range(2))
    wd = torch.randn((e, h, i), **f) / i ** 0.5
    return x.to(dtype), wts, ids.int(), wg.to(dtype), wu.to(dtype), wd.to(dtype)


def _experts(spec: ExpertsSpec, rows: int, inputs, gemv: bool | None,
             skip: torch.Tensor | None = None) -> torch.Tensor:
    x, wts, ids, wg, wu, wd = inputs
    src = moe_experts.source("experts", spec, header="test")
    kerns = [load(src, n, x.device, "experts") for n in moe_experts.kernel_names("experts")]
    out = torch.full((rows + 2, spec.hidden), float("nan"), dtype=x.dtype, device=x.device)
    work = moe_experts.scratch(spec, rows, x.dtype, x.device)
    wg, wu, wd = (pack_k(w) for w in (wg, wu, wd))
    moe_experts.launch(kerns, spec, x=x, weights=wts, ids=ids, wg=wg, wu=wu, wd=wd, out=out,
                       rows=rows, work=work, skip=skip, gemv=gemv)
    assert out[rows:].isnan().all(), "slack rows written"
    return out[:rows]


def _want(spec: ExpertsSpec, inputs) -> torch.Tensor:
    x, wts, ids, wg, wu, wd = inputs
    return moe.moe_experts(CTX, ops.ExpertsAttrs(spec.limit), x.double(), wts.double(), ids,
                           wg.double(), wu.double(), wd.double())


CASES = [  # spec, rows, hot expert: every expert hit, some unhit, one hit by every row
    (ExpertsSpec(8, 64, 32, 2, 10.0), 3, None),
    (ExpertsSpec(6, 48, 40, 3, None), 40, None),
    (ExpertsSpec(6, 48, 40, 3, 1.0), 23, 4),
    (ExpertsSpec(9, 40, 24, 2, 1.5), 2, 7),
]


@pytest.mark.parametrize("gemv", [True, False], ids=["gemv", "grouped"])
@pytest.mark.parametrize("spec, rows, hot", CASES)
def test_experts(spec: ExpertsSpec, rows: int, hot: int | None, gemv: bool) -> None:
    inputs = _experts_inputs(spec, rows, seed=rows * spec.experts, hot=hot)
    hit = inputs[2].unique().numel()
    assert hit == spec.experts or rows * spec.top_k < spec.experts, "cases cover both"
    got = _experts(spec, rows, inputs, gemv)
    assert_close(got, _want(spec, inputs), torch.float32, f"experts {spec} x{rows}")


def test_experts_wide_tiles_and_many_route_chunks(monkeypatch) -> None:
    """128-row tiles (over 64 rows an expert), the route kernel sorting 32 pairs at a time."""
    monkeypatch.setattr(moe_experts, "ROUTE_BLOCKS", (32, 32))
    spec = ExpertsSpec(4, 32, 16, 2, 10.0)
    inputs = _experts_inputs(spec, 150, seed=3)
    assert moe_experts.tiles(spec, 150).bm == 128
    got = _experts(spec, 150, inputs, None)
    assert_close(got, _want(spec, inputs), torch.float32, "experts, 128-row tiles")


def test_experts_part_filled_tiles_take_fewer_rows() -> None:
    """128-row tiles whose experts hold 20, 50, 100 and 170 rows: the row heights BM / 4, BM / 2,
    BM, and a full tile followed by a 42-row one, each checked against the reference."""
    spec = ExpertsSpec(4, 32, 16, 1, 10.0)
    inputs = list(_experts_inputs(spec, 340, seed=5))
    counts = torch.tensor([20, 50, 100, 170])
    ids = torch.repeat_interleave(torch.arange(4), counts)
    inputs[2] = ids[torch.randperm(340, generator=torch.Generator().manual_seed(6))][:, None]
    inputs[2] = inputs[2].int()
    assert moe_experts.tiles(spec, 340).bm == 128
    got = _experts(spec, 340, tuple(inputs), None)
    assert_close(got, _want(spec, tuple(inputs)), torch.float32, "experts, part-filled tiles")


@pytest.mark.parametrize("rows", [1, 16, 600, 1024, 4096, 16384])
@pytest.mark.parametrize("itemsize", [2, 4])
def test_pipelined_tiles_fit_their_shared_memory(rows: int, itemsize: int) -> None:
    """Every tiling's pipelined operand tiles fit its budget: 128-row prefill tiles of 16-bit
    operands may take more than the others (a 4th stage), never more than PREFILL_SMEM."""
    spec = ExpertsSpec(288, 4096, 2048, 8, 7.0)
    t = moe_experts.tiles(spec, rows, None, itemsize, itemsize)
    used = t.stages * t.bk * (t.bm + max(2 * t.bn, t.bn_down)) * itemsize
    budget = moe_experts.smem_budget(t.bm, itemsize, itemsize)
    assert t.stages >= 2 and used <= budget <= 227 * 1024, (t, used)


def test_route_groups_pairs_stably_over_chunks(monkeypatch) -> None:
    """The pairs of each expert in pair order, experts in order; counts and tile ends."""
    monkeypatch.setattr(moe_experts, "ROUTE_BLOCKS", (16, 16))
    spec = ExpertsSpec(7, 16, 16, 3, None)
    inputs = _experts_inputs(spec, 30, seed=4)
    ids = inputs[2]
    ids[3, 1] = 99  # a bad id: never computed
    src = moe_experts.source("experts", spec)
    kerns = [load(src, n, "cpu", "experts") for n in moe_experts.kernel_names("experts")]
    work = moe_experts.scratch(spec, 30, torch.float32, "cpu")
    wg, wu, wd = (pack_k(w) for w in inputs[3:])
    moe_experts.launch(kerns, spec, x=inputs[0], weights=inputs[1], ids=ids, wg=wg, wu=wu,
                       wd=wd, out=torch.empty_like(inputs[0]), rows=30,
                       work=work, gemv=True)
    flat = ids.flatten().long()
    order = torch.sort(flat, stable=True).indices[:89]  # id 99 sorts last
    assert torch.equal(work.order[:89].long(), order)
    counts = torch.bincount(flat[flat < 7], minlength=7)
    assert torch.equal(work.meta[0, :7].long(), counts)
    assert torch.equal(work.meta[2, :7].long(), torch.cumsum(-(-counts // 16), 0))


def test_experts_skip_padding_rows_and_repeat_bitwise() -> None:
    spec = ExpertsSpec(8, 64, 32, 2, 10.0)
    inputs = _experts_inputs(spec, 6, seed=9)
    skip = torch.tensor([0, 3, 1, 2, -1, -1], dtype=torch.int32)
    got = _experts(spec, 6, inputs, True, skip=skip)
    want = _want(spec, inputs)
    want[4:] = 0.0
    assert_close(got, want, torch.float32, "experts with padding rows")
    assert torch.equal(got, _experts(spec, 6, inputs, True, skip=skip)), "not repeatable"


def test_experts_bad_shape_is_named() -> None:
    spec = ExpertsSpec(8, 64, 32, 2, 10.0)
    x, wts, ids, wg, wu, wd = _experts_inputs(spec, 2, seed=1)
    for bad in (wd, pack_k(wd).transpose(2, 3)):  # not packed; packed but not contiguous
        with pytest.raises(ValueError, match=r"experts wd: contiguous \[8, 1, 64, 32\] "
                                             r"\(ir.derive.pack_k of \[8, 64, 32\]\)"):
            moe_experts.launch([None] * 5, spec, x=x, weights=wts, ids=ids, wg=pack_k(wg),
                               wu=pack_k(wu), wd=bad, out=torch.empty_like(x), rows=2,
                               work=moe_experts.scratch(spec, 2, x.dtype, "cpu"))


# ---------------------------------------------------------------- GPU (bf16)


@pytest.mark.gpu
@pytest.mark.parametrize("spec", [RouterSpec(288, 4096, 8, 1, 1, True, 2.5),
                                  RouterSpec(256, 2048, 8, 8, 4, True, 2.5)],
                         ids=["glm-flash", "grouped"])
@pytest.mark.parametrize("rows", [1, 16, 64, 4096])
@pytest.mark.parametrize("split", [False, True], ids=["w-fp32", "w-split"])
def test_router_gpu(spec: RouterSpec, rows: int, split: bool) -> None:
    """bf16 x: the choice may differ from the fp32 reference only between experts whose
    corrected scores agree to ~1e-5 (fp32 sums in another order), so compare chosen scores.
    W fp32 (split in the loop) or as split_bf16 terms (as compiled)."""
    spec = dataclasses.replace(spec, split=split)
    x, w, bias = _router_inputs(spec, rows, seed=rows, device="cuda", dtype=torch.bfloat16)
    got_w, got_ids, want_w, want_ids = _route(spec, x, w, bias, rows)
    s = torch.sigmoid(x.float() @ w.T)
    c = s + bias
    assert (c.gather(1, got_ids.long()) - c.gather(1, want_ids.long())).abs().max() < 1e-5
    assert (got_ids == want_ids).all(1).float().mean() > 0.99
    same = (got_ids == want_ids).all(1)
    assert_close(got_w[same], want_w[same], torch.float32, "router weights, bf16 x")


@pytest.mark.gpu
@pytest.mark.parametrize("spec", [ExpertsSpec(64, 2048, 768, 8, 10.0),
                                  ExpertsSpec(288, 4096, 1536, 8, 10.0)],
                         ids=["E64", "E288"])
@pytest.mark.parametrize("rows", [1, 16, 64, 1024, 4096])  # E288 1024: 64-row tiles
def test_experts_gpu(spec: ExpertsSpec, rows: int) -> None:
    inputs = _experts_inputs(spec, rows, seed=rows, device="cuda", dtype=torch.bfloat16,
                             hot=3 if rows == 64 else None)
    got = _experts(spec, rows, inputs, None)
    x, wts, ids, wg, wu, wd = inputs
    want = moe.moe_experts(CTX, ops.ExpertsAttrs(spec.limit), x.float(), wts, ids, wg.float(),
                           wu.float(), wd.float())
    assert_rel(got.float(), want, 1e-2, f"experts bf16 {spec} x{rows}")
