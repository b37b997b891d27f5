"""The mHC pre-site emitter against semantics.hc.hc_pre (fp64): n = 4 and n = 2, 20 Sinkhorn
iterations, widths that are not powers of two (one and several K blocks per stream), 1 to 70 rows
(the one launch; projection + finish in the streams form at 5 rows and the row form at 20;
projection + gates + apply, WIDE_ROWS lowered to 32, at 33 and 70 rows: one and two projection
row blocks), with and without the folded site
norm, rows in one or several chunks, row-strided X and y, rows past `rows` untouched. CPU:
Triton's interpreter in fp32; GPU (`gpu` mark): bf16 fn at D = 4096 and 6144 on the H200,
relative error."""

from __future__ import annotations

import math

import pytest
import torch

from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters import hc_pre as hc_pre_emitter
from hyperloom.codegen.emitters import hc_pre_launch
from hyperloom.codegen.emitters.hc_pre import HCPreSpec, kernel_names, source
from hyperloom.codegen.emitters.hc_pre_launch import launch, scratch
from hyperloom.config import CONFIG
from hyperloom.ir import ops
from hyperloom.ir.semantics import Ctx, hc
from tests.tolerances import assert_close, assert_rel

WIDE = 32  # the CPU tests' WIDE_ROWS: more rows take projection + gates + apply
SLACK = 3  # rows allocated past `rows`: the kernel must leave them untouched
PAD = 12  # extra columns of the wider buffers that strided views are cut from
FUSED = (1, 3)  # row counts run through the one-launch kernel; the others take two launches


