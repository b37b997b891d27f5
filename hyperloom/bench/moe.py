"""MoE kernel scenarios (issue 8): a decode step of B rows and a prefill of N tokens through the
router and experts kernels (`codegen.emitters.moe_router`, `moe_experts`) against the reference's
torch loop (`ir.semantics.moe`: the router in fp32, then each chosen expert's rows gathered and
multiplied in the activation dtype) on the same random inputs, checked against each other before
anything is timed. Sizes: the model's first MoE layer; without one, GLM-5.3-Flash's on a GPU.
Work: a decode step is bytes (the fp32 router weight, the weights of the DISTINCT experts the
step chose, x and out once); a prefill is FLOPs (the router GEMM and three GEMMs per (row,
choice))."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from hyperloom.bench.kda import graphed
from hyperloom.bench.kernels import first_layer, load_emitters, randn
from hyperloom.bench.measure import median_seconds, profile_top
from hyperloom.bench.scenarios import AgreementError, Result, rel_err
from hyperloom.codegen.emitters import moe_experts, moe_router
from hyperloom.codegen.emitters.moe_experts import ExpertsSpec
from hyperloom.codegen.emitters.moe_router import RouterSpec
from hyperloom.codegen.specs import moe_experts_spec, moe_router_spec
from hyperloom.ir import ops
from hyperloom.ir.derive import pack_k, split_bf16
from hyperloom.ir.ops import Op
from hyperloom.ir.semantics import Ctx, moe
from hyperloom.models import Model
from hyperloom.models.glm5next import FLASH
from hyperloom.runtime.program import recorded, replayable

SCENARIOS = ("moe-decode", "moe-prefill")


@dataclass
class MoEResult(Result):
    """A Result whose `extra` fields (sizes, distinct experts, timing) join its row."""
    extra: dict = field(default_factory=dict)


def moe_specs(model: Model, gpu: bool) -> tuple[RouterSpec, ExpertsSpec]:
    """The model's first MoE layer; without one, GLM-5.3-Flash's (GPU) or a tiny one (CPU)."""
    found = first_layer(model, (Op.MOE_ROUTER, moe_router_spec),
                        (Op.MOE_EXPERTS, moe_experts_spec))
    if found:
        return found
    c = FLASH
    h, e, i, k = (c.hidden_size, c.n_routed_experts, c.moe_intermediate_size,
                  c.num_experts_per_tok) if gpu else (64, 8, 32, 2)
    return (RouterSpec(e, h, k, c.n_group, c.topk_group, c.norm_topk_prob,
                       c.routed_scaling_factor),
            ExpertsSpec(e, h, i, k, c.swiglu_limit))


class MoEBench:
    """The MoE scenarios of one bench run: random router and expert weights made once."""

    def __init__(self, model: Model, device: torch.device, dtype: torch.dtype, tol: float,
                 seed: int = 0, profile_steps: int = 0) -> None:
        self.router, self.experts = moe_specs(model, device.type == "cuda")
        # as compiled (passes.layouts): bf16 rows read the router weight as split_bf16 terms
        self.router = dataclasses.replace(self.router, split=dtype == torch.bfloat16)
        self.device, self.dtype, self.tol = device, dtype, tol
        self.profile_steps = profile_steps
        self.gen = torch.Generator(device).manual_seed(seed)
        r, x = self.router, self.experts
        self.w = self._randn(r.experts, r.hidden, scale=r.hidden ** -0.5, dtype=torch.float32)
        self.bias = self._randn(r.experts, scale=0.01, dtype=torch.float32)
        self.w_ours = split_bf16(self.w) if r.split else self.w
        self.wg, self.wu = (self._randn(x.experts, x.inter, x.hidden, scale=2 * x.hidden ** -0.5)
                            for _ in range(2))
        self.wd = self._randn(x.experts, x.hidden, x.inter, scale=x.inter ** -0.5)
        self.packed = tuple(pack_k(w) for w in (self.wg, self.wu, self.wd))  # ours read these
        self.kernels = self._load()

    def _randn(self, *shape: int, scale: float, dtype: torch.dtype | None = None):
        return randn(self.gen, self.device, dtype or self.dtype, *shape, scale=scale)

    def _load(self) -> tuple[tuple, tuple]:
        return load_emitters(self.device, (moe_router, self.router, "bench_moe_router"),
                             (moe_experts, self.experts, "bench_moe_experts"))

    def step(self, batch: int) -> MoEResult:
        """One decode row per sequence for `batch` sequences, timed under CUDA-graph replay."""
        r = self._run(f"moe step b{batch}", batch, decode=True)
        r.batch = batch
        return r

    def prefill(self, n: int) -> MoEResult:
        """n tokens, timed as eager launches."""
        return self._run(f"moe prefill {n}", n, decode=False)

    def _ours(self, x: torch.Tensor):
        """(launch, out, ids): our router and experts on x's rows, scratch made here."""
        rows, r, e = x.shape[0], self.router, self.experts
        weights = torch.empty((rows, r.top_k), device=self.device)
        ids = torch.empty((rows, r.top_k), dtype=torch.int32, device=self.device)
        out, part = torch.empty_like(x), moe_router.scratch(r, rows, self.device)
        work = moe_experts.scratch(e, rows, x.dtype, self.device)
        kr, ke = self.kernels

        def launch() -> None:
            moe_router.launch(kr, r, x=x, w=self.w_ours, bias=self.bias, weights=weights,
                              ids=ids, part=part, rows=rows)
            wg, wu, wd = self.packed
            moe_experts.launch(ke, e, x=x, weights=weights, ids=ids, wg=wg, wu=wu, wd=wd,
                               out=out, rows=rows, work=work)
        return launch, out, ids

    def _replayed(self, launch: Callable[[], None]) -> Callable[[], None]:
        """launch as an engine's prefill step issues it: its recorded kernels replayed where
        eager_replay allows (`runtime.program.recorded`; the recording runs it once)."""
        thunks = recorded(launch) if replayable(self.device) else None
        return (lambda: [t() for t in thunks]) if thunks else launch

    def _baseline(self, x: torch.Tensor) -> torch.Tensor:
        r, ctx = self.router, Ctx(torch.float32, None, ())
        at = ops.RouterAttrs(r.top_k, r.n_group, r.topk_group, r.norm_topk_prob, r.scaling)
        weights, ids = moe.moe_router(ctx, at, x.float(), self.w, self.bias)
        return moe.moe_experts(ctx, ops.ExpertsAttrs(self.experts.limit), x,
                               weights.to(x.dtype), ids, self.wg, self.wu, self.wd)

    def _work(self, rows: int, ids: torch.Tensor, decode: bool) -> tuple[float, str]:
        r, e = self.router, self.experts
        if not decode:
            return float(2 * rows * r.hidden * r.experts
                         + 2 * rows * e.top_k * 3 * e.inter * e.hidden), "flops"
        distinct = ids.unique().numel()
        return float(r.experts * r.hidden * 4 + distinct * 3 * e.inter * e.hidden
                     * self.wg.element_size() + 2 * rows * e.hidden * self.dtype.itemsize), \
            "bytes"

    def _run(self, name: str, rows: int, decode: bool) -> MoEResult:
        x = self._randn(rows, self.router.hidden, scale=1.0)
        launch, out, ids = self._ours(x)
        graph = decode and self.device.type == "cuda"
        with torch.no_grad():
            launch()
            base = self._baseline(x)
            err = rel_err(out.float(), base.float())
            if not err <= self.tol:
                raise AgreementError(f"{name}: our kernels and the torch loop disagree "
                                     f"(relative error {err:.3g} > {self.tol:g})")
            work, unit = self._work(rows, ids, decode)
            reps = 20 if decode else 10
            timed = graphed(launch, self.device) if graph else self._replayed(launch)
            ours_s = median_seconds(timed, self.device, reps=reps)
            kernels = 6 + (rows * self.experts.top_k > moe_experts.ROUTE_BLOCKS[1])
            res = MoEResult(name, work, unit, ours_s, kernels=kernels, rel_err=err)
            res.baselines_s["torch loop"] = median_seconds(lambda: self._baseline(x),
                                                           self.device, reps=reps)
            if self.profile_steps:
                res.profile = profile_top(timed, self.device, self.profile_steps)
        e = self.experts
        res.extra = {"experts": e.experts, "hidden": e.hidden, "inter": e.inter,
                     "top_k": e.top_k, "rows": rows, "distinct_experts": ids.unique().numel(),
                     "timing": "cuda graph of our step; torch loop eager" if graph
                     else "eager launches" + (", replayed as a prefill step's (eager_replay)"
                                              if replayable(self.device) else ""),
                     "checked_against": "ir.semantics.moe torch loop"}
        return res
