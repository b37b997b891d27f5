"""MLA (no RoPE) over a latent cache, restricted to the tokens a DSA indexer selected
(`hyperloom.ir.semantics.attention.mla_attention` with an index), in absorbed form. kv_b_proj
[H * (dk + dv), R] holds per head a key part Wk [dk, R] and a value part Wv [dv, R]; scores
q . (Wk c) = (Wk^T q) . c and values Wv c, so attention runs on the R-wide latents c themselves
and a head's output is Wv (sum_j p_j c_j). Four kernels in one module (`kernel_names`),
launched absorb, [dense,] attend, out.

{name}_absorb, grid (cdiv(rows, BM), H, cdiv(R, BR)): qa [rows, H, R] = q_h Wk_h (the latent
cache's dtype); the programs of head 0 also write the rows' latents into latent [slots, S, R]
at (slot, pos) (padding rows, slot < 0, and positions past the capacity write nothing).

{name}, grid (rows, cdiv(H, BH), splits): program (r, hb, sp) takes chunk sp of the row's index
entries (its selected token ids, -1 = none; the index width is fixed, so the cost tracks
index_topk, not the context) and runs an online softmax over their latents for BH heads,
storing fp32 partials (acc [BH, R], max, sum). `splits` spreads a decode step's few rows over
the GPU; a wide step takes one. Fixed per row count, so a captured launch stays valid. With the
DSA layout (spec.head = topk: chosen tokens first, -1 up to column topk, then the tail), a row
at position p has at most e = min(p + 1, topk) chosen columns, so its splits share the columns
[0, e) and [topk, W) only: a prefill's rows and a short context's skip the -1 blocks (a
2048-token prefill walks half the blocks; a decode row at 1024 tokens half the chunk a split).

{name}_dense, grid (cdiv(rows, DENSE_BM), cdiv(H, DENSE_HB)), a step whose longest run has
`dense_rows` rows (a prefill chunk) over a selection that keeps the tail (spec.dense): a row below
topk then sees every token up to its own (all complete pools fit the topk, and the tail is
taken), so the rows of a run (`_dense_row`: below topk, with a neighbour row of its sequence)
attend as causal attention over the latent cache in token order, without the index. A program
takes DENSE_BM rows x DENSE_HB heads as the M side of its products, so each latent tile it loads
serves all of them; a run at a time (rows of a sequence are contiguous), to the furthest of its
rows' tokens. It writes split 0's partials; the attend programs of those rows exit, and the
step takes one split.

{name}_out, grid (cdiv(rows, BM), H, cdiv(dv, BV)): merges a head's partials into o_lat [BM, R]
(rescaled to a common max, divided by the sum; a row that sees no token gets zeros, as the
reference) and projects o = o_lat Wv^T into out [rows, H * dv].

Paged (spec.block_size = B > 0): latent is a block pool [num_blocks, B, R] behind a block table
(`paging`); the latent write and the gather look each token's block up.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hyperloom.codegen.emitters import paging
from hyperloom.codegen.emitters.ints import cdiv, next_power_of_2
from hyperloom.codegen.emitters.loops import runtime_loop
from hyperloom.codegen.emitters.text import comment, pdl
from hyperloom.config import CONFIG
from hyperloom.errors import require
from hyperloom.passes.kernel_plan import MLA_DENSE_ROWS

BN = 32  # index entries per iteration
MAX_BH = 32  # heads per attention program: acc [32, 512] fp32 is 64 registers a thread at 8 warps
# in a step of WIDE_ROWS rows or more (a prefill's rows past topk), WIDE_BH heads a program:
# each row's latents gathered once, not once for every 32 heads, and M 64 takes a wgmma (ptxas
# for sm_90 at rank 512: 244 registers, no spills); a decode step keeps MAX_BH and its splits
WIDE_BH = 64
ATTEND_WARPS = 8
MAX_SPLITS = 16
LOG2E = 1.4426950408889634
DENSE_ROWS = MLA_DENSE_ROWS  # the plan counts the dense kernel's launch by the same rule
# a dense program: DENSE_BM rows x DENSE_HB heads (M 64, the least a wgmma takes), DENSE_BN
# tokens an iteration. H200, GLM-5.3-Flash's MLA over a prefill (bench/sweeps/mla_prefill.py,
# d8e231b): 2048 tokens 1.68-1.69 ms at M 64, 2.99-3.01 at M 32 (8 rows), 2.03 at 64 tokens an
# iteration, 2.08 with every row in the split form; 8192 tokens 12.75 ms, against 14.01 at M 32
# and 12.60 split. ptxas for sm_90 at rank 512: 255 registers and 196 bytes of spills (M 32:
# 252, none), yet the latent tile serving twice the lanes wins
DENSE_BM, DENSE_HB, DENSE_BN, DENSE_WARPS = 16, 4, 32, 8
# absorb and merge programs take 16 rows in a step of FEW_ROWS rows or less, else 64; from
# WIDE_ROWS rows (enough 64-row programs to fill the GPU) up to WIDE_COLS columns, else 64. On
# 64-column blocks a merge read a head's fp32 partials once a block (4 times at dv 256: about
# 1 GB at 2048 rows, 300 us of GLM-5.3-Flash's prefill), the absorb its q 8 times at rank 512.
# ptxas for sm_90 at 64 rows x 256 columns, 8 warps: absorb 106 registers, merge 155, no spills
WIDE_COLS, FEW_ROWS, WIDE_ROWS = 256, 16, 256


@dataclass(frozen=True)
class MLASpec:
    heads: int
    qk_head_dim: int
    v_head_dim: int
    rank: int  # kv_lora_rank R
    scale: float
    width: int  # index entries per row
    block_size: int = 0  # tokens per block of a paged latent cache; 0: contiguous per slot
    head: int = 0  # index columns before the DSA tail (MLAAttrs.index_topk); 0: no layout known

    @property
    def dense(self) -> bool:
        """The index is a DSA selection that keeps the tail (width > head = topk): a row below
        topk has chosen every token up to its own, so it may attend in the dense form."""
        return 0 < self.head < self.width

    @property
    def head_block(self) -> int:
        """Heads per attention program (BH): programs of a row share its latents through L2,
        so fewer, wider programs gather less; at least 16 for tl.dot."""
        return max(16, min(MAX_BH, next_power_of_2(self.heads)))

    @property
    def head_blocks(self) -> int:
        return cdiv(self.heads, self.head_block)

    @property
    def wide_head_block(self) -> int:
        """Heads per attention program in a step of WIDE_ROWS rows or more."""
        return max(16, min(WIDE_BH, next_power_of_2(self.heads)))


def kernel_names(name: str) -> tuple[str, str, str, str]:
    """(latent write + query absorption, split attention, merge + value projection, dense
    attention of a long run's rows below topk)."""
    return f"{name}_absorb", name, f"{name}_out", f"{name}_dense"


def _up() -> str:
    """The interpreter mis-computes low-precision dots: upcast every operand there."""
    return ".to(tl.float32)" if CONFIG.interpret else ""


def _p2(n: int, least: int = 16) -> int:
    return max(least, next_power_of_2(n))


def _br(spec: MLASpec, wide: bool = False) -> int:
    """Latent columns per absorb program (each reads its rows' q of a head once)."""
    return min(WIDE_COLS if wide else 64, _p2(spec.rank))


def _bv(spec: MLASpec, wide: bool = False) -> int:
    """Output columns per merge program (each reads its rows' partials of a head once)."""
    return min(WIDE_COLS if wide else 64, _p2(spec.v_head_dim))


def _absorb_source(name: str, spec: MLASpec) -> str:
    up, dk, r, bs = _up(), spec.qk_head_dim, spec.rank, spec.block_size
    table, page = paging.params(bs)
    at = paging.row(bs, "lat", "s", "p", "keep")
    return f'''
@triton.jit
def {name}(q_ptr, c_ptr, w_ptr, slot_ptr, pos_ptr, lat_ptr, qa_ptr, rows, sq, sc, lat_s0,
        lat_s1, capacity,{table} BM: tl.constexpr, H: tl.constexpr = {spec.heads},
        DK: tl.constexpr = {dk}, DV: tl.constexpr = {spec.v_head_dim}, R: tl.constexpr = {r},
        BK: tl.constexpr = {min(64, _p2(dk))}, BR: tl.constexpr = {_br(spec)}{page}):
{pdl("    ")}    h = tl.program_id(1)
    m = tl.program_id(0) * BM + tl.arange(0, BM)
    m64 = m.to(tl.int64)
    rc = tl.program_id(2) * BR + tl.arange(0, BR)
    mm = m < rows
    rm = rc < R
    if h == 0:  # the rows' latents into the cache
        s = tl.load(slot_ptr + m, mask=mm, other=-1).to(tl.int64)
        p = tl.load(pos_ptr + m, mask=mm, other=-1).to(tl.int64)
        keep = (s >= 0) & (p >= 0) & (p < capacity)
        x = tl.load(c_ptr + m64[:, None] * sc + rc[None, :], mask=keep[:, None] & rm[None, :],
                    other=0.0)
        dst = lat_ptr + ({at})[:, None] + rc[None, :]
        tl.store(dst, x.to(lat_ptr.dtype.element_ty), mask=keep[:, None] & rm[None, :])
    acc = tl.zeros((BM, BR), tl.float32)
    for k0 in range(0, DK, BK):
        kk = k0 + tl.arange(0, BK)
        km = kk < DK
        a = tl.load(q_ptr + m64[:, None] * sq + h * DK + kk[None, :],
                    mask=mm[:, None] & km[None, :], other=0.0)
        b = tl.load(w_ptr + (h * (DK + DV) + kk)[:, None] * R + rc[None, :],
                    mask=km[:, None] & rm[None, :], other=0.0)
        acc += tl.dot(a.to(b.dtype){up}, b{up})
    tl.store(qa_ptr + (m64[:, None] * H + h) * R + rc[None, :],
             acc.to(qa_ptr.dtype.element_ty), mask=mm[:, None] & rm[None, :])
'''


def _attend_source(name: str, spec: MLASpec) -> str:
    bs = spec.block_size
    table, page = paging.params(bs)
    at = paging.row(bs, "lat", "s", "t", "ok")
    head, tail = runtime_loop("v0", "lo", "hi", "BN", " " * 8)
    return f'''
@triton.jit
def {name}(qa_ptr, idx_ptr, slot_ptr, pos_ptr, lat_ptr, acc_ptr, ml_ptr, rows, sidx, lat_s0,
        lat_s1,{table} H: tl.constexpr = {spec.heads},
        R: tl.constexpr = {spec.rank}, RP: tl.constexpr = {_p2(spec.rank)},
        W: tl.constexpr = {spec.width}, HEAD: tl.constexpr = {spec.head},
        BH: tl.constexpr = {spec.head_block}, BN: tl.constexpr = {BN},
        QK_SCALE: tl.constexpr = {spec.scale * LOG2E!r}, DENSE: tl.constexpr = False{page}):
{pdl("    ")}    r = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1) * BH + tl.arange(0, BH)
    sp = tl.program_id(2)
    s = tl.load(slot_ptr + r).to(tl.int64)
    p = tl.load(pos_ptr + r)
    if DENSE:
        if _dense_row(slot_ptr, r, s, p, rows, HEAD):  # {name}_dense's row
            return
    c = tl.arange(0, RP)
    hm = h < H
    cm = c < R
    q = tl.load(qa_ptr + (r * H + h[:, None]) * R + c[None, :], mask=hm[:, None] & cm[None, :],
                other=0.0)
    # finite floor: a split that sees no token keeps m = -1e30, l = 0, acc = 0
    m_i = tl.full((BH,), -1e30, tl.float32)
    l_i = tl.zeros((BH,), tl.float32)
    acc = tl.zeros((BH, RP), tl.float32)
    n = tl.arange(0, BN)
    ce = (p * 0 + W).to(tl.int32)  # the row's live columns, [0, ce) then [HEAD, W): [0, live)
    live = ce
    if HEAD > 0:
        ce = tl.minimum(p + 1, HEAD).to(tl.int32)
        live = ce + (W - HEAD)
    splits = tl.num_programs(2)
    per = ((live + splits - 1) // splits + BN - 1) // BN * BN  # whole BN blocks a split
    lo = sp * per
    hi = tl.minimum(lo + per, live)
    if s >= 0:
{head}            v = v0 + n
            j = tl.where(v < ce, v, v + (HEAD - ce))  # the index column of live column v
            t = tl.load(idx_ptr + r * sidx + j, mask=v < hi, other=-1).to(tl.int64)
            ok = (t >= 0) & (t <= p)
            lat = tl.load(lat_ptr + ({at})[:, None] + c[None, :],
                          mask=ok[:, None] & cm[None, :], other=0.0)
            m_i, l_i, acc = _attend_tile(q, lat, ok[None, :], m_i, l_i, acc, QK_SCALE)
{tail}    part = (sp * rows + r) * H + h  # partials of (split, row, head)
    tl.store(acc_ptr + part[:, None] * R + c[None, :], acc, mask=hm[:, None] & cm[None, :])
    tl.store(ml_ptr + part * 2, m_i, mask=hm)
    tl.store(ml_ptr + part * 2 + 1, l_i, mask=hm)
'''


def _tile_source() -> str:
    up = _up()
    return f'''
@triton.jit
def _attend_tile(q, lat, seen, m_i, l_i, acc, QK_SCALE: tl.constexpr):
    """One tile of the online softmax: q [M, R] against the latents lat [BN, R], where seen
    [M or 1, BN] (else no token), folded into the running max, sum and acc [M, R]."""
    sc = tl.where(seen, tl.dot(q{up}, tl.trans(lat{up})) * QK_SCALE, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(sc, axis=1))
    alpha = tl.exp2(m_i - m_new)
    e = tl.exp2(sc - m_new[:, None])
    l_i = l_i * alpha + tl.sum(e, axis=1)
    acc = acc * alpha[:, None] + tl.dot(e.to(lat.dtype){up}, lat{up})
    return m_new, l_i, acc
'''


_DENSE_ROW = '''
@triton.jit
def _dense_row(slot_ptr, r, s, p, rows, HEAD: tl.constexpr):
    """Whether row r (slot s, position p) attends in the dense form: a live row below HEAD with
    a neighbour row of its sequence (a lone row, a decode step's, stays with the split form).
    Both attention kernels decide by this, so every row is taken by exactly one."""
    prev = tl.load(slot_ptr + r - 1, mask=(r > 0) & (r <= rows), other=-1)
    after = tl.load(slot_ptr + r + 1, mask=r + 1 < rows, other=-1)
    return (s >= 0) & (p >= 0) & (p < HEAD) & ((prev == s) | (after == s))
'''


def _dense_source(name: str, spec: MLASpec) -> str:
    bs = spec.block_size
    table, page = paging.params(bs)
    at = paging.row(bs, "lat", "s0", "t", "ok")
    paged = table.strip() + " " if table else ""
    head, tail = runtime_loop("t0", "0", "top", "BN", " " * 8)
    return f'''
@triton.jit
def {name}(qa_ptr, slot_ptr, pos_ptr, lat_ptr, acc_ptr, ml_ptr, rows, lat_s0, lat_s1, capacity,
        {paged}H: tl.constexpr = {spec.heads}, R: tl.constexpr = {spec.rank},
        RP: tl.constexpr = {_p2(spec.rank)}, HEAD: tl.constexpr = {spec.head},
        BM: tl.constexpr = {DENSE_BM}, HB: tl.constexpr = {DENSE_HB},
        BN: tl.constexpr = {DENSE_BN}, QK_SCALE: tl.constexpr = {spec.scale * LOG2E!r}{page}):
{pdl("    ")}    i = tl.arange(0, BM * HB)  # lane i: row m, head h
    m = tl.program_id(0) * BM + i // HB
    h = tl.program_id(1) * HB + i % HB
    live = (m < rows) & (h < H)
    s = tl.load(slot_ptr + m, mask=live, other=-1).to(tl.int64)
    p = tl.load(pos_ptr + m, mask=live, other=-1).to(tl.int32)
    todo = live & _dense_row(slot_ptr, m.to(tl.int64), s, p, rows, HEAD)
    c = tl.arange(0, RP)
    cm = c < R
    part = m.to(tl.int64) * H + h  # split 0's partials of (row, head)
    q = tl.load(qa_ptr + part[:, None] * R + c[None, :], mask=todo[:, None] & cm[None, :],
                other=0.0)
    n = tl.arange(0, BN)
    while tl.max(todo.to(tl.int32), axis=0) > 0:  # one run (sequence) of the block at a time
        s0 = tl.min(tl.where(todo, s, 1 << 62), axis=0)
        mine = todo & (s == s0)
        lim = tl.where(mine, p + 1, 0)  # a lane sees tokens [0, lim)
        top = tl.max(lim, axis=0)
        m_i = tl.full((BM * HB,), -1e30, tl.float32)
        l_i = tl.zeros((BM * HB,), tl.float32)
        acc = tl.zeros((BM * HB, RP), tl.float32)
{head}            t = t0 + n
            ok = (t < top) & (t < capacity)  # a row past the cache reads none of it
            lat = tl.load(lat_ptr + ({at})[:, None] + c[None, :],
                          mask=ok[:, None] & cm[None, :], other=0.0)
            m_i, l_i, acc = _attend_tile(q, lat, t[None, :] < lim[:, None], m_i, l_i, acc,
                                         QK_SCALE)
{tail}        tl.store(acc_ptr + part[:, None] * R + c[None, :], acc,
                 mask=mine[:, None] & cm[None, :])
        tl.store(ml_ptr + part * 2, m_i, mask=mine)
        tl.store(ml_ptr + part * 2 + 1, l_i, mask=mine)
        todo = todo & ~mine
'''


def _out_source(name: str, spec: MLASpec) -> str:
    up, dv, r = _up(), spec.v_head_dim, spec.rank
    return f'''
@triton.jit
def {name}(acc_ptr, ml_ptr, w_ptr, o_ptr, rows, so, SPLITS: tl.constexpr, BM: tl.constexpr,
        H: tl.constexpr = {spec.heads}, DK: tl.constexpr = {spec.qk_head_dim},
        DV: tl.constexpr = {dv}, R: tl.constexpr = {r}, BK: tl.constexpr = {min(64, _p2(r))},
        BV: tl.constexpr = {_bv(spec)}):
{pdl("    ")}    h = tl.program_id(1)
    m = tl.program_id(0) * BM + tl.arange(0, BM)
    m64 = m.to(tl.int64)
    v = tl.program_id(2) * BV + tl.arange(0, BV)
    mm = m < rows
    vm = v < DV
    top = tl.full((BM,), -1e30, tl.float32)
    for sp in range(SPLITS):
        top = tl.maximum(top, tl.load(ml_ptr + ((sp * rows + m64) * H + h) * 2, mask=mm,
                                      other=-1e30))
    total = tl.zeros((BM,), tl.float32)
    for sp in range(SPLITS):
        ml = ml_ptr + ((sp * rows + m64) * H + h) * 2
        f = tl.exp2(tl.load(ml, mask=mm, other=-1e30) - top)
        total += f * tl.load(ml + 1, mask=mm, other=0.0)
    inv = tl.where(total > 0.0, 1.0 / tl.where(total > 0.0, total, 1.0), 0.0)
    out = tl.zeros((BM, BV), tl.float32)
    for k0 in range(0, R, BK):
        kk = k0 + tl.arange(0, BK)
        km = kk < R
        o = tl.zeros((BM, BK), tl.float32)
        for sp in range(SPLITS):
            part = (sp * rows + m64) * H + h
            f = tl.exp2(tl.load(ml_ptr + part * 2, mask=mm, other=-1e30) - top)
            o += f[:, None] * tl.load(acc_ptr + part[:, None] * R + kk[None, :],
                                      mask=mm[:, None] & km[None, :], other=0.0)
        wv = tl.load(w_ptr + (h * (DK + DV) + DK + v)[None, :] * R + kk[:, None],
                     mask=km[:, None] & vm[None, :], other=0.0)
        out += tl.dot((o * inv[:, None]).to(wv.dtype){up}, wv{up})
    tl.store(o_ptr + m64[:, None] * so + h * DV + v[None, :], out.to(o_ptr.dtype.element_ty),
             mask=mm[:, None] & vm[None, :])
'''


def source(name: str, spec: MLASpec, header: str = "") -> str:
    absorb, attend, out, dense = kernel_names(name)
    return (f"{comment(header)}import triton\nimport triton.language as tl\n\n{_tile_source()}\n"
            f"{_DENSE_ROW}\n"
            f"{_absorb_source(absorb, spec)}\n{_attend_source(attend, spec)}\n"
            f"{_out_source(out, spec)}\n{_dense_source(dense, spec)}")


def splits(spec: MLASpec, rows: int, max_splits: int = MAX_SPLITS) -> int:
    """Index chunks per row: enough programs to fill the GPU at this row count."""
    want = cdiv(2 * CONFIG.sms, max(1, rows) * spec.head_blocks)
    return max(1, min(want, max_splits, cdiv(spec.width, BN)))


def scratch(spec: MLASpec, max_rows: int, dtype: torch.dtype, device,
            max_splits: int = MAX_SPLITS) -> tuple[torch.Tensor, ...]:
    """(qa [max_rows, H, R] in `dtype` (the latent cache's), fp32 partials acc [n, H, R] and
    (max, sum) [n, H, 2]), n the most (split, row) pairs a launch of <= max_rows rows takes.
    Allocate once, outside captured launches."""
    n = max(r * splits(spec, r, max_splits) for r in range(1, max_rows + 1))
    f32 = dict(dtype=torch.float32, device=device)
    return (torch.empty((max_rows, spec.heads, spec.rank), dtype=dtype, device=device),
            torch.empty((n, spec.heads, spec.rank), **f32),
            torch.empty((n, spec.heads, 2), **f32))


def check(spec: MLASpec, *, q, c, wkvb, latent, index, out, block_table=None) -> int:
    """Operand shapes; returns the positions one slot's latent cache holds."""
    h, dk, dv, r = spec.heads, spec.qk_head_dim, spec.v_head_dim, spec.rank
    require(tuple(wkvb.shape) == (h * (dk + dv), r) and wkvb.is_contiguous(),
            lambda: f"MLA kv_b_proj: contiguous [{h * (dk + dv)}, {r}], got {tuple(wkvb.shape)}")
    require(latent.dim() == 3 and latent.shape[2] == r and latent.stride(2) == 1,
            lambda: f"MLA latent cache: [slots, S, {r}], got {tuple(latent.shape)}")
    for what, t, n in (("q", q, h * dk), ("latent rows", c, r), ("index", index, spec.width),
                       ("out", out, h * dv)):
        require(t.dim() == 2 and t.shape[1] == n and t.stride(1) == 1,
                lambda: f"MLA {what}: [rows, {n}] with a contiguous last dim, got "
                        f"{tuple(t.shape)}")
    return paging.table_args(spec.block_size, block_table, latent)[1]


def launch(kernels, spec: MLASpec, *, q: torch.Tensor, c: torch.Tensor, wkvb: torch.Tensor,
           slot: torch.Tensor, pos: torch.Tensor, index: torch.Tensor, latent: torch.Tensor,
           out: torch.Tensor, work: tuple[torch.Tensor, ...], rows: int,
           block_table: torch.Tensor | None = None, max_splits: int = MAX_SPLITS,
           seq_rows: int | None = None, dense_rows: int | None = None) -> None:
    """Latent write, absorbed query, split attention over the index, merge + value projection
    of the first `rows` rows; work = scratch(spec, >= rows, latent.dtype, ...); block_table
    int32 [slots, max_blocks] when paged (latent is then a block pool). A step whose longest
    run has `seq_rows` (None: unknown) >= dense_rows (None: DENSE_ROWS) rows attends its dense
    rows in the dense form."""
    capacity = check(spec, q=q, c=c, wkvb=wkvb, latent=latent, index=index, out=out,
                     block_table=block_table)
    table = paging.table_args(spec.block_size, block_table, latent)[0]
    if rows == 0:
        return
    absorb, attend, merge, attend_dense = kernels
    qa, acc, ml = work
    least = DENSE_ROWS if dense_rows is None else dense_rows
    dense = spec.dense and seq_rows is not None and seq_rows >= least
    n = 1 if dense else splits(spec, rows, max_splits)
    require(qa.shape[0] >= rows and acc.shape[0] >= rows * n and ml.shape[0] >= rows * n,
            lambda: f"MLA scratch for {rows} rows x {n} splits: qa {tuple(qa.shape)}, acc "
                    f"{tuple(acc.shape)}, ml {tuple(ml.shape)} (scratch(spec, >= {rows}, ...) "
                    "allocates it)")
    wide = rows >= WIDE_ROWS
    h, (bm, warps) = spec.heads, ((64, 8) if rows > FEW_ROWS else (16, 4))  # sm_90a: no spills
    br, bv = _br(spec, wide), _bv(spec, wide)
    lat_strides = (latent.stride(0), latent.stride(1))
    absorb[(cdiv(rows, bm), h, cdiv(spec.rank, br))](
        q, c, wkvb, slot, pos, latent, qa, rows, q.stride(0), c.stride(0), *lat_strides,
        capacity, *table, BM=bm, BR=br, num_warps=warps)
    if dense:
        attend_dense[(cdiv(rows, DENSE_BM), cdiv(h, DENSE_HB))](
            qa, slot, pos, latent, acc, ml, rows, *lat_strides, capacity, *table, BM=DENSE_BM,
            HB=DENSE_HB, BN=DENSE_BN, num_warps=DENSE_WARPS)
    bh = spec.wide_head_block if wide else spec.head_block
    attend[(rows, cdiv(h, bh), n)](qa, index, slot, pos, latent, acc, ml, rows, index.stride(0),
                                   *lat_strides, *table, BH=bh, DENSE=dense,
                                   num_warps=ATTEND_WARPS)
    merge[(cdiv(rows, bm), h, cdiv(spec.v_head_dim, bv))](
        acc, ml, wkvb, out, rows, out.stride(0), SPLITS=n, BM=bm, BV=bv, num_warps=warps)