class Case:
    """Fresh random operands (none zero) and NaN-poisoned outputs for one launch."""

    def __init__(self, spec: HCPreSpec, rows: int, device: str, w_dtype: torch.dtype,
                 strided: bool, seed: int) -> None:
        self.spec, self.rows, self.device, self.strided = spec, rows, device, strided
        self.gen = torch.Generator().manual_seed(seed)
        n, d, j = spec.n, spec.d, (2 + spec.n) * spec.n
        alloc = rows + SLACK
        self.x = self.wide(torch.randn((alloc, n, d + PAD), generator=self.gen) * 1.7)
        fn = torch.randn((j, n * d), generator=self.gen) / math.sqrt(n * d)
        self.fn = fn.to(device, w_dtype)
        self.base = (torch.randn(j, generator=self.gen) * 0.5).to(device)
        self.scale = (torch.rand(3, generator=self.gen) + 0.5).to(device)
        y_dtype = w_dtype if spec.out_eps is not None else torch.float32  # as the engine does
        self.y = self.wide(torch.full((alloc, d + PAD), float("nan"), dtype=y_dtype))
        self.post = torch.full((alloc, n), float("nan"), device=device)
        self.comb = torch.full((alloc, n, n), float("nan"), device=device)
        self.ow = None  # the site norm's weight (spec.out_weight)
        if spec.out_weight:
            self.ow = (torch.rand(d, generator=self.gen) + 0.5).to(device, w_dtype)

    def wide(self, t: torch.Tensor) -> torch.Tensor:
        """A column slice of t (row-strided) or a contiguous copy of that slice."""
        t = t.to(self.device)[..., 4: 4 + self.spec.d]
        return t if self.strided else t.contiguous()

    def run(self) -> None:
        src = source("hc_pre", self.spec, header="test")
        kernels = tuple(load(src, n, self.device) for n in kernel_names("hc_pre"))
        part, count = scratch(self.spec, self.rows, self.device)
        part.fill_(float("nan"))  # every partial a finish reads, a projection wrote
        fused = self.rows in FUSED
        if not fused:  # the two-kernel path must not touch the counters (nor take a ticket)
            count.fill_(-1)
        for _ in range(2):  # the counters are left zeroed: a second launch is the same
            launch(kernels, self.spec, x=self.x, fn=self.fn, base=self.base, scale=self.scale,
                   y=self.y, post=self.post, comb=self.comb, part=part, count=count,
                   rows=self.rows, fused=fused, ow=self.ow)
        assert (count == (0 if fused else -1)).all(), "ticket counters not reset, or touched"

    def reference(self, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        s, r = self.spec, self.rows
        at = ops.HCPreAttrs(n=s.n, norm_eps=s.norm_eps, hc_eps=s.hc_eps, iters=s.iters,
                            out_eps=s.out_eps)
        w = None if self.ow is None else self.ow.to(dtype)
        return hc.hc_pre(Ctx(dtype, None, ()), at, self.x[:r].to(dtype), self.fn.to(dtype),
                         self.base.to(dtype), self.scale.to(dtype), w)

    def untouched(self) -> None:
        for name in ("y", "post", "comb"):
            assert getattr(self, name)[self.rows:].isnan().all(), f"{name}: slack rows written"


def _spec(n: int, d: int, out: str) -> HCPreSpec:
    """out: "" (y plain), "norm" (the site norm, its weight folded away), "weight" (the norm
    and its weight: a MoE site's)."""
    return HCPreSpec(n=n, d=d, norm_eps=1e-6, hc_eps=1e-6, iters=20,
                     out_eps=1e-5 if out else None, out_weight=out == "weight")


OUTS = ["", "norm", "weight"]


@pytest.mark.parametrize("n,d", [(4, 300), (2, 200)])
@pytest.mark.parametrize("rows", [1, 3, 5, 20, 33, 70])
@pytest.mark.parametrize("sms", [132, 1])  # 1: fewer splits than K blocks, several per split
@pytest.mark.parametrize("out", OUTS)
def test_hc_pre(n: int, d: int, rows: int, sms: int, out: str, monkeypatch) -> None:
    monkeypatch.setattr(CONFIG, "sms", sms)
    monkeypatch.setattr(hc_pre_emitter, "WIDE_ROWS", WIDE)
    spec = _spec(n, d, out)
    case = Case(spec, rows, "cpu", torch.float32, strided=rows != 5, seed=100 * n + rows)
    case.run()
    y, post, comb = case.reference(torch.float64)
    assert_close(case.y[:rows], y, torch.float32, "y")
    assert_close(case.post[:rows], post, torch.float32, "post")
    assert_close(case.comb[:rows], comb, torch.float32, "comb")
    case.untouched()
    # the Sinkhorn result is (nearly) doubly stochastic: a missed iteration would show here
    assert_close(case.comb[:rows].sum(-2), torch.ones(rows, n), torch.float32, "column sums")


@pytest.mark.parametrize("name, bad, message", [
    ("comb", lambda c: c.comb[:, :3, :3], r"hc_pre comb: \[>= 5, 4, 4\].*\(8, 3, 3\)"),
    ("x", lambda c: c.x[:4], r"hc_pre x: \[>= 5, 4, 64\].*\(4, 4, 64\)"),
    ("fn", lambda c: c.fn.t(), r"hc_pre fn: \[24, 256\] with a contiguous last dim"),
    ("post", lambda c: c.post.double(), r"hc_pre post: float32, got torch.float64"),
    ("part", lambda c: c.part[:10], r"hc_pre scratch for 5 rows: partials >= \d+"),
])
def test_bad_operand_is_named_before_launch(name: str, bad, message: str) -> None:
    spec = HCPreSpec(n=4, d=64, norm_eps=1e-6, hc_eps=1e-6, iters=20)
    case = Case(spec, 5, "cpu", torch.float32, strided=False, seed=3)
    case.part, count = scratch(spec, 5, "cpu")
    ops = {"x": case.x, "fn": case.fn, "base": case.base, "scale": case.scale, "y": case.y,
           "post": case.post, "comb": case.comb, "part": case.part}
    ops[name] = bad(case)
    with pytest.raises(ValueError, match=message):
        launch((None,) * 5, spec, **ops, count=count, rows=5, fused=False)
    assert case.y.isnan().all() and case.post.isnan().all(), "nothing may run"


def test_norm_weight_is_checked_before_launch() -> None:
    spec = _spec(4, 64, "weight")
    case = Case(spec, 5, "cpu", torch.float32, strided=False, seed=4)
    part, count = scratch(spec, 5, "cpu")
    ops = dict(x=case.x, fn=case.fn, base=case.base, scale=case.scale, y=case.y, post=case.post,
               comb=case.comb, part=part, count=count, rows=5, fused=False)
    with pytest.raises(ValueError, match=r"norm weight \(ow=\) is missing"):
        launch((None,) * 5, spec, **ops)
    with pytest.raises(ValueError, match=r"norm weight: contiguous \[64\], got \(63,\)"):
        launch((None,) * 5, spec, **ops, ow=case.ow[:63])
    with pytest.raises(ValueError, match="a norm weight for a spec without one"):
        launch((None,) * 5, _spec(4, 64, "norm"), **ops, ow=case.ow)
    assert case.y.isnan().all(), "nothing may run"


@pytest.mark.parametrize("rows", [513, 600, 2048, 4096, 8192, 40000])
def test_wide_projection_runs_in_one_wave(rows: int) -> None:
    # as many K splits as keep every program of the projection resident at once (a second,
    # partial wave idled most of the GPU: 91 against 76 us at 4096 rows on the H200)
    e = hc_pre_emitter
    spec = HCPreSpec(n=4, d=4096, norm_eps=1e-6, hc_eps=1e-6, iters=20)
    block, blocks, rows_pad, splits = hc_pre_launch.layout(spec, rows, fused=False)
    slots, k_blocks = e.PROJ_RESIDENT * CONFIG.sms, 4 * 4096 // 128
    assert (block, blocks, rows_pad) == (e.PROJ_ROWS, -(-rows // block), blocks * block)
    assert blocks * splits <= max(slots, blocks), "more programs than one wave"
    assert splits == min(k_blocks, e.MAX_SPLITS) or blocks * (splits + 1) > slots, \
        "a split more would still fit"


@pytest.mark.parametrize("out", OUTS)
@pytest.mark.parametrize("rows", [5, 20, 40])  # the finish's two forms, the apply
@pytest.mark.parametrize("row_tile", [256, 16384])  # 16384: the one launch's row is one tile
def test_hc_pre_row_in_chunks(out: str, rows: int, row_tile: int, monkeypatch) -> None:
    """Rows of several finish or apply chunks (the bench widths are one or two), their 12
    splits' partials summed in three rounds by the finish and by the gates (the bench's take
    one)."""
    monkeypatch.setattr(hc_pre_emitter, "ROW_TILE", row_tile)
    monkeypatch.setattr(hc_pre_emitter, "GATE_SPLITS", 4)
    monkeypatch.setattr(hc_pre_emitter, "FEW_COLS", 128)
    monkeypatch.setattr(hc_pre_emitter, "FINISH_TILE", 256)
    monkeypatch.setattr(hc_pre_emitter, "SPLIT_BLOCK", 4)
    monkeypatch.setattr(hc_pre_emitter, "WIDE_ROWS", WIDE)
    spec = _spec(4, 300, out)
    case = Case(spec, rows, "cpu", torch.float32, strided=True, seed=7)
    case.run()
    y, post, comb = case.reference(torch.float64)
    assert_close(case.y[:rows], y, torch.float32, "y")
    assert_close(case.comb[:rows], comb, torch.float32, "comb")
    case.untouched()


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 7, 300, 2048])  # 2048: projection + gates + apply
@pytest.mark.parametrize("out", OUTS)
@pytest.mark.parametrize("d", [4096, 6144])  # 6144: the finish walks the row in two chunks
def test_hc_pre_gpu(rows: int, out: str, d: int) -> None:
    spec = _spec(4, d, out)
    case = Case(spec, rows, "cuda", torch.bfloat16, strided=True, seed=rows)
    case.run()
    y, post, comb = case.reference(torch.float32)
    assert_rel(case.y[:rows], y, 1e-2, "y")
    assert_rel(case.post[:rows], post, 1e-2, "post")
    assert_rel(case.comb[:rows], comb, 1e-2, "comb")
    case.untouched()
