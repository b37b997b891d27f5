"""The per-sequence state a stateful op declares (name, token-indexed or fixed, type): what the
engine allocates, snapshots and rolls back for each sequence."""

from __future__ import annotations

from collections.abc import Sequence

import sympy

from hyperloom.ir.ops import Op
from hyperloom.ir.types import DType, S, StateDecl, StateKind, TensorType

F32 = DType.F32


def state_decls(op: Op, attrs: object, args: Sequence[TensorType]) -> tuple[StateDecl, ...]:
    """The per-sequence state a node of `op` with `attrs` on operands of types `args` reads and
    writes (empty for stateless ops)."""
    at, tok, fixed = attrs, StateKind.TOKEN, StateKind.FIXED
    if op in (Op.ATTENTION, Op.ROPE_ATTENTION):
        kv = TensorType.make(args[1].dtype, S, at.kv_heads, at.head_dim)
        return (StateDecl(at.state + ".k", tok, kv), StateDecl(at.state + ".v", tok, kv))
    if op is Op.MLA_ATTENTION:
        return (StateDecl(at.state + ".latent", tok, args[1].with_shape(S, at.kv_lora_rank)),)
    if op is Op.DSA_INDEX:
        # pooled: each complete pool's compressed key, computed once when the pool completes
        # (the reference recomputes them from .keys and leaves this alone)
        pools = args[2].with_shape(sympy.floor(S / at.kpool), at.head_dim)
        return (StateDecl(at.state + ".keys", tok, args[2].with_shape(S, 2 * at.head_dim)),
                StateDecl(at.state + ".pooled", tok, pools))
    if op is Op.KDA_CONV:
        window = TensorType.make(F32, 3 * args[0].shape[1], at.kernel - 1)
        return (StateDecl(at.state + ".conv", fixed, window),)
    if op is Op.KDA:
        # each head's S [dk, dv] stored transposed: a column of S is contiguous
        rec = TensorType.make(F32, at.heads, at.head_dim, at.head_dim)
        return (StateDecl(at.state + ".recurrent", fixed, rec),)
    return ()
