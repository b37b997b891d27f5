"""KDA kernel scenarios (issue 6): one decode step of B sequences through our recurrent kernel
(`codegen.emitters.kda`), and a prefill of N tokens of one sequence (`emitters.kda_chunk` where
it exists, else the recurrent kernel over the run), each against flash-linear-attention's
`fused_recurrent_kda` / `chunk_kda` on the same inputs. fla is an optional, bench-only
dependency, imported only when a scenario runs: without it our kernel runs alone and the row
says so. Before anything is timed, our output and final state and each baseline's are checked
against the reference recurrence (`ir.semantics.kda`, fp32) sequence by sequence. Work is bytes:
the fp32 state read and written once, plus every row's q, k, v, g, out, b and slot once.

kda-layer: one decode step of a whole KDA site through the engine (`bench.kda_layer`); there
is no baseline: issue 6 asks this step for a fraction of HBM."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType

import torch

from hyperloom.bench import kda_layer
from hyperloom.bench.measure import median_seconds, profile_top
from hyperloom.bench.scenarios import Result, agree, step_profile
from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters import kda as recurrent
from hyperloom.codegen.emitters.kda import KDASpec
from hyperloom.codegen.emitters.kda_conv import ConvSpec
from hyperloom.ir import ops
from hyperloom.ir.ops import Op
from hyperloom.ir.semantics import Ctx
from hyperloom.ir.semantics import kda as semantics
from hyperloom.ir.state import StateStore, segments
from hyperloom.ir.types import DType, StateDecl, StateKind, TensorType
from hyperloom.models import Model

SCENARIOS = ("kda-decode", "kda-prefill", "kda-layer")
GLM_WIDTH = (64, 128)  # GLM-5.3's KDA layer (heads, head_dim): a model without KDA on a GPU
CPU_WIDTH = (2, 16)  # a model without KDA on the interpreter
LOWER_BOUND = -5.0  # GLM's bounded gate: g = -5 sigmoid(.) in [-5, 0)
# the prefill's decay inputs: "mild", g = -5 sigmoid(N(0, 1) - 2), median -0.6, every element
# drawn alike; "model", GLM-5.3's gate as it is on random weights, g = -5 sigmoid(exp(A_log_h)
# (f + dt_bias_c)) with f ~ N(0, 1) and A_log, dt_bias ~ N(0, 0.5) (random_weights): median
# -2.5, and a channel with a large dt_bias decays fast on every row, so about a third of the
# 16-row blocks of a head pass -64 in some channel (the in-chunk kernel's exact form; none do
# on the mild inputs)
DECAYS = ("mild", "model")
STATE = "bench"  # the reference's state name


def _decay(decay: str, rows: int, heads: int, d: int, gen: torch.Generator) -> torch.Tensor:
    """g [rows, heads * d] of DECAYS' `decay`."""
    f = torch.randn((rows, heads, d), generator=gen)
    if decay == "mild":
        return (LOWER_BOUND * torch.sigmoid(f - 2)).flatten(1)
    rate = torch.exp(torch.randn((1, heads, 1), generator=gen) * 0.5)
    bias = torch.randn((1, heads, d), generator=gen) * 0.5
    return (LOWER_BOUND * torch.sigmoid(rate * (f + bias))).flatten(1)


# (outputs [rows, H*d], final state [B, H, d, d]) of one run, from a step's static buffers
Run = Callable[[], tuple[torch.Tensor, torch.Tensor]]


@dataclass
class KDAResult(Result):
    """A Result whose `extra` fields (width, timing, baseline, vs_fla, notes) join its row."""
    extra: dict = field(default_factory=dict)


def kda_spec(model: Model, gpu: bool) -> KDASpec:
    """The width of the model's first KDA layer; without one, GLM-5.3's on a GPU (a tiny shape
    there would time launch latency only) and a tiny one on the interpreter."""
    for node in model.main.nodes:
        if node.op is Op.KDA:
            return KDASpec(node.attrs.heads, node.attrs.head_dim)
    return KDASpec(*(GLM_WIDTH if gpu else CPU_WIDTH))


def import_fla() -> tuple[ModuleType | None, str]:
    """(fla.ops.kda, "fla <version>"), or (None, why not) when flash-linear-attention is not
    installed or does not import (fla.ops needs einops)."""
    try:
        import fla
        import fla.ops.kda as fla_kda
    except ImportError as e:
        return None, f"flash-linear-attention not importable ({e}): our kernel alone"
    return fla_kda, f"fla {getattr(fla, '__version__', '?')}"


