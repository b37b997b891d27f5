"""KDA recurrence (`hyperloom.ir.semantics.kda.kda`): the per-token delta rule over each
sequence's fp32 state, for decode and verify rows (and prefill in its recurrent form).

Inputs q, k, v, g [rows, heads*d] (act dtype or fp32; g is the log decay, per channel), b
[rows, heads] (beta logits), slot int64 [rows]; state fp32 [slots, heads, d, d], each head's S
stored transposed (dv x dk: a column of S is d contiguous floats), read and written in place;
out [rows, heads*d].

Grid (rows, heads, d / BV). Every column block of S is independent (decay scales rows, the
delta rule and the output are per column), so a program owns S[:, block] of one head, one
contiguous BV x d block of memory: the first row of each sequence's run loads it once, walks
the run's tokens in order (l2norm q and k, q * d^-1/2, S = exp(g) S, delta = sigmoid(b) (v -
S^T k), S += k delta^T, o = S^T q) and stores it once. Programs of a run's later rows and of
padding rows (slot < 0) load nothing and return; when every run is one row (SINGLE: a decode
step) no program looks for its run's end, so its state load waits on its slot load alone. Rows
of a sequence are contiguous in a step (`ir.state.segments`).

With spec.rank (kernel_plan: the entry `carries` g_b's GEMM + gated output norm, CONFIG.kda_norm_
rows), a launch with `norm` also writes h = RMSNorm_head(o) * nw * sigmoid(ga @ wg^T) (the
`linear_gated_norm` op): each program forms its BV gate columns from ga's row (no state needed,
so under the state load), stores them to scratch, and takes a ticket of its (row, head); the
head's last program reads the head's o and gates back and writes h. One launch a KDA layer
fewer at decode.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hyperloom.codegen.emitters import kda_chunk
from hyperloom.codegen.emitters.ints import next_power_of_2
from hyperloom.codegen.emitters.loops import runtime_loop
from hyperloom.codegen.emitters.text import RUN_STOP, comment, pdl_if
from hyperloom.passes.kernel_plan import KDA_CHUNKED_ROWS

# state columns (dv) per program, on one warp: a contiguous 4 KB block at d = 128. H200, one
# decode step at 64 heads x 128 (`bench/sweeps/kda_state_layout.py`, state not in L2, SINGLE):
# batch 1 / 16 / 64 took 4.11 / 37.3 / 144.6 us, against 4.08 / 39.4 / 150.2 with S stored
# dk x dv (16 columns on one warp up to 2 rows, else 64 on four) and 5.15 / 38.4 / 150.1 at 16
# columns; fla's fused_recurrent_kda 6.63 / 42.3 / 148.4. A program that only moves its block
# (no math) takes 3.29 us at batch 1: the launch and the 8.4 MB
BV, WARPS = 8, 1
# a step whose longest run has CHUNKED_ROWS rows takes emitters.kda_chunk (the plan counts its
# launches by the same rule)
CHUNKED_ROWS = KDA_CHUNKED_ROWS


@dataclass(frozen=True)
class KDASpec:
    heads: int
    head_dim: int
    rank: int = 0  # > 0: carries g_b's GEMM (K = rank) + the gated output norm
    eps: float = 1e-6  # that norm's

    def __post_init__(self) -> None:
        d = self.head_dim
        assert d >= 16 and d & (d - 1) == 0, "head_dim: a power of two >= 16"


def kernel_names(name: str) -> tuple[str, ...]:
    """(the recurrent kernel, then emitters.kda_chunk's kernels in launch order), all defined by
    source(name, ...)."""
    return (name, *kda_chunk.kernel_names(f"{name}_chunk"))


def chunk_spec(spec: KDASpec) -> kda_chunk.KDAChunkSpec:
    return kda_chunk.KDAChunkSpec(spec.heads, spec.head_dim)


def source(name: str, spec: KDASpec, header: str = "") -> str:
    """The recurrent kernel and the chunked form's kernels (a step picks one: `CHUNKED_ROWS`)."""
    chunked = kda_chunk.source(f"{name}_chunk", chunk_spec(spec))
    return _recurrent(name, spec, header) + "\n" + chunked


def _norm_source(spec: KDASpec) -> tuple[str, str, str]:
    """(parameters, gate lines, finish lines) of the carried g_b GEMM + gated norm (NORM
    launches): the gate lines open a row's body, the finish lines close it."""
    if not spec.rank:
        return "", "", ""
    rp = max(16, next_power_of_2(spec.rank))
    args = f"""
        ga_ptr, sga, wg_ptr, nw_ptr, h_ptr, sh, gs_ptr, cnt_ptr, NORM: tl.constexpr = False,
        R: tl.constexpr = {spec.rank}, RP: tl.constexpr = {rp}, RK: tl.constexpr = {min(rp, 32)},
        EPS: tl.constexpr = {float(spec.eps)!r},"""
    gate = """        if NORM:  # this program's gate columns (no state needed), RK ranks a step
            gate = tl.zeros([BV], dtype=tl.float32)
            for k0 in tl.static_range(0, RP, RK):
                kr = k0 + tl.arange(0, RK)
                a = tl.load(ga_ptr + row * sga + kr, mask=kr < R, other=0.0).to(tl.float32)
                wt = tl.load(wg_ptr + (h * D + c).to(tl.int64)[:, None] * R + kr[None, :],
                             mask=kr[None, :] < R, other=0.0).to(tl.float32)
                gate += tl.sum(wt * a[None, :], axis=1)
            gs_row = gs_ptr + row * (H * D) + h * D
            tl.store(gs_row + c, tl.sigmoid(gate))
"""
    finish = """        if NORM:  # the head's last program writes h
            tl.debug_barrier()  # every thread's o and gate columns are stored before the ticket
            ticket = tl.atomic_add(cnt_ptr + row * H + h, 1, sem="acq_rel")
            if ticket == D // BV - 1:
                tl.debug_barrier()
                tl.store(cnt_ptr + row * H + h, 0)
                ov = tl.load(o_ptr + row * so + h * D + kk, cache_modifier=".cg").to(tl.float32)
                gv = tl.load(gs_row + kk, cache_modifier=".cg")
                rs = tl.rsqrt(tl.sum(ov * ov, axis=0) / D + EPS)
                nw = tl.load(nw_ptr + kk).to(tl.float32)
                tl.store(h_ptr + row * sh + h * D + kk,
                         (ov * rs * nw * gv).to(h_ptr.dtype.element_ty))
"""
    return args, gate, finish


def _recurrent(name: str, spec: KDASpec, header: str) -> str:
    head, tail = runtime_loop("i", "r", "stop", "1", " " * 4)
    norm_args, gate, finish = _norm_source(spec)
    return f'''{comment(header)}import triton
import triton.language as tl

{RUN_STOP}

@triton.jit
def {name}(q_ptr, k_ptr, v_ptr, g_ptr, b_ptr, slot_ptr, state_ptr, o_ptr, rows,
        sq, sk, sv, sg, sb, so, st_slot, st_head,{norm_args}
        H: tl.constexpr = {spec.heads}, D: tl.constexpr = {spec.head_dim},
        BV: tl.constexpr = {BV}, SINGLE: tl.constexpr = False,
        EARLY: tl.constexpr = False, Q_SCALE: tl.constexpr = {spec.head_dim ** -0.5!r}):
{pdl_if("    ", "not EARLY")}    r = tl.program_id(0)
    h = tl.program_id(1)
    c = tl.program_id(2) * BV + tl.arange(0, BV)  # this program's state columns (dv)
    kk = tl.arange(0, D)  # state rows (dk), contiguous in memory
    s = tl.load(slot_ptr + r)  # written by the host before the step
    if SINGLE:  # every run is one row (a decode step): the state load waits on one slot load
        stop = tl.where(s < 0, r, r + 1)  # padding: no run
    else:
        stop = _run_stop(slot_ptr, r, rows)  # r: padding, or not the first row of its run
    st = state_ptr + s * st_slot + h * st_head + kk[:, None] + c[None, :] * D
    S = tl.load(st, mask=(stop > r) & (kk[:, None] < D), other=0.0,
                eviction_policy="evict_first")  # [D, BV] fp32 (S^T's rows c), read once
{pdl_if("    ", "EARLY")}    if stop == r:
        return
{head}        row = i.to(tl.int64)
{gate}        q = tl.load(q_ptr + row * sq + h * D + kk).to(tl.float32)
        k = tl.load(k_ptr + row * sk + h * D + kk).to(tl.float32)
        q = q / tl.sqrt(tl.sum(q * q, axis=0) + 1e-6) * Q_SCALE
        k = k / tl.sqrt(tl.sum(k * k, axis=0) + 1e-6)
        v = tl.load(v_ptr + row * sv + h * D + c).to(tl.float32)
        g = tl.load(g_ptr + row * sg + h * D + kk).to(tl.float32)
        beta = tl.sigmoid(tl.load(b_ptr + row * sb + h).to(tl.float32))
        S = S * tl.exp(g)[:, None]
        delta = beta * (v - tl.sum(S * k[:, None], axis=0))  # [BV]
        S = S + k[:, None] * delta[None, :]
        o = tl.sum(S * q[:, None], axis=0)
        tl.store(o_ptr + row * so + h * D + c, o.to(o_ptr.dtype.element_ty))
{finish}{tail}    tl.store(st, S, cache_modifier=".cs")  # not read again before other layers ran
'''


@dataclass(frozen=True)
class Norm:
    """The carried g_b GEMM + gated norm's operands: ga [rows, rank] (g_a's output), wg [heads
    * d, rank], nw [d], out h [rows, heads * d]; scratch (`norm_scratch`) gs fp32 [>= rows,
    heads * d] (the gate columns) and cnt int32 [>= rows, heads] (tickets, zero between
    launches)."""
    ga: torch.Tensor
    wg: torch.Tensor
    nw: torch.Tensor
    h: torch.Tensor
    gs: torch.Tensor
    cnt: torch.Tensor


def norm_scratch(spec: KDASpec, rows: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(gs, cnt) for steps of at most `rows` rows; the tickets start (and stay) zero."""
    w = spec.heads * spec.head_dim
    return (torch.empty(rows, w, dtype=torch.float32, device=device),
            torch.zeros(rows, spec.heads, dtype=torch.int32, device=device))


def _check_norm(spec: KDASpec, norm: Norm, rows: int) -> None:
    w = spec.heads * spec.head_dim
    for name, t, shape in (("wg", norm.wg, (w, spec.rank)), ("nw", norm.nw, (spec.head_dim,))):
        if tuple(t.shape) != shape or not t.is_contiguous():
            raise ValueError(f"KDA's carried gated norm {name}: contiguous {list(shape)}, got "
                             f"{tuple(t.shape)}")
    for name, t, width in (("ga", norm.ga, spec.rank), ("h", norm.h, w), ("gs", norm.gs, w),
                           ("cnt", norm.cnt, spec.heads)):
        if t.dim() != 2 or t.shape[1] != width or t.shape[0] < rows or t.stride(1) != 1:
            raise ValueError(f"KDA's carried gated norm {name}: [>= {rows}, {width}] with the "
                             f"last dim contiguous, got {tuple(t.shape)}")
    if norm.gs.dtype != torch.float32 or norm.cnt.dtype != torch.int32 \
            or not (norm.gs.is_contiguous() and norm.cnt.is_contiguous()):
        raise ValueError(f"KDA's carried gated norm: gs contiguous fp32 and cnt contiguous "
                         f"int32 (kda.norm_scratch), got {norm.gs.dtype}, {norm.cnt.dtype}")


def launch(kernel, spec: KDASpec, *, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           g: torch.Tensor, b: torch.Tensor, slot: torch.Tensor, state: torch.Tensor,
           out: torch.Tensor, rows: int, seq_rows: int | None = None,
           early_state: bool = False, norm: Norm | None = None,
           run_norm: bool = False) -> None:
    """The first `rows` rows; each sequence's rows contiguous and in position order, at most
    `seq_rows` of them (None: unknown; 1 lets a program skip finding its run's end).
    early_state: the kernel launched just before this one writes no state it reads, so the
    state loads run before the wait for that kernel's writes (PDL), under its tail.
    With spec.rank, `norm` holds the carried gated norm's operands, and `run_norm` says
    whether this launch writes its h (the plan's g_b entry launches itself otherwise)."""
    h, d = spec.heads, spec.head_dim
    kda_chunk.check_operands(h, d, q, k, v, g, b, state, out, rows)
    extra = ()
    if spec.rank:
        if norm is None:
            raise ValueError("KDA: a spec with a carried gated norm needs its operands (norm=)")
        _check_norm(spec, norm, rows if run_norm else 0)
        extra = (norm.ga, norm.ga.stride(0), norm.wg, norm.nw, norm.h, norm.h.stride(0),
                 norm.gs, norm.cnt)
    elif run_norm:
        raise ValueError("KDA: run_norm on a spec that carries no gated norm")
    if rows == 0:
        return
    flags = {"NORM": run_norm} if spec.rank else {}
    kernel[(rows, h, d // BV)](q, k, v, g, b, slot, state, out, rows, q.stride(0), k.stride(0),
                               v.stride(0), g.stride(0), b.stride(0), out.stride(0),
                               state.stride(0), state.stride(1), *extra,
                               SINGLE=seq_rows == 1, EARLY=early_state, num_warps=WARPS, **flags)
