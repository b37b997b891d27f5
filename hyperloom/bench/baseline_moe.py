"""The baseline's routed MoE, as a careful user writes it with static shapes: the sigmoid
router with grouped top-k (the reference's: plain torch already, ties to the lowest expert as
in the engine), then the (token, expert) pairs sorted by expert and run through
torch's grouped GEMM (`torch._grouped_mm`, one launch for every expert's rows), the weighted
results added back to their tokens. torch's grouped GEMM takes bf16 only (under
torch.compile); other dtypes (the CPU tests' fp32) multiply each row by its gathered expert."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hyperloom.ir.ops import RouterAttrs
from hyperloom.ir.semantics.moe import moe_router


def router(x, w, bias, *, top_k, n_group, topk_group, norm_topk_prob, scaling):
    """-> (weights [T, k] fp32, expert ids [T, k] int32): the reference's, in fp32."""
    at = RouterAttrs(top_k, n_group, topk_group, norm_topk_prob, scaling)
    return moe_router(None, at, x.float(), w.float(), bias.float())


def experts(x, weights, ids, wg, wu, wd, *, limit, dtype):
    """x [T, d], ids [T, k] into stacks wg, wu [E, I, d] and wd [E, d, I] -> [T, d]."""
    e, k = wg.shape[0], ids.shape[1]
    flat = ids.flatten().long()
    order = flat.argsort(stable=True)
    token = order // k
    counts = torch.zeros(e, dtype=torch.int32, device=x.device).index_add_(
        0, flat, torch.ones_like(flat, dtype=torch.int32))
    offs = counts.cumsum(0, dtype=torch.int32)
    xs = x[token].to(wg.dtype)

    def gemm(a, stack):
        if stack.dtype == torch.bfloat16:
            return torch._grouped_mm(a, stack.transpose(-2, -1), offs=offs)
        return torch.bmm(stack[flat[order]], a[:, :, None])[..., 0]

    gate, up = gemm(xs, wg).float(), gemm(xs, wu).float()
    if limit is not None:
        gate, up = gate.clamp(max=limit), up.clamp(-limit, limit)
    y = gemm((F.silu(gate) * up).to(wd.dtype), wd).float() * weights.flatten()[order, None]
    return torch.zeros(x.shape, dtype=torch.float32, device=x.device).index_add_(
        0, token, y).to(dtype)