@dataclass
class Inputs:
    """One step's rows, each sequence's rows contiguous: q, k, v, g [rows, H*d] and b [rows, H]
    in the activation dtype (g the log decay per channel, b the beta logits), slot and pos
    [rows] int64, and the fp32 state [B, H, d, d] (dk x dv; the engine stores each head's S
    transposed: `stored`) the step starts from."""
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor
    b: torch.Tensor
    slot: torch.Tensor
    pos: torch.Tensor
    state: torch.Tensor

    @property
    def batch(self) -> int:
        return self.state.shape[0]

    @property
    def rows(self) -> int:
        return self.q.shape[0]


def make_inputs(spec: KDASpec, batch: int, tokens: int, device: torch.device,
                dtype: torch.dtype, gen: torch.Generator, decay: str = "mild") -> Inputs:
    """Random rows (g in [-5, 0) of the `decay` kind, DECAYS) and a random starting state."""
    rows, hd = batch * tokens, spec.heads * spec.head_dim

    def rand(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(shape, generator=gen) * scale).to(device, dtype)

    g = _decay(decay, rows, spec.heads, spec.head_dim, gen)
    state = torch.randn((batch, spec.heads, spec.head_dim, spec.head_dim), generator=gen) * 0.1
    return Inputs(rand(rows, hd), rand(rows, hd), rand(rows, hd), g.to(device, dtype),
                  rand(rows, spec.heads, scale=2.0),
                  torch.arange(batch, device=device).repeat_interleave(tokens),
                  torch.arange(tokens, device=device).repeat(batch), state.to(device))


