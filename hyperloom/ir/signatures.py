"""Type rules of every op: operand arity, shape and dtype checks and result types (the state a
stateful op declares: `state_decls`). The builder and the verifier both call `infer`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sympy

from hyperloom.errors import IRError
from hyperloom.ir import ops
from hyperloom.ir.derive import derived_type, unpacked_shape
from hyperloom.ir.ops import Op
from hyperloom.ir.types import DType, TensorType, promote

Types = Sequence[TensorType]
F32 = DType.F32


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise IRError(msg)


def _shape(t: TensorType, *want: object, what: str) -> None:
    want_e = tuple(sympy.sympify(w) for w in want)
    _need(t.shape == want_e, f"{what} must be [{', '.join(map(str, want_e))}], got {t}")


def _rows(t: TensorType, what: str) -> sympy.Expr:
    _need(t.rank >= 1, f"{what} must have a row dimension, got {t}")
    return t.shape[0]


def _float(t: TensorType, what: str) -> None:
    _need(t.dtype.is_float, f"{what} must be a float tensor, got {t}")


def _int(t: TensorType, what: str) -> None:
    _need(t.dtype in (DType.I32, DType.I64), f"{what} must be an integer tensor, got {t}")


def _rowmeta(slot: TensorType, pos: TensorType, rows: sympy.Expr) -> None:
    for t, what in ((slot, "slot"), (pos, "pos")):
        _int(t, what)
        _shape(t, rows, what=what)


def _embedding(a: Types, _: object) -> tuple[TensorType, ...]:
    ids, w = a
    _int(ids, "ids")
    _need(ids.rank == 1 and w.rank == 2,
          f"embedding wants ids [T] and table [V, D], got {ids}, {w}")
    return (w.with_shape(ids.shape[0], w.shape[1]),)


def _cast(a: Types, at: ops.CastAttrs) -> tuple[TensorType, ...]:
    return (a[0].with_dtype(DType.of(at.dtype)),)


def _rmsnorm(a: Types, _: object) -> tuple[TensorType, ...]:
    x, w = a
    _float(x, "x")
    _shape(w, x.shape[-1], what="norm weight")
    return (TensorType(w.dtype, x.shape),)


def _gated_rmsnorm(a: Types, at: ops.GatedNormAttrs) -> tuple[TensorType, ...]:
    x, gate, w = a
    _need(x.shape == gate.shape, f"gate {gate} must match x {x}")
    _shape(w, at.head_dim, what="gated norm weight")
    _need(sympy.Mod(x.shape[-1], at.head_dim) == 0, f"{x} last dim not a multiple of {at.head_dim}")
    return (x,)


def _layernorm(a: Types, _: object) -> tuple[TensorType, ...]:
    x, w, b = a
    _shape(w, x.shape[-1], what="layernorm weight")
    _shape(b, x.shape[-1], what="layernorm bias")
    return (x,)


def _linear(a: Types, _: object) -> tuple[TensorType, ...]:
    x, w = a
    _float(x, "x")
    _need(w.rank == 2, f"linear weight must be [N, K], got {w}")
    _need(x.rank == 2 and x.shape[1] == w.shape[1], f"linear: x {x} does not match weight {w}")
    return (TensorType(promote(x.dtype, w.dtype), (x.shape[0], w.shape[0])),)


def _rope(a: Types, at: ops.RopeAttrs) -> tuple[TensorType, ...]:
    x, pos = a
    _need(x.rank == 2 and sympy.Mod(x.shape[1], at.head_dim) == 0,
          f"rope input {x} must be [T, heads*{at.head_dim}]")
    _int(pos, "pos")
    return (x,)


def _attention(a: Types, at: ops.AttentionAttrs) -> tuple[TensorType, ...]:
    q, k, v, slot, pos = a
    t = _rows(q, "q")
    _shape(q, t, at.heads * at.head_dim, what="q")
    _shape(k, t, at.kv_heads * at.head_dim, what="k")
    _shape(v, t, at.kv_heads * at.head_dim, what="v")
    _need(at.heads % at.kv_heads == 0, f"heads {at.heads} not a multiple of kv_heads {at.kv_heads}")
    _rowmeta(slot, pos, t)
    return (q,)


def _mla(a: Types, at: ops.MLAAttrs) -> tuple[TensorType, ...]:
    q, c, wkvb, slot, pos = a[:5]
    t = _rows(q, "q")
    _shape(q, t, at.heads * at.qk_head_dim, what="q")
    _shape(c, t, at.kv_lora_rank, what="latent")
    _shape(wkvb, at.heads * (at.qk_head_dim + at.v_head_dim), at.kv_lora_rank, what="kv_b_proj")
    _rowmeta(slot, pos, t)
    if len(a) == 6:
        _int(a[5], "index")
        _need(a[5].rank == 2 and a[5].shape[0] == t, f"index {a[5]} must be [T, width]")
        _need(0 <= at.index_topk <= int(a[5].shape[1]),
              f"index_topk {at.index_topk} outside the index's {a[5].shape[1]} columns")
    return (q.with_shape(t, at.heads * at.v_head_dim),)


def _dsa_index(a: Types, at: ops.DSAIndexAttrs) -> tuple[TensorType, ...]:
    qi, w, ki, gate, ape, slot, pos = a
    t = _rows(qi, "q")
    _shape(qi, t, at.heads * at.head_dim, what="indexer q")
    _shape(w, t, at.heads, what="indexer head weights")
    _shape(ki, t, at.head_dim, what="indexer key")
    _shape(gate, t, at.head_dim, what="pool gate")
    _shape(ape, at.kpool, at.head_dim, what="pool ape")
    _need(at.topk % at.kpool == 0, f"topk {at.topk} must be a multiple of kpool {at.kpool}")
    _rowmeta(slot, pos, t)
    return (TensorType.make(DType.I32, t, at.width),)


def _kda_conv(a: Types, at: ops.KDAConvAttrs) -> tuple[TensorType, ...]:
    q, k, v, wq, wk, wv, slot, pos = a
    t = _rows(q, "q")
    for x, w, name in ((q, wq, "q"), (k, wk, "k"), (v, wv, "v")):
        _shape(x, t, q.shape[1], what=name)
        _shape(w, q.shape[1], 1, at.kernel, what=f"{name}_conv1d weight")
    _rowmeta(slot, pos, t)
    return (q, k, v)


def _kda_gate(a: Types, at: ops.KDAGateAttrs) -> tuple[TensorType, ...]:
    f, dt_bias, a_log = a
    t = _rows(f, "f")
    c = at.heads * at.head_dim
    _shape(f, t, c, what="gate input")
    _shape(dt_bias, c, what="dt_bias")
    _shape(a_log, at.heads, what="A_log")
    return (TensorType.make(F32, t, c),)


def _kda(a: Types, at: ops.KDAAttrs) -> tuple[TensorType, ...]:
    q, k, v, g, b, slot, pos = a
    t = _rows(q, "q")
    c = at.heads * at.head_dim
    for x, name in ((q, "q"), (k, "k"), (v, "v"), (g, "g")):
        _shape(x, t, c, what=name)
    _shape(b, t, at.heads, what="beta logits")
    _rowmeta(slot, pos, t)
    return (q,)


def _swiglu(a: Types, _: object) -> tuple[TensorType, ...]:
    gate, up = a
    _need(gate.shape == up.shape, f"swiglu gate {gate} and up {up} differ")
    return (gate,)


def _router(a: Types, at: ops.RouterAttrs) -> tuple[TensorType, ...]:
    x, w, bias = a
    t = _rows(x, "x")
    if w.rank == 3:  # split_bf16 of an fp32 [E, H]
        _need(w == derived_type("split_bf16", [TensorType.make(F32, *w.shape[1:])]),
              f"router weight {w}: want [E, H] or its split_bf16 terms bf16[3, E, H]")
        w = TensorType.make(F32, *w.shape[1:])
    _shape(w, w.shape[0], x.shape[1], what="router weight")
    _shape(bias, w.shape[0], what="e_score_correction_bias")
    _need(w.shape[0] % at.n_group == 0,
          f"{w.shape[0]} experts not divisible by n_group {at.n_group}")
    return (TensorType.make(F32, t, at.top_k), TensorType.make(DType.I32, t, at.top_k))


def _experts(a: Types, _: object) -> tuple[TensorType, ...]:
    x, wts, ids, wg, wu, wd = a
    t = _rows(x, "x")
    _need(wts.shape == ids.shape and wts.shape[0] == t,
          f"weights {wts} and ids {ids} must be [T, k]")
    e, i, d = unpacked_shape(wg)
    _need(d == x.shape[1], f"expert gate {wg} does not match x {x}")
    for w, shape, what in ((wg, (e, i, d), "gate"), (wu, (e, i, d), "up"), (wd, (e, d, i), "down")):
        flat = w.with_shape(*shape)
        _need(w in (flat, derived_type("pack_k", [flat])) and w.rank == wg.rank,
              f"expert {what} {w}: want {flat} or, packed, {derived_type('pack_k', [flat])}"
              f" (all three alike)")
    return (x,)


def _same(a: Types, _: object) -> tuple[TensorType, ...]:
    x, y = a
    _need(x.shape == y.shape, f"operands differ in shape: {x} vs {y}")
    return (x,)


def _concat(a: Types, _: object) -> tuple[TensorType, ...]:
    x, y = a
    _need(x.rank == 2 and y.rank == 2 and x.shape[0] == y.shape[0], f"cannot concat {x} and {y}")
    return (TensorType(promote(x.dtype, y.dtype), (x.shape[0], x.shape[1] + y.shape[1])),)


def _hc_expand(a: Types, at: ops.HCExpandAttrs) -> tuple[TensorType, ...]:
    (x,) = a
    _need(x.rank == 2, f"hc_expand wants [T, D], got {x}")
    return (TensorType.make(F32, x.shape[0], at.n, x.shape[1]),)


def _hc_pre(a: Types, at: ops.HCPreAttrs) -> tuple[TensorType, ...]:
    x, fn, base, scale, *w = a
    t, n = _rows(x, "streams"), at.n
    _need(x.rank == 3 and x.shape[1] == n, f"streams must be [T, {n}, D], got {x}")
    d = x.shape[2]
    if w:  # the site norm's weight: y = rms(y) * w
        _need(at.out_eps is not None, "hc_pre's norm weight needs out_eps")
        _shape(w[0], d, what="hc_pre norm weight")
    _shape(fn, (2 + n) * n, n * d, what="hc fn")
    _shape(base, (2 + n) * n, what="hc base")
    _shape(scale, 3, what="hc scale")
    y = TensorType.make(DType.of(at.out_dtype) if at.out_dtype else x.dtype, t, d)
    return (y, x.with_shape(t, n), x.with_shape(t, n, n))


def _hc_post(a: Types, _: object) -> tuple[TensorType, ...]:
    f, x, post, comb = a
    t, n, d = x.shape
    _shape(f, t, d, what="block output")
    _shape(post, t, n, what="post")
    _shape(comb, t, n, n, what="comb")
    return (x,)


def _hc_head_mean(a: Types, _: object) -> tuple[TensorType, ...]:
    (x,) = a
    _need(x.rank == 3, f"hc_head_mean wants [T, n, D], got {x}")
    return (x.with_shape(x.shape[0], x.shape[2]),)


def _lm_head(a: Types, _: object) -> tuple[TensorType, ...]:
    x, w = a
    _need(w.rank == 2 and x.shape[-1] == w.shape[1], f"lm_head: x {x} does not match weight {w}")
    return (TensorType.make(F32, x.shape[0], w.shape[0]),)


def _gemm_in(x: TensorType, w: TensorType, eps: float | None) -> None:
    _need(w.rank == 2, f"weight must be [N, K], got {w}")
    _need(x.rank in (2, 3) and x.shape[-1] == w.shape[1], f"x {x} does not match weight {w}")
    _need(x.rank == 2 or eps is not None, f"a stream input {x} needs the norm prologue")


def _norm_linear(a: Types, at: ops.NormLinearAttrs) -> tuple[TensorType, ...]:
    x, w = a
    _gemm_in(x, w, at.eps)
    _need(sum(at.splits) == w.shape[0], f"splits {at.splits} do not add up to {w.shape[0]} rows")
    dt = DType.of(at.out_dtype) if at.out_dtype else w.dtype
    return tuple(TensorType.make(dt, x.shape[0], s) for s in at.splits)


def _swiglu_linear(a: Types, at: ops.SwiGLULinearAttrs) -> tuple[TensorType, ...]:
    x, w = a
    _gemm_in(x, w, at.eps)
    _need(sympy.Mod(w.shape[0], 2) == 0, f"gate|up weight {w} must have an even row count")
    return (w.with_shape(x.shape[0], w.shape[0] / 2),)


def _addend(a: Types, op: Op, f: TensorType) -> None:
    """The addend (operand ops.ADDEND_AT[op]), when given, is added to the projection f: f's own
    shape and dtype."""
    at = ops.ADDEND_AT[op]
    if len(a) == at + 1:
        _need(a[at] == f, f"the addend (operand {at + 1}) must be the projection's {f}, "
              f"got {a[at]}")


def _linear_residual(a: Types, _: object) -> tuple[TensorType, ...]:
    x, w, stream = a[:3]
    (f,) = _linear((x, w), None)
    _addend(a, Op.LINEAR_RESIDUAL, f)
    return _same((stream, f), None)


def _linear_kda_gate(a: Types, at: ops.KDAGateAttrs) -> tuple[TensorType, ...]:
    x, w, dt_bias, a_log = a
    (f,) = _linear((x, w), None)
    return _kda_gate((f, dt_bias, a_log), at)


def _linear_gated_norm(a: Types, at: ops.GatedNormAttrs) -> tuple[TensorType, ...]:
    x, w, normed, nw = a
    (f,) = _linear((x, w), None)
    return _gated_rmsnorm((normed, f, nw), at)


def _linear_hc_post(a: Types, at: ops.EpilogueLinearAttrs) -> tuple[TensorType, ...]:
    x, w, streams, post, comb = a[:5]
    _need((len(a) == 7) == (at.group > 0), f"a gated norm prologue (group {at.group}) takes "
          f"its gate and weight as operands 6 and 7; got {len(a)} operands")
    if at.group:
        _gated_rmsnorm((x, *a[5:]), ops.GatedNormAttrs(at.eps, at.group))
    (f,) = _linear((x, w), None)
    if not at.group:  # operands 6 and 7 are the gated norm's
        _addend(a, Op.LINEAR_HC_POST, f)
    return _hc_post((f, streams, post, comb), None)


def _rope_attention(a: Types, at: ops.RopeAttentionAttrs) -> tuple[TensorType, ...]:
    _rope((a[0], a[4]), at.rope())
    return _attention(a, at.attention())


def _embed_streams(a: Types, at: ops.HCExpandAttrs) -> tuple[TensorType, ...]:
    (x,) = _embedding(a, None)
    if at.n == 1:
        return (x.with_dtype(F32),)
    return _hc_expand((x,), at)


@dataclass(frozen=True, slots=True)
class Signature:
    arity: tuple[int, ...]
    infer: Callable[[Types, object], tuple[TensorType, ...]]


SIGNATURES: dict[Op, Signature] = {
    Op.EMBEDDING: Signature((2,), _embedding),
    Op.CAST: Signature((1,), _cast),
    Op.RMSNORM: Signature((2,), _rmsnorm),
    Op.GATED_RMSNORM: Signature((3,), _gated_rmsnorm),
    Op.LAYERNORM: Signature((3,), _layernorm),
    Op.LINEAR: Signature((2,), _linear),
    Op.ROPE: Signature((2,), _rope),
    Op.ATTENTION: Signature((5,), _attention),
    Op.MLA_ATTENTION: Signature((5, 6), _mla),
    Op.DSA_INDEX: Signature((7,), _dsa_index),
    Op.KDA_CONV: Signature((8,), _kda_conv),
    Op.KDA_GATE: Signature((3,), _kda_gate),
    Op.KDA: Signature((7,), _kda),
    Op.SWIGLU: Signature((2,), _swiglu),
    Op.MOE_ROUTER: Signature((3,), _router),
    Op.MOE_EXPERTS: Signature((6,), _experts),
    Op.ADD: Signature((2,), _same),
    Op.CONCAT: Signature((2,), _concat),
    Op.RESIDUAL_ADD: Signature((2,), _same),
    Op.HC_EXPAND: Signature((1,), _hc_expand),
    Op.HC_PRE: Signature((4, 5), _hc_pre),
    Op.HC_POST: Signature((4,), _hc_post),
    Op.HC_HEAD_MEAN: Signature((1,), _hc_head_mean),
    Op.LM_HEAD: Signature((2,), _lm_head),
    Op.NORM_LINEAR: Signature((2,), _norm_linear),
    Op.SWIGLU_LINEAR: Signature((2,), _swiglu_linear),
    Op.LINEAR_RESIDUAL: Signature((3, 4), _linear_residual),
    Op.LINEAR_KDA_GATE: Signature((4,), _linear_kda_gate),
    Op.LINEAR_GATED_NORM: Signature((4,), _linear_gated_norm),
    Op.LINEAR_HC_POST: Signature((5, 6, 7), _linear_hc_post),
    Op.ROPE_ATTENTION: Signature((5,), _rope_attention),
    Op.EMBED_STREAMS: Signature((2,), _embed_streams),
}


def infer(op: Op, attrs: object, args: Types) -> tuple[TensorType, ...]:
    """Result types of `op` on operands of types `args`; IRError says what does not fit."""
    sig = SIGNATURES[op]
    want = ops.ATTRS[op]
    _need(type(attrs) is want, f"{op.value} wants {want.__name__}, got {type(attrs).__name__}")
    _need(len(args) in sig.arity, f"{op.value} takes {' or '.join(map(str, sig.arity))} operands, "
          f"got {len(args)}")
    return sig.infer(args, attrs)
