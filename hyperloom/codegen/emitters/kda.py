"""KDA recurrence (`hyperloom.ir.semantics.kda.kda`): the per-token delta rule over each
sequence's fp32 state, for decode and verify rows (and prefill in its recurrent form).

Inputs q, k, v, g [rows, heads*d] (act dtype or fp32; g is the log decay, per channel), b
[rows, heads] (beta logits), slot int64 [rows]; state fp32 [slots, heads, d, d] (dk x dv), read
and written in place; out [rows, heads*d].

Grid (rows, heads, d / BV). Every column block of S^T is independent (decay scales rows, the
delta rule and the output are per column), so a program owns S[:, block] of one head: the
first row of each sequence's run in the step loads it once, walks the run's tokens in order
(l2norm q and k, q * d^-1/2, S = exp(g) S, delta = sigmoid(b) (v - S^T k), S += k delta^T,
o = S^T q) and stores it once. Programs of a run's later rows and of padding rows (slot < 0)
load nothing and return; when every run is one row (SINGLE: a decode step) no program looks for its
run's end, so its state load waits on its slot load alone. Rows of a sequence are contiguous
in a step (`ir.state.segments`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hyperloom.codegen.emitters import kda_chunk
from hyperloom.codegen.emitters.loops import runtime_loop
from hyperloom.codegen.emitters.text import RUN_STOP, comment, pdl_if
from hyperloom.passes.kernel_plan import KDA_CHUNKED_ROWS

BV = 64  # state columns (dv) per program: a [d, BV] fp32 tile, 64 registers a thread at d = 128
# and 4 warps. H200, one decode step at 64 heads x 128 (state not in L2, SINGLE, the state's
# load evict-first and store streaming): batch 16 38.5 us against 42.3 at 32 columns (43.6 and
# 39.8 without the cache hints; 128 columns 46.4), batch 64 145 us against 168
# steps of at most FEW_ROWS rows: more, smaller programs (16 columns, 1 warp): batch 1 4.4 us
# against 5.2 to 5.9 with 8 or 32 columns or 2 warps
FEW_ROWS, FEW_BV, FEW_WARPS = 2, 16, 1
# a step whose longest run has CHUNKED_ROWS rows takes emitters.kda_chunk (the plan counts its
# launches by the same rule)
CHUNKED_ROWS = KDA_CHUNKED_ROWS


@dataclass(frozen=True)
class KDASpec:
    heads: int
    head_dim: int

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


def _recurrent(name: str, spec: KDASpec, header: str) -> str:
    head, tail = runtime_loop("i", "r", "stop", "1", " " * 4)
    return f'''{comment(header)}import triton
import triton.language as tl

{RUN_STOP}

@triton.jit
def {name}(q_ptr, k_ptr, v_ptr, g_ptr, b_ptr, slot_ptr, state_ptr, o_ptr, rows,
        sq, sk, sv, sg, sb, so, st_slot, st_head,
        H: tl.constexpr = {spec.heads}, D: tl.constexpr = {spec.head_dim},
        BV: tl.constexpr = {min(BV, spec.head_dim)}, SINGLE: tl.constexpr = False,
        EARLY: tl.constexpr = False, Q_SCALE: tl.constexpr = {spec.head_dim ** -0.5!r}):
{pdl_if("    ", "not EARLY")}    r = tl.program_id(0)
    h = tl.program_id(1)
    c = tl.program_id(2) * BV + tl.arange(0, BV)  # this program's state columns (dv)
    kk = tl.arange(0, D)  # state rows (dk)
    s = tl.load(slot_ptr + r)  # written by the host before the step
    if SINGLE:  # every run is one row (a decode step): the state load waits on one slot load
        stop = tl.where(s < 0, r, r + 1)  # padding: no run
    else:
        stop = _run_stop(slot_ptr, r, rows)  # r: padding, or not the first row of its run
    st = state_ptr + s * st_slot + h * st_head + kk[:, None] * D + c[None, :]
    S = tl.load(st, mask=(stop > r) & (kk[:, None] < D), other=0.0,
                eviction_policy="evict_first")  # [D, BV] fp32, read once
{pdl_if("    ", "EARLY")}    if stop == r:
        return
{head}        row = i.to(tl.int64)
        q = tl.load(q_ptr + row * sq + h * D + kk).to(tl.float32)
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
{tail}    tl.store(st, S, cache_modifier=".cs")  # not read again before other layers ran
'''


def launch(kernel, spec: KDASpec, *, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           g: torch.Tensor, b: torch.Tensor, slot: torch.Tensor, state: torch.Tensor,
           out: torch.Tensor, rows: int, seq_rows: int | None = None,
           early_state: bool = False) -> None:
    """The first `rows` rows; each sequence's rows contiguous and in position order, at most
    `seq_rows` of them (None: unknown; 1 lets a program skip finding its run's end).
    early_state: the kernel launched just before this one writes no state it reads, so the
    state loads run before the wait for that kernel's writes (PDL), under its tail."""
    h, d = spec.heads, spec.head_dim
    kda_chunk.check_operands(h, d, q, k, v, g, b, state, out, rows)
    if rows == 0:
        return
    bv, warps = (FEW_BV, FEW_WARPS) if rows <= FEW_ROWS else (BV, 4)
    bv = min(bv, d)
    kernel[(rows, h, d // bv)](q, k, v, g, b, slot, state, out, rows, q.stride(0), k.stride(0),
                               v.stride(0), g.stride(0), b.stride(0), out.stride(0),
                               state.stride(0), state.stride(1), BV=bv, SINGLE=seq_rows == 1,
                               EARLY=early_state, num_warps=warps)
