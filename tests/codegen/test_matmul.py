"""The projection-GEMM emitter against an fp64 torch reference written here from its contract:
every prologue x epilogue, both paths (GEMV for rows <= 16, tensor-core tiles above), odd and
power-of-two sizes, row-strided views and in-place updates; mean_rmsnorm's norm kernel + GEMM
pair through a poisoned scratch buffer. CPU: Triton's interpreter in fp32; GPU (`gpu` mark):
bf16 on the H200, judged by relative error."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters.hc_pre import HCPreSpec, gram, projections
from hyperloom.codegen.emitters.kda_gate import KDAGateSpec
from hyperloom.codegen.emitters.matmul import (
    SPLIT_ROWS,
    MatmulSpec,
    gemm_spec,
    kernel_names,
    source,
    tiles,
)
from hyperloom.codegen.emitters.matmul_launch import MEAN_ROWS, launch, scratch, scratch_y
from hyperloom.config import overrides
from tests.tolerances import assert_close, assert_rel

PROLOGUES = ("none", "rmsnorm", "mean_rmsnorm")
EPILOGUES = ("store", "swiglu", "residual", "hc_post")
SLACK = 5  # rows allocated past `rows`: the kernel must leave them untouched
PAD = 24  # extra columns of the wider buffers that strided views are cut from


def spec_for(k: int, n: int, prologue: str, epilogue: str, limit: float | None = 0.75,
             streams: int = 3, hc: int = 4, group: int = 16, head_dim: int = 16,
             lower_bound: float | None = -5.0, addend: bool = False) -> MatmulSpec:
    gate = KDAGateSpec(n // head_dim, head_dim, lower_bound) if epilogue == "kda_gate" else None
    return MatmulSpec(k=k, n=n, prologue=prologue, eps=1e-5, streams=streams, epilogue=epilogue,
                      limit=limit if epilogue == "swiglu" else None, hc=hc,
                      group=group if "gated_rmsnorm" == prologue or epilogue == "gated_norm"
                      else 0, gate=gate, addend=addend)


class Case:
    """Fresh random operands for one launch; `view` cuts x, out and stream from wider buffers."""

    def __init__(self, spec: MatmulSpec, rows: int, device: str, act: torch.dtype, view: bool,
                 seed: int) -> None:
        self.spec, self.rows, self.view = spec, rows, view
        self.gen = torch.Generator().manual_seed(seed)
        self.device, alloc = device, rows + SLACK
        k, n = spec.k, spec.n
        if spec.prologue == "mean_rmsnorm":
            self.x = self.randn(alloc, spec.streams, k, dtype=torch.float32)
        else:  # rmsnorm inputs off unit scale, so a missing normalisation shows
            self.x = self.randn(alloc, k, dtype=act, scale=2.5 if spec.prologue == "rmsnorm" else 1)
        self.w = self.randn(n, k, dtype=act, scale=1 / math.sqrt(k), view=False)
        self.gate = self.nw = None
        if spec.prologue == "gated_rmsnorm":  # x off unit scale per group, gates both ways
            self.x = self.randn(alloc, k, dtype=act, scale=3.0)
            self.gate = self.randn(alloc, k, dtype=act, scale=2.0)
            self.nw = (0.5 + self.uniform(spec.group)).to(act)
        self.normed = None
        if spec.epilogue == "gated_norm":  # rows off unit scale per group; the GEMM is the gate
            self.normed = self.randn(alloc, n, dtype=act, scale=3.0)
            self.nw = (0.5 + self.uniform(spec.group)).to(act)
        o_shape = (alloc, spec.n_out)
        if spec.epilogue == "hc_post":
            o_shape = (alloc, spec.hc, spec.n_out)
        self.out = self.nan(o_shape, act if spec.epilogue in ("store", "swiglu", "gated_norm")
                            else torch.float32)
        self.dt = self.alog = None
        if spec.gate is not None:  # f_b's gate: biases and head rates both ways around 1
            self.dt = self.randn(n, dtype=torch.float32, scale=0.5, view=False)
            self.alog = self.randn(spec.gate.heads, dtype=torch.float32, scale=0.5, view=False)
        self.stream = self.post = self.comb = None
        if spec.epilogue in ("residual", "hc_post"):
            self.stream = self.randn(*o_shape, dtype=torch.float32)
        if spec.epilogue == "hc_post":
            self.post = self.uniform(alloc, spec.hc) * 2
            self.comb = self.uniform(alloc, spec.hc, spec.hc)
        # a MoE block's routed output, in the activations' dtype, on the result's scale
        self.addend = self.randn(alloc, spec.n_out, dtype=act) if spec.addend else None
        # mean_rmsnorm's normed rows: poisoned, so a GEMM reading rows the norm kernel did not
        # write (or a norm kernel writing past `rows`) shows
        self.h = scratch(spec, alloc, act, device)
        if self.h is not None:
            self.h.fill_(float("nan"))
        self.y = scratch_y(spec, alloc, act, device)  # a wide hc_post step's result rows
        if self.y is not None:
            self.y.fill_(float("nan"))

    def randn(self, *shape: int, dtype: torch.dtype, scale: float = 1.0,
              view: bool | None = None) -> torch.Tensor:
        view = self.view if view is None else view
        wide = (*shape[:-1], shape[-1] + PAD) if view else shape
        t = (torch.randn(wide, generator=self.gen, dtype=torch.float64) * scale)
        t = t.to(device=self.device, dtype=dtype)
        return t[..., 8: 8 + shape[-1]] if view else t

    def uniform(self, *shape: int) -> torch.Tensor:
        return torch.rand(shape, generator=self.gen, dtype=torch.float64).float().to(self.device)

    def nan(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        wide = (*shape[:-1], shape[-1] + PAD) if self.view else shape
        t = torch.full(wide, float("nan"), dtype=dtype, device=self.device)
        return t[..., 8: 8 + shape[-1]] if self.view else t

    def launch(self, mean: torch.Tensor | None = None) -> None:
        name = f"mm_{self.spec.prologue}_{self.spec.epilogue}"
        if self.spec.mean_out or self.spec.mean_in:
            name += "_mean_out" if self.spec.mean_out else "_mean_in"
        src = source(name, self.spec)
        kernels = tuple(load(src, n, self.device) for n in kernel_names(name, self.spec))
        launch(kernels, self.spec, x=self.x, w=self.w, out=self.out, rows=self.rows,
               stream=self.stream, post=self.post, comb=self.comb, h=self.h, y=self.y,
               gate=self.gate, nw=self.nw, dt=self.dt, alog=self.alog, addend=self.addend,
               normed=self.normed, mean=mean)


def reference(spec: MatmulSpec, c: Case) -> torch.Tensor:
    """fp64 result for the first c.rows rows, straight from the contract's formulas."""
    t = c.rows
    x = c.x[:t].double()
    row = x.mean(1) if spec.prologue == "mean_rmsnorm" else x
    if spec.prologue == "gated_rmsnorm":
        row = gated_rows(c)
    y = row @ c.w.double().T
    if spec.prologue in ("rmsnorm", "mean_rmsnorm"):
        y = y / torch.sqrt((row * row).mean(-1, keepdim=True) + spec.eps)
    if spec.epilogue == "store":
        return y
    if spec.epilogue == "swiglu":
        gate, up = y[:, : spec.n // 2], y[:, spec.n // 2:]
        if spec.limit is not None:
            gate = gate.clamp(max=spec.limit)
            up = up.clamp(-spec.limit, spec.limit)
        return gate / (1 + torch.exp(-gate)) * up
    if spec.epilogue == "kda_gate":
        return kda_gate_of(spec.gate, y + c.dt.double(), c.alog.double())
    if spec.epilogue == "gated_norm":
        return group_normed(c.normed[:t], c.nw, spec) * torch.sigmoid(y)
    if spec.addend:
        y = y + c.addend[:t].double()
    s = c.stream[:t].double()
    if spec.epilogue == "residual":
        return s + y
    post, comb = c.post[:t].double(), c.comb[:t].double()
    cols = [post[:, j, None] * y + sum(comb[:, i, j, None] * s[:, i] for i in range(spec.hc))
            for j in range(spec.hc)]
    return torch.stack(cols, 1)


def kda_gate_of(gate: KDAGateSpec, x: torch.Tensor, alog: torch.Tensor) -> torch.Tensor:
    """KDA's decay gate of biased rows x in fp64: each column at its head's rate exp(A_log)."""
    rate = alog.exp().repeat_interleave(gate.head_dim)
    if gate.lower_bound is not None:
        return gate.lower_bound * torch.sigmoid(rate * x)
    return -rate * torch.nn.functional.softplus(x)


def group_normed(x: torch.Tensor, nw: torch.Tensor, spec: MatmulSpec) -> torch.Tensor:
    """Each group of x's rows RMS-normed in fp64, times the norm weight."""
    t = x.shape[0]
    x = x.double().reshape(t, -1, spec.group)
    return (x / torch.sqrt((x * x).mean(-1, keepdim=True) + spec.eps) * nw.double()).reshape(t, -1)


def gated_rows(c: Case) -> torch.Tensor:
    """gated_rmsnorm's rows in fp64: each group of x normed, times the weight and sigmoid(gate)."""
    return group_normed(c.x[:c.rows], c.nw, c.spec) * torch.sigmoid(c.gate[:c.rows].double())


def check_cpu(spec: MatmulSpec, rows: int, view: bool, seed: int) -> None:
    c = Case(spec, rows, "cpu", torch.float32, view, seed)
    want = reference(spec, c)
    c.launch()
    what = f"{spec.prologue}+{spec.epilogue} k={spec.k} n={spec.n} rows={rows} view={view}"
    assert_close(c.out[:rows], want, torch.float32, what)
    assert torch.isnan(c.out[rows:]).all(), f"{what}: wrote rows past `rows`"
    if view:  # the columns around the view are untouched too
        assert torch.isnan(c.out._base).sum() == c.out._base.numel() - c.out[:rows].numel()
    check_h(c, what)


def check_h(c: Case, what: str) -> None:
    """mean_rmsnorm: h[:rows] holds the normed stream means, the rows past `rows` stay poisoned;
    gated_rmsnorm: the same with its gated normed rows."""
    if c.h is None:
        return
    if c.spec.prologue == "gated_rmsnorm":
        want = gated_rows(c)
    else:
        m = c.x[: c.rows].double().mean(1)
        want = m / torch.sqrt((m * m).mean(-1, keepdim=True) + c.spec.eps)
    assert_rel(c.h[: c.rows].double(), want, 1e-2 if c.h.dtype == torch.bfloat16 else 1e-5,
               f"{what}: normed rows h")
    assert torch.isnan(c.h[c.rows:]).all(), f"{what}: the norm kernel wrote rows past `rows`"


# ---------------------------------------------------------------- CPU (interpreter, fp32)


@pytest.mark.parametrize("rows", [1, 3, 16, 17, 50])
@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("prologue", PROLOGUES)
def test_odd_sizes_strided_views(prologue, epilogue, rows):
    check_cpu(spec_for(40, 72, prologue, epilogue), rows, view=True, seed=rows)


@pytest.mark.parametrize("rows", [3, 50])
@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("prologue", PROLOGUES)
def test_power_of_two_sizes(prologue, epilogue, rows):
    check_cpu(spec_for(256, 128, prologue, epilogue), rows, view=False, seed=100 + rows)


@pytest.mark.parametrize("rows", [2, 9, 16, 40])
@pytest.mark.parametrize("prologue, epilogue", [("rmsnorm", "swiglu"), ("none", "residual"),
                                                ("mean_rmsnorm", "store")])
def test_several_k_steps_with_a_ragged_tail(prologue, epilogue, rows):
    check_cpu(spec_for(200, 56, prologue, epilogue), rows, view=True, seed=200 + rows)


@pytest.mark.parametrize("epilogue", ["store", "swiglu"])
def test_many_row_and_column_blocks(epilogue):
    # several row blocks and column blocks: exercises the grouped program order
    check_cpu(spec_for(24, 400, "rmsnorm", epilogue), 300, view=False, seed=7)


@pytest.mark.parametrize("rows", [3, 17])
def test_swiglu_without_limit(rows):
    check_cpu(spec_for(40, 72, "rmsnorm", "swiglu", limit=None), rows, view=True, seed=300 + rows)


@pytest.mark.parametrize("rows", [1, 3, 17, 50, 70])  # 70: hc_post as GEMM + hc_post kernel
@pytest.mark.parametrize("epilogue", ["residual", "hc_post"])
@pytest.mark.parametrize("prologue", ["none", "mean_rmsnorm"])
def test_in_place_update_of_the_stream(prologue, epilogue, rows):
    spec = spec_for(40, 72, prologue, epilogue)
    c = Case(spec, rows, "cpu", torch.float32, view=True, seed=400 + rows)
    before = c.stream.clone()
    want = reference(spec, c)
    c.out = c.stream
    c.launch()
    assert_close(c.stream[:rows], want, torch.float32, f"in-place {epilogue} rows={rows}")
    assert torch.equal(c.stream[rows:], before[rows:]), "rows past `rows` changed"


def test_mean_rmsnorm_is_a_norm_kernel_then_the_plain_gemm():
    spec = spec_for(40, 72, "mean_rmsnorm", "residual")
    assert kernel_names("mm_k", spec) == ("mm_k_norm", "mm_k")
    assert kernel_names("mm_k", spec_for(40, 72, "rmsnorm", "residual")) == ("mm_k",)
    plain = source("mm_k", spec_for(40, 72, "none", "residual"))
    text = source("mm_k", spec)
    gemm = plain.split("\n\n\n", 1)[1]  # the kernel after the imports
    assert text.endswith("\n\n\n" + gemm) and gemm_spec(spec).prologue == "none"
    assert "def mm_k_norm(" in text
    assert text.count("@triton.jit") == plain.count("@triton.jit") + 1
    assert scratch(spec, 7, torch.float32, "cpu").shape == (7, 40)
    assert scratch(spec_for(40, 72, "none", "store"), 7, torch.float32, "cpu") is None


def test_hc_post_adds_the_wide_step_pair():
    spec = spec_for(40, 72, "mean_rmsnorm", "hc_post")
    assert kernel_names("mm_k", spec) == ("mm_k_norm", "mm_k", "mm_k_y", "mm_k_post")
    text = source("mm_k", spec)
    assert all(f"def {n}(" in text for n in kernel_names("mm_k", spec))
    assert scratch_y(spec, SPLIT_ROWS, torch.float32, "cpu") is None
    assert scratch_y(spec, SPLIT_ROWS + 1, torch.float32, "cpu").shape == (SPLIT_ROWS + 1, 72)
    assert scratch_y(spec_for(40, 72, "none", "residual"), 500, torch.float32, "cpu") is None


def stream_mean_pair(rows: int, device: str, act: torch.dtype, k: int, n: int, hc: int,
                     seed: int) -> tuple[Case, Case, torch.Tensor]:
    """A GEMM with the hc_post epilogue that stores its new streams' mean (mean_out), and the
    stream-mean norm GEMM on those streams that reads it (mean_in): the last layer's down and
    the LM head. Returns both cases and the mean buffer (poisoned, rows past `rows` too)."""
    down = Case(dataclasses.replace(spec_for(k, k, "none", "hc_post", hc=hc), mean_out=True),
                rows, device, act, view=False, seed=seed)
    head = Case(dataclasses.replace(spec_for(k, n, "mean_rmsnorm", "store", streams=hc),
                                    mean_in=True), rows, device, act, view=False, seed=seed + 1)
    head.x = down.out  # the head reads the streams down writes
    return down, head, torch.full((rows + SLACK, k), float("nan"), dtype=act, device=device)


def run_pair(down: Case, head: Case, mean: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch both with the mean between them; fp64 references of down's streams and the head's
    logits (from the streams down wrote as they are stored)."""
    want_down = reference(down.spec, down)
    down.launch(mean=mean)
    want_head = reference(head.spec, head)
    head.launch(mean=mean)
    return want_down, want_head


@pytest.mark.parametrize("rows", [1, 3, 16, 17, 64, 65])  # GEMV; tensor cores; hc_post apart
def test_the_stream_mean_replaces_the_heads_norm_kernel(rows):
    down, head, mean = stream_mean_pair(rows, "cpu", torch.float32, 40, 72, 4, 1300 + rows)
    head.h.fill_(float("nan"))
    want_down, want_head = run_pair(down, head, mean)
    what = f"stream mean rows={rows}"
    assert_close(down.out[:rows], want_down, torch.float32, f"{what}: streams")
    assert_close(head.out[:rows], want_head, torch.float32, f"{what}: head")
    if rows <= SPLIT_ROWS:  # down stored the mean
        assert_close(mean[:rows], want_down.mean(1), torch.float32, f"{what}: mean")
    else:  # hc_post apart: no mean stored
        assert torch.isnan(mean).all(), f"{what}: a mean stored past SPLIT_ROWS"
    if rows <= MEAN_ROWS:  # the head read it and ran no norm kernel
        assert torch.isnan(head.h).all(), f"{what}: the norm kernel ran"
    else:
        check_h(head, what)
    assert torch.isnan(mean[rows:]).all(), f"{what}: a mean stored past `rows`"


def test_a_stream_mean_needs_its_epilogue_and_prologue():
    with pytest.raises(ValueError, match="stream mean"):
        dataclasses.replace(spec_for(40, 72, "none", "store"), mean_out=True)
    with pytest.raises(ValueError, match="stream mean"):
        dataclasses.replace(spec_for(40, 72, "rmsnorm", "store"), mean_in=True)
    spec = dataclasses.replace(spec_for(40, 72, "mean_rmsnorm", "store"), mean_in=True)
    assert kernel_names("mm_k", spec) == ("mm_k_norm", "mm_k", "mm_k_mean")
    down, head, _ = stream_mean_pair(1, "cpu", torch.float32, 40, 72, 4, 1400)
    with pytest.raises(ValueError, match="stream mean"):
        down.launch()  # mean_out with no buffer to store the mean in


@pytest.mark.parametrize("rows", [1, 3, 16, 17, 50, 70])  # GEMV; tensor cores; hc_post apart
@pytest.mark.parametrize("epilogue", ["store", "hc_post"])
@pytest.mark.parametrize("group", [16, 32])
def test_gated_rmsnorm_prologue(group, epilogue, rows):
    check_cpu(spec_for(96, 40, "gated_rmsnorm", epilogue, group=group), rows, view=rows % 2 == 1,
              seed=700 + rows + group)


@pytest.mark.parametrize("rows", [1, 3, 17, 50])  # GEMV; tensor cores
@pytest.mark.parametrize("lower_bound", [-5.0, None])  # GLM-5.3's sigmoid form; softplus
def test_kda_gate_epilogue(lower_bound, rows):
    check_cpu(spec_for(40, 48, "none", "kda_gate", lower_bound=lower_bound), rows,
              view=rows != 3, seed=90 + rows)


@pytest.mark.parametrize("rows", [1, 5, 20, 70])  # GEMV, mid and tensor-core tilings
@pytest.mark.parametrize("group", [16, 32])
def test_gated_norm_epilogue(group, rows):
    """g_b's projection as the gate of a per-group RMSNorm of other rows (KDA's o_norm)."""
    spec = spec_for(40, 96, "none", "gated_norm", group=group)
    assert tiles(spec, rows).block_n == group
    check_cpu(spec, rows, view=rows % 2 == 1, seed=1300 + rows + group)


def test_gated_norm_epilogue_refuses_a_group_off_n():
    with pytest.raises(ValueError, match="gated_norm epilogue needs a power-of-two group"):
        MatmulSpec(k=40, n=48, epilogue="gated_norm", group=32)


def test_kda_gate_epilogue_refuses_a_gate_of_other_width():
    with pytest.raises(ValueError, match="kda_gate epilogue needs a gate of 48 columns"):
        MatmulSpec(k=40, n=48, epilogue="kda_gate", gate=KDAGateSpec(2, 16, -5.0))


def test_gated_rmsnorm_refuses_a_group_off_k():
    with pytest.raises(ValueError, match="group dividing k=96, got group=64"):
        spec_for(96, 40, "gated_rmsnorm", "store", group=64)


@pytest.mark.parametrize("name, cut, message", [
    ("x", lambda c: c.x[:4], r"matmul x: 2 dims, \[>= 5, \.\.\., 40\], got \(4, 40\)"),
    ("out", lambda c: c.out[:3], r"matmul out: 3 dims, \[>= 5, \.\.\., 72\], got \(3, 4, 72\)"),
    ("comb", lambda c: c.comb[:, :3, :3], r"matmul comb: \[>= 5, 4, 4\].*\(\d+, 3, 3\)"),
    ("stream", lambda c: c.stream[:, :2], r"matmul stream: \[>= 5, 4, 72\], got \(\d+, 2, 72\)"),
])
def test_short_or_misshapen_operand_is_named_before_launch(name, cut, message):
    c = Case(spec_for(40, 72, "none", "hc_post"), 5, "cpu", torch.float32, False, seed=4)
    setattr(c, name, cut(c))
    with pytest.raises(ValueError, match=message):
        c.launch()
    assert torch.isnan(c.out).all(), "nothing may run"


@pytest.mark.parametrize("rows", [65, 90])
@pytest.mark.parametrize("prologue", ["none", "rmsnorm"])
def test_wide_hc_post_step(prologue, rows):
    check_cpu(spec_for(40, 72, prologue, "hc_post"), rows, view=True, seed=950 + rows)


@pytest.mark.parametrize("rows", [1, 3, 17, 50, 70])  # GEMV; tensor cores; hc_post apart
@pytest.mark.parametrize("epilogue", ["residual", "hc_post"])
@pytest.mark.parametrize("prologue", ["none", "rmsnorm"])
def test_epilogue_with_an_addend(prologue, epilogue, rows):
    check_cpu(spec_for(40, 72, prologue, epilogue, addend=True), rows, view=rows % 2 == 1,
              seed=1000 + rows)


def test_addend_wants_its_epilogue_and_rows():
    with pytest.raises(ValueError, match="addend needs the residual or hc_post epilogue, not 'st"):
        spec_for(40, 72, "none", "store", addend=True)
    c = Case(spec_for(40, 72, "none", "hc_post", addend=True), 5, "cpu", torch.float32, False,
             seed=5)
    c.addend = c.addend[:4]
    with pytest.raises(ValueError, match=r"matmul addend: \[>= 5, 72\], got \(4, 72\)"):
        c.launch()
    assert torch.isnan(c.out).all(), "nothing may run"


@pytest.mark.parametrize("rows", [1, 5])
def test_mean_rmsnorm_scratch_is_rewritten_each_launch(rows):
    # a launch reuses the scratch another launch (more rows, other inputs) filled
    spec = spec_for(200, 56, "mean_rmsnorm", "store", streams=4)
    c = Case(spec, rows, "cpu", torch.float32, view=True, seed=900 + rows)
    c.h.normal_(generator=c.gen)  # stale rows from an earlier launch
    c.h[rows:] = float("nan")
    want = reference(spec, c)
    c.launch()
    assert_close(c.out[:rows], want, torch.float32, f"reused scratch rows={rows}")
    check_h(c, f"reused scratch rows={rows}")


def test_paths_by_rows():
    spec = spec_for(4096, 6144, "rmsnorm", "swiglu")
    for rows in (1, 16):  # GEMV tiling: one row block holds every row, so w is read once
        assert tiles(spec, rows).block_m >= 16 and tiles(spec, rows).group_m == 1
    assert tiles(spec, 17).block_m >= 64 and tiles(spec, 512).block_m == 128


def test_gemv_tiling_follows_the_sms_knob():
    """The memoized tilings key on the `sms` knob: 128 programs of 32 weight rows fill one
    wave of 132 multiprocessors, 64 do not (64 rows a program then), and a formed site's
    partials (hc_pre.gram) count the same programs."""
    spec = spec_for(4096, 4096, "none", "store")
    site = HCPreSpec(n=4, d=4096, norm_eps=1e-6, hc_eps=1e-6, iters=20)
    assert tiles(spec, 1).block_n == 32 and gram(site)[0] == 128 * projections(site)[1]
    with overrides(sms=64):
        assert tiles(spec, 1).block_n == 64 and gram(site)[0] == 64 * projections(site)[1]
    assert tiles(spec, 1).block_n == 32 and gram(site)[0] == 128 * projections(site)[1]


def test_source_is_deterministic_and_carries_the_header():
    spec = spec_for(40, 72, "mean_rmsnorm", "hc_post")
    text = source("mm_k", spec, header="layer 3 o_proj\nfused: hc_post")
    assert text == source("mm_k", spec_for(40, 72, "mean_rmsnorm", "hc_post"),
                          header="layer 3 o_proj\nfused: hc_post")
    assert text.startswith("# layer 3 o_proj\n# fused: hc_post\n")
    assert "def mm_k(" in text
    assert source("mm_k", spec) != source("mm_k", spec_for(40, 72, "mean_rmsnorm", "residual"))


def test_interpret_upcasts_dot_operands():
    spec = spec_for(40, 72, "none", "swiglu")
    with overrides(interpret=True):
        interp = source("mm_i", spec)
    with overrides(interpret=False):
        native = source("mm_i", spec)
    assert "tl.dot(a.to(tl.float32), b0.to(tl.float32), acc_g)" in interp
    assert "tl.dot(a.to(b0.dtype), b0, acc_g)" in native


# ---------------------------------------------------------------- GPU (bf16 on the H200)


def check_gpu(spec: MatmulSpec, rows: int, view: bool, seed: int, in_place: bool = False) -> None:
    c = Case(spec, rows, "cuda", torch.bfloat16, view, seed)
    before = None if c.stream is None else c.stream.clone()
    want = reference(spec, c)
    if in_place:
        c.out = c.stream
    c.launch()
    torch.cuda.synchronize()
    what = f"{spec.prologue}+{spec.epilogue} k={spec.k} n={spec.n} rows={rows}"
    assert_rel(c.out[:rows].double(), want, 1e-2, what)
    if in_place:
        assert torch.equal(c.out[rows:], before[rows:]), f"{what}: rows past `rows` changed"
    else:
        assert torch.isnan(c.out[rows:]).all(), f"{what}: wrote rows past `rows`"
    check_h(c, what)


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 8, 16, 512])
@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("prologue", PROLOGUES)
def test_gpu_bf16_large(prologue, epilogue, rows):
    check_gpu(spec_for(4096, 6144, prologue, epilogue, limit=1.5), rows, view=rows != 8,
              seed=500 + rows)


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 8, 40, 512])
def test_gpu_bf16_gated_rmsnorm_o_proj(rows):
    # GLM-5.3-Flash's KDA o_proj: 64 heads x 128 in, 4096 out, hc_post over 4 streams
    check_gpu(spec_for(8192, 4096, "gated_rmsnorm", "hc_post", group=128), rows,
              view=rows != 8, seed=800 + rows)


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 8, 40, 512])
def test_gpu_bf16_shared_expert_down_with_routed_addend(rows):
    # GLM-5.3-Flash's shared expert down: 2048 in, 4096 out, plus the routed experts' output
    check_gpu(spec_for(2048, 4096, "none", "hc_post", addend=True), rows, view=rows != 8,
              seed=1100 + rows)


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 8, 64, 512])
@pytest.mark.parametrize("lower_bound", [-5.0, None])
def test_gpu_bf16_kda_gate_f_b(lower_bound, rows):
    # GLM-5.3-Flash's f_b: rank 128 in, 64 heads x 128 out, the decay gate in the epilogue
    check_gpu(spec_for(128, 8192, "none", "kda_gate", head_dim=128, lower_bound=lower_bound),
              rows, view=rows != 8, seed=900 + rows)


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 8, 64, 512])
def test_gpu_bf16_gated_norm_g_b(rows):
    # GLM-5.3-Flash's g_b: rank 128 in, 64 heads x 128 out, KDA's o_norm in the epilogue
    check_gpu(spec_for(128, 8192, "none", "gated_norm", group=128), rows, view=rows != 8,
              seed=1400 + rows)


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [3, 13, 100])
@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_gpu_bf16_odd_sizes(epilogue, rows):
    check_gpu(spec_for(1000, 1500, "rmsnorm", epilogue), rows, view=True, seed=600 + rows)


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [4, 300])
@pytest.mark.parametrize("epilogue", ["residual", "hc_post"])
def test_gpu_in_place(epilogue, rows):
    check_gpu(spec_for(2048, 2048, "mean_rmsnorm", epilogue), rows, view=True, seed=700 + rows,
              in_place=True)


@pytest.mark.gpu
@pytest.mark.parametrize("prologue", ["rmsnorm", "mean_rmsnorm"])
def test_gpu_norm_is_stable_over_repeats(prologue):
    # an in-loop sum(x^2) reduction once raced with the pipelined copies (a moving error)
    for seed in range(8):
        check_gpu(spec_for(1024, 1500, prologue, "residual"), 100, view=True, seed=800 + seed)


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 8, 40, 65])
def test_gpu_bf16_stream_mean_into_the_lm_head(rows):
    # a 4096-wide hc_post GEMM over 4 streams and a 32000-column head (llama bench's last
    # layer and LM head): the bf16 mean it stores, then the head's norm in its K loop
    down, head, mean = stream_mean_pair(rows, "cuda", torch.bfloat16, 4096, 32000, 4,
                                        1500 + rows)
    want_down, want_head = run_pair(down, head, mean)
    torch.cuda.synchronize()
    what = f"bf16 stream mean rows={rows}"
    assert_rel(down.out[:rows].double(), want_down, 1e-2, f"{what}: streams")
    assert_rel(head.out[:rows].double(), want_head, 1e-2, f"{what}: head")
    if rows <= SPLIT_ROWS:
        assert_rel(mean[:rows].double(), want_down.mean(1), 1e-2, f"{what}: mean")
