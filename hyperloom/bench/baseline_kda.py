"""The baseline's KDA: plain torch over static per-slot states, as a careful user writes it.
The step's rows are B groups of T (group b is slot b's). The conv is a grouped conv1d over the
window and the rows; the gate and the q / k norms are the reference's; the recurrence is a
per-token loop for a few rows (decode, verify) and the chunked WY form for a prefill: the
in-chunk parts of every chunk at once, then one short loop that carries the state across
chunks."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hyperloom.ir.ops import KDAGateAttrs
from hyperloom.ir.semantics.kda import kda_gate, l2norm

CHUNK, SUB = 64, 16  # chunk rows; sub-blocks whose decay pairs are formed channel by channel
LOOP_ROWS = 16  # at most this many rows a sequence: the per-token loop


def conv(q, k, v, wq, wk, wv, window, *, kernel, dtype):
    """window [B, 3C, K-1] (the last K-1 inputs) -> silu(causal depthwise conv) of q | k | v."""
    b = window.shape[0]
    x = torch.cat([q, k, v], -1).float().view(b, -1, window.shape[1])  # [B, T, 3C]
    ext = torch.cat([window.transpose(1, 2), x], 1)  # [B, K-1+T, 3C]
    w = torch.cat([wq, wk, wv], 0).float()  # [3C, 1, K]
    out = F.silu(F.conv1d(ext.transpose(1, 2), w, groups=w.shape[0]))  # [B, 3C, T]
    window.copy_(ext[:, -(kernel - 1):].transpose(1, 2))
    return out.transpose(1, 2).reshape(x.shape[0] * x.shape[1], -1).to(dtype).chunk(3, -1)


def gate(f, dt_bias, a_log, *, heads, head_dim, lower_bound, dtype):
    at = KDAGateAttrs(heads, head_dim, lower_bound)
    return kda_gate(None, at, f.float(), dt_bias, a_log).to(dtype)


def kda(q, k, v, g, b, state, *, heads, head_dim, dtype):
    """state [B, H, dk, dv] fp32, updated in place; rows [B * T, H * d] -> [B * T, H * dv]."""
    n_seq = state.shape[0]

    def heads_first(x):  # [B * T, H * d] -> [B, H, T, d]
        return x.float().view(n_seq, -1, heads, x.shape[-1] // heads).transpose(1, 2)

    q = l2norm(heads_first(q)) * head_dim ** -0.5
    k, v, g = l2norm(heads_first(k)), heads_first(v), heads_first(g)
    beta = torch.sigmoid(heads_first(b)[..., 0])  # [B, H, T]
    step = _loop if q.shape[2] <= LOOP_ROWS else _chunked
    o, s = step(q, k, v, g, beta, state)
    state.copy_(s)
    return o.transpose(1, 2).reshape(-1, heads * v.shape[-1]).to(dtype)


def _loop(q, k, v, g, beta, s):
    """The recurrence token by token: decay, delta rule, output."""
    out = []
    for i in range(q.shape[2]):
        s = s * g[:, :, i, :, None].exp()
        kv = (k[:, :, i, :, None] * s).sum(-2)  # S^T k: [B, H, dv]
        delta = beta[:, :, i, None] * (v[:, :, i] - kv)
        s = s + k[:, :, i, :, None] * delta[:, :, None, :]
        out.append((q[:, :, i, :, None] * s).sum(-2))
    return torch.stack(out, 2), s


def _chunked(q, k, v, g, beta, s):
    """WY form: with G the in-chunk cumulative decay and A the decayed key products, the chunk's
    deltas are u - w S0 (u, w from one unit-triangular solve); outputs and the next state follow."""
    t = q.shape[2]
    pad = -t % CHUNK
    q, k, v, g = (F.pad(x, (0, 0, 0, pad)).unflatten(2, (-1, CHUNK)) for x in (q, k, v, g))
    beta = F.pad(beta, (0, pad)).unflatten(2, (-1, CHUNK))  # [B, H, N, C]
    gc = g.cumsum(-2)
    akk, aqk = _decayed_products(k, gc), _decayed_products(q, gc, k)
    eye = torch.eye(CHUNK, device=q.device)
    a = eye + (akk * beta[..., None]).tril(-1)
    rhs = beta[..., None] * torch.cat([k * gc.exp(), v], -1)
    w, u = torch.linalg.solve_triangular(a, rhs, upper=False, unitriangular=True).split(
        [k.shape[-1], v.shape[-1]], -1)
    qg, last = q * gc.exp(), gc[..., -1:, :]
    kd, aqk = k * (last - gc).exp(), aqk.tril()
    out = []
    for c in range(q.shape[2]):
        delta = u[:, :, c] - w[:, :, c] @ s
        out.append(qg[:, :, c] @ s + aqk[:, :, c] @ delta)
        s = s * last[:, :, c].transpose(-1, -2).exp() + kd[:, :, c].transpose(-1, -2) @ delta
    return torch.stack(out, 2).flatten(2, 3)[:, :, :t], s


def _decayed_products(x, gc, k=None):
    """A[i, j] = sum_c x_i[c] k_j[c] exp(G_i[c] - G_j[c]) for j <= i, 0 above. A pair in one
    sub-block decays channel by channel; a pair across sub-blocks splits at the row block's
    start into two factors <= 1, so nothing overflows however fast the decay."""
    k = x if k is None else k
    m, dev = CHUNK // SUB, x.device
    xs, gs, ks = (y.unflatten(-2, (m, SUB)) for y in (x, gc, k))  # [.., m, s, d]
    ref = torch.cat([torch.zeros_like(gs[..., :1, :1, :]), gs[..., :-1, -1:, :]], -3)
    before = torch.arange(CHUNK, device=dev) < (torch.arange(m, device=dev) * SUB)[:, None]
    expo = torch.where(before[:, :, None], ref - gc[..., None, :, :], float("-inf"))
    across = torch.einsum("...isd,...ijd->...isj", xs * (gs - ref).exp(),
                          k[..., None, :, :] * expo.exp())  # [.., m, s, C]
    lower = torch.ones(SUB, SUB, dtype=torch.bool, device=dev).tril()[:, :, None]
    diff = torch.where(lower, gs[..., :, None, :] - gs[..., None, :, :], float("-inf"))
    inner = (xs[..., :, None, :] * ks[..., None, :, :] * diff.exp()).sum(-1)  # [.., m, s, s]
    diag = inner.unsqueeze(-2) * torch.eye(m, device=dev)[:, None, :, None]  # [.., m, s, m, s]
    return across.flatten(-3, -2) + diag.flatten(-4, -3).flatten(-2, -1)