def reference(spec: KDASpec, x: Inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """(out [rows, H*d], final state [B, H, d, d]) of the reference recurrence in fp32."""
    h, d = spec.heads, spec.head_dim
    decl = StateDecl(f"{STATE}.recurrent", StateKind.FIXED, TensorType.make(torch.float32, h, d, d))
    store = StateStore((decl,), x.batch, 1, x.state.device)
    store[decl.name].copy_(stored(x.state))
    args = [t.float() for t in (x.q, x.k, x.v, x.g, x.b)]
    ctx = Ctx(torch.float32, store, segments(x.slot, x.pos))
    out = semantics.kda(ctx, ops.KDAAttrs(h, d, STATE), *args, x.slot, x.pos)
    return out, stored(store[decl.name])


def stored(state: torch.Tensor) -> torch.Tensor:
    """[.., dk, dv] states as the engine stores them, each head's S transposed (and back: the
    transpose is its own inverse), contiguous."""
    return state.transpose(-1, -2).contiguous()


def conv_reference(spec: ConvSpec, x: list[torch.Tensor], w: list[torch.Tensor],
                   slot: torch.Tensor, window: torch.Tensor,
                   dtype: torch.dtype = torch.float32) -> tuple[tuple[torch.Tensor, ...],
                                                               torch.Tensor]:
    """(q, k, v's conv outputs of the rows with slot >= 0, the windows after) of the reference
    conv (`semantics.kda.kda_conv`) in dtype: x the q, k, v rows, w their conv weights, each
    sequence's rows contiguous and in order from its window [slots, 3C, kernel - 1]."""
    live = slot >= 0
    s = slot[live]
    pos = torch.zeros_like(s)
    for i in range(1, len(s)):
        pos[i] = pos[i - 1] + 1 if s[i] == s[i - 1] else 0
    decl = StateDecl(f"{STATE}.conv", StateKind.FIXED,
                     TensorType.make(torch.float32, 3 * spec.channels, spec.kernel - 1))
    store = StateStore((decl,), window.shape[0], 1, window.device, dtype)
    store[decl.name].copy_(window)
    out = semantics.kda_conv(Ctx(dtype, store, segments(s, pos)),
                             ops.KDAConvAttrs(spec.kernel, STATE),
                             *[t[live].to(dtype) for t in x], *[t.to(dtype) for t in w], s, pos)
    return out, store[decl.name]


def check(run: Run, want: tuple[torch.Tensor, torch.Tensor], batch: int, tol: float,
          what: str) -> float:
    """run() against the reference's (out, state): the worst relative error of either."""
    out, state = run()
    return max(agree(out.reshape(batch, -1), want[0].reshape(batch, -1), tol, f"{what} out"),
               agree(state, want[1], tol, f"{what} state"))


def graphed(fn: Callable[[], object], device: torch.device) -> Callable[[], object]:
    """fn's CUDA-graph replay: fn runs once first, outside the capture, so Triton compiles and
    autotunes there; off a GPU, fn itself."""
    if device.type != "cuda":
        return fn
    fn()
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def kda_bytes(spec: KDASpec, batch: int, tokens: int, dtype: torch.dtype) -> float:
    """Each sequence's fp32 state read and written once, plus every row's q, k, v, g, out
    ([H*d] each), b [H] (activation dtype) and slot (int64) once."""
    h, d = spec.heads, spec.head_dim
    row = (5 * h * d + h) * dtype.itemsize + 8
    return float(2 * batch * h * d * d * 4 + batch * tokens * row)


# -- the paths timed ------------------------------------------------------------------------


@dataclass
class Path:
    """One implementation on a step's inputs: `first` runs the step from x.state (copy 0) and
    returns (out, final state) for the check; `steps` runs it once on each of `copies` copies
    of the state in turn, the work one timed graph replays."""
    what: str
    launches: int | None  # kernels per step (None: fla's, not counted)
    first: Run
    steps: Callable[[], None]
    copies: int


ROTATE_BYTES = 256 << 20  # the state one timed decode graph walks: 5x an H200's 50 MiB L2
# a KDA layer's decode is timed as this many consecutive steps in one graph, as a model's layers
# run (one graph a token, no launch of its own a layer); its weights, read once a step, push the
# states out of L2 between steps. The one-step graph's time joins the row's notes
LAYER_RUN = 8


def rotation(spec: KDASpec, batch: int, gpu: bool) -> int:
    """State copies a timed decode graph walks, a step on each: enough that no step finds its
    state in the L2 cache (a decode step among a model's other layers reads it from HBM); one
    off a GPU."""
    state = batch * spec.heads * spec.head_dim ** 2 * 4
    return max(1, min(64, -(-ROTATE_BYTES // state))) if gpu else 1


def time_path(p: Path, device: torch.device, graph: bool, reps: int) -> float:
    """Seconds a step: the median over runs of p.steps (its CUDA-graph replay if graph)."""
    fn = graphed(p.steps, device) if graph else p.steps
    return median_seconds(fn, device, reps=reps) / p.copies


def _ours(spec: KDASpec, x: Inputs, copies: int, what: str, launches: int,
          launch: Callable[..., None]) -> Path:
    """A path of our kernels: launch(slot=, state=, out=) runs x's rows; copy c of the state
    pool holds slots [c B, (c + 1) B)."""
    pool = stored(x.state).repeat(copies, 1, 1, 1)  # [copies B, H, d, d] as the engine keeps it
    slots = [x.slot + c * x.batch for c in range(copies)]
    out = torch.empty_like(x.q)

    def first() -> tuple[torch.Tensor, torch.Tensor]:
        launch(slot=slots[0], state=pool, out=out)
        return out, stored(pool[:x.batch])

    def steps() -> None:
        for slot in slots:
            launch(slot=slot, state=pool, out=out)

    return Path(what, launches, first, steps, copies)


def recurrent_path(spec: KDASpec, x: Inputs, device: torch.device, copies: int = 1) -> Path:
    """Our recurrent kernel (emitters.kda) over x's rows, the state updated in place."""
    name = "bench_kda"
    kernel = load(recurrent.source(name, spec, header=f"bench: KDA recurrence {spec}"), name,
                  device)

    def launch(**kw: torch.Tensor) -> None:
        # with copies, a step's launch reads a state no step just before it wrote
        recurrent.launch(kernel, spec, q=x.q, k=x.k, v=x.v, g=x.g, b=x.b, rows=x.rows,
                         seq_rows=x.rows // x.batch, early_state=copies > 1, **kw)

    return _ours(spec, x, copies, "emitters.kda (recurrent)", 1, launch)


def chunked_module() -> ModuleType | None:
    """`codegen.emitters.kda_chunk` (chunked KDA prefill) when it exists with its `launch`."""
    try:
        from hyperloom.codegen.emitters import kda_chunk
    except ImportError:
        return None
    return kda_chunk if hasattr(kda_chunk, "launch") else None


def prefill_path(spec: KDASpec, x: Inputs, device: torch.device) -> Path:
    """Our prefill: the chunked kernels if there are any, else the recurrent kernel."""
    chunk = chunked_module()
    if chunk is not None:
        return chunked_path(chunk, spec, x, device)
    p = recurrent_path(spec, x, device)
    p.what += " over the whole run: no emitters.kda_chunk yet"
    return p


def chunked_path(chunk: ModuleType, spec: KDASpec, x: Inputs, device: torch.device) -> Path:
    """emitters.kda_chunk over x's rows: its kernels (`kernel_names`, in launch order) from one
    `source`, its scratch allocated once outside the timed launches, and `launch` as
    emitters.kda's with `work=`."""
    name, cspec = "bench_kda_chunk", chunk.KDAChunkSpec(spec.heads, spec.head_dim)
    src = chunk.source(name, cspec, header=f"bench: chunked KDA {cspec}")
    kernels = tuple(load(src, n, device, name) for n in chunk.kernel_names(name))
    work = chunk.scratch(cspec, x.rows, x.batch, device, x.q.dtype)

    def launch(**kw: torch.Tensor) -> None:
        chunk.launch(kernels, cspec, q=x.q, k=x.k, v=x.v, g=x.g, b=x.b, rows=x.rows, work=work,
                     **kw)

    return _ours(spec, x, 1, f"emitters.kda_chunk (chunk {cspec.chunk})", len(kernels), launch)


def fla_args(spec: KDASpec, x: Inputs) -> tuple[tuple[torch.Tensor, ...], dict]:
    """x as fla takes it: q, k, v, g [B, T, H, d] and beta [B, T, H] (views of x's rows), with
    the flags that make its math ours: l2norm of q and k in the kernel, q scaled by d^-1/2 after
    it, beta = sigmoid(b) in the kernel, g the log decay as given (no gate in the kernel); the
    state [B, H, dk, dv] fp32 (K-first, as ours) is read from `initial_state` and returned new."""
    b, h, d = x.batch, spec.heads, spec.head_dim
    shape = (b, x.rows // b, h, d)
    args = (*(t.view(shape) for t in (x.q, x.k, x.v, x.g)), x.b.view(*shape[:3]))
    return args, dict(scale=d ** -0.5, output_final_state=True, use_qk_l2norm_in_kernel=True,
                      use_beta_sigmoid_in_kernel=True)


def fla_paths(fla: ModuleType, spec: KDASpec, x: Inputs, prefill: bool,
              copies: int = 1) -> dict[str, Path]:
    """fla's baselines on x, by name: fused_recurrent_kda for a decode step; for a prefill
    chunk_kda, and chunk_kda with safe_gate (its faster path for gates bounded below, as g is
    here: in [-5, 0)). Each reads copy c of its own state pool and returns a new state."""
    args, kw = fla_args(spec, x)
    pool = x.state.repeat(copies, 1, 1, 1)

    def path(fn: Callable, what: str, **more: object) -> Path:
        def call(c: int) -> tuple[torch.Tensor, torch.Tensor]:
            h0 = pool[c * x.batch:(c + 1) * x.batch]
            o, state = fn(*args, initial_state=h0, **kw, **more)
            return o.reshape(x.rows, -1), state

        def steps() -> None:
            for c in range(copies):
                call(c)

        return Path(what, None, lambda: call(0), steps, copies)

    if not prefill:
        return {"fla fused_recurrent_kda": path(fla.fused_recurrent_kda, "fused_recurrent_kda")}
    return {"fla chunk_kda": path(fla.chunk_kda, "chunk_kda"),
            "fla chunk_kda safe_gate": path(fla.chunk_kda, "chunk_kda", safe_gate=True,
                                            lower_bound=LOWER_BOUND)}


# -- the scenarios -------------------------------------------------------------------------


class KDABench:
    """The KDA scenarios of one bench run: our kernels and fla's at the model's KDA width."""

    def __init__(self, model: Model, device: torch.device, dtype: torch.dtype, tol: float,
                 seed: int = 0, profile_steps: int = 0) -> None:
        self.spec, self.model = kda_spec(model, device.type == "cuda"), model
        self.device, self.dtype, self.tol = device, dtype, tol
        self.profile_steps = profile_steps  # 0: no profile
        self.gen = torch.Generator().manual_seed(seed)
        self.fla, self.fla_what = import_fla()

    def step(self, batch: int) -> KDAResult:
        """One decode row per sequence for `batch` sequences, timed under CUDA-graph replay:
        one graph of a step on each of `rotation` state copies, the time per step."""
        x = make_inputs(self.spec, batch, 1, self.device, self.dtype, self.gen)
        copies = rotation(self.spec, batch, self.device.type == "cuda")
        ours = recurrent_path(self.spec, x, self.device, copies)
        fla = fla_paths(self.fla, self.spec, x, False, copies) if self.fla else {}
        r = self._run(f"kda step b{batch}", x, ours, fla, graph=True, reps=20)
        r.batch = batch
        return r

    def prefill(self, n: int, decay: str = "mild") -> KDAResult:
        """n tokens of one sequence from a random state, with `decay` inputs (DECAYS), timed
        as eager launches (a millisecond-scale step: launch gaps are noise, and fla's chunk_kda
        is not known to be capturable)."""
        x = make_inputs(self.spec, 1, n, self.device, self.dtype, self.gen, decay)
        fla = fla_paths(self.fla, self.spec, x, True) if self.fla else {}
        name = f"kda prefill {n}" + ("" if decay == "mild" else f" {decay} decay")
        return self._run(name, x, prefill_path(self.spec, x, self.device), fla, graph=False,
                         reps=10)

    def layer(self, batch: int) -> KDAResult:
        """One decode step (a row a sequence) of a whole KDA site from random states
        (`bench.kda_layer`), after its output and states are checked against the reference
        interpreter; timed under CUDA-graph replay, per step of LAYER_RUN steps in a graph,
        and as a graph of one step (in the notes)."""
        name = f"kda layer b{batch}"
        step = kda_layer.LayerStep(self.model, DType.of(self.dtype), batch, self.device, self.gen)
        gpu = self.device.type == "cuda"
        run = LAYER_RUN if gpu else 1
        with torch.no_grad():
            step.run()
            err = step.check(self.tol, name)
            t = median_seconds(graphed(lambda: step.repeat(run), self.device), self.device,
                               reps=20) / run
            alone = median_seconds(graphed(step.run, self.device), self.device) if gpu else None
        r = KDAResult(name, kda_layer.layer_bytes(step.graph, batch), "bytes", t,
                      kernels=step.prog.plan.launches(batch, decode=True), rel_err=err)
        r.batch = batch
        r.extra = {"heads": self.model.config.linear_num_heads,
                   "head_dim": self.model.config.linear_head_dim, "rows": batch,
                   "ours_kernel": "the engine's kernels for one KDA site",
                   "timing": f"cuda graph of {run} consecutive steps; per step" if gpu
                   else "eager launches", "one_step_graph_s": alone,
                   "checked_against": "the reference interpreter (fp32)", "baseline": None,
                   "notes": [], "vs_fla": None}
        if alone is not None:
            r.extra["notes"].append(f"one step as a graph of its own: {alone * 1e3:.3f} ms "
                                    f"({(alone - t) * 1e6:.1f} us more: a graph launch a step)")
        if self.profile_steps:
            r.profile = step_profile(step.run, self.device, self.profile_steps, step.prog, batch)
        return r

    def _run(self, name: str, x: Inputs, ours: Path, fla: dict[str, Path], graph: bool,
             reps: int) -> KDAResult:
        want = reference(self.spec, x)
        graph = graph and self.device.type == "cuda"
        with torch.no_grad():
            err = check(ours.first, want, x.batch, self.tol, f"{name}: ours")
            r = KDAResult(name, kda_bytes(self.spec, x.batch, x.rows // x.batch, self.dtype),
                          "bytes", time_path(ours, self.device, graph, reps),
                          kernels=ours.launches, rel_err=err)
            r.extra = {"heads": self.spec.heads, "head_dim": self.spec.head_dim,
                       "rows": x.rows, "ours_kernel": ours.what,
                       "timing": (f"cuda graph of {ours.copies} steps, each on its own state "
                                  "copy; per step") if graph else "eager launches",
                       "checked_against": "ir.semantics.kda (fp32)",
                       "baseline": self.fla_what if self.fla else None, "notes": []}
            if self.profile_steps:
                r.profile = profile_top(ours.first, self.device, self.profile_steps)
            if self.fla is None:
                r.extra["notes"].append(self.fla_what)
            for mode, base in fla.items():
                self._baseline(r, mode, base, want, x.batch, graph, reps)
        times = [t for mode, t in r.baselines_s.items() if mode.startswith("fla")]
        r.extra["vs_fla"] = min(times) / r.ours_s if times else None
        return r

    def _baseline(self, r: KDAResult, mode: str, base: Path,
                  want: tuple[torch.Tensor, torch.Tensor], batch: int, graph: bool,
                  reps: int) -> None:
        """Time one fla baseline after checking it; one that fails or disagrees is not timed
        and the row says why (an optional baseline must not end the whole run)."""
        try:
            check(base.first, want, batch, self.tol, f"{r.scenario}: {mode}")
            r.baselines_s[mode] = time_path(base, self.device, graph, reps)
        except Exception as e:  # fla's errors are unknown: the row records them
            note = f"{mode} not timed: {type(e).__name__}: {e}"
            r.extra["notes"].append(note)
            print(f"warning: {r.scenario}: {note}", file=sys.stderr)
