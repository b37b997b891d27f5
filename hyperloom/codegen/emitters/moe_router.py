"""The MoE router (`hyperloom.ir.semantics.moe.moe_router`, SPEC "MLP") in two kernels:

`{name}_logits`: the router GEMV/GEMM x [rows, H] (any float dtype) @ W^T (W [E, H] fp32) in
  fp32 on tensor cores: bf16 x takes W as three bf16 terms (hi + mid + lo hold all 24 bits, each
  product exact in the fp32 accumulator; 3 bf16 MMAs), split once when weights are bound
  (`ir.derive.split_bf16`, spec.split) or else in the loop; other dtypes tf32x3; split over H for
  few rows so a decode step spreads W over ~a hundred programs; partial logits go to a scratch
  [S, rows, E].
`{name}`: one program a row: the S partials summed in order, s = sigmoid, c = s + bias; group
  score = sum of a group's top-2 c; the top `topk_group` groups kept; top-k experts by c within
  them; weights = their uncorrected s, renormalised (norm_topk_prob, + 1e-20) and scaled.
  Top-k is k rounds of (max, lowest index holding it): ties go to the lowest index, as in the
  reference. Output weights [rows, k] fp32, ids [rows, k] int32.

Grids depend only on `rows` (no host sync): capturable into CUDA graphs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hyperloom.codegen.emitters.ints import cdiv, next_power_of_2
from hyperloom.codegen.emitters.text import comment, pdl
from hyperloom.config import CONFIG
from hyperloom.errors import require

GEMV_ROWS = 16  # up to this many rows: split-K GEMV tiles
MID_ROWS = 64
# from this many rows, 128 x 64 tiles over WIDE_SPLITS quarters of H: on the H200 at 4096 rows x
# 288 experts x 4096, the logits took 155.8 us in 64 x 32 tiles (W split in the loop), 120.6 in
# 128 x 64 (8 warps, 3 stages), 86.4 with W split once (4 stages); with the select kernel, 113.9
# in one split, 99.6 in two, 94.7 in four (160 programs leave a second wave nearly empty;
# BENCHMARKS, "Routed MoE"). The split sums are added in split order: deterministic, but not
# the one-split rounding, so near-tied experts may swap (as against any other fp32 order)
WIDE_ROWS = 1024
WIDE_SPLITS = 4
SPLIT_MIN = 256  # the fewest H columns a split-K program reduces
# the select kernel: a row's top-k is 3 k reductions over its E scores, each across every warp
# of the program; one warp keeps them in shuffles (no shared-memory round trip)
SELECT_WARPS = 1


@dataclass(frozen=True)
class RouterSpec:
    experts: int
    hidden: int
    top_k: int
    n_group: int
    topk_group: int
    norm_topk_prob: bool
    scaling: float
    split: bool = False  # W comes as split_bf16's three bf16 terms [3, E, H]

    def __post_init__(self) -> None:
        if self.experts % self.n_group or not 1 <= self.topk_group <= self.n_group:
            raise ValueError(f"router: {self.experts} experts in {self.n_group} groups, "
                             f"keep {self.topk_group}")
        if not 1 <= self.top_k <= self.experts:
            raise ValueError(f"router: top_k {self.top_k} of {self.experts} experts")

    @property
    def group_size(self) -> int:
        return self.experts // self.n_group


def kernel_names(name: str) -> tuple[str, str]:
    return f"{name}_logits", name


def _pow2(n: int) -> int:
    return next_power_of_2(n)


def _logits(name: str, spec: RouterSpec) -> str:
    prec = "ieee" if CONFIG.interpret else "tf32x3"
    return f'''@triton.jit(do_not_specialize=["rows"])
def {name}_logits(x_ptr, w_ptr, part_ptr, rows, sx, sp, SPLIT: tl.constexpr, BM: tl.constexpr,
        BN: tl.constexpr, BK: tl.constexpr, E: tl.constexpr = {spec.experts},
        H: tl.constexpr = {spec.hidden}):
{pdl("    ")}    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    k_lo = tl.program_id(2) * SPLIT
    rk = tl.arange(0, BK)
    m_ok, n_ok = rm < rows, rn < E
    x_rows = x_ptr + rm.to(tl.int64)[:, None] * sx
    w_cols = w_ptr + rn.to(tl.int64)[None, :] * H
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, SPLIT, BK):  # SPLIT is a multiple of BK
        kk = k_lo + k0 + rk
        k_ok = kk < H
        a = tl.load(x_rows + kk[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
{(_split_dots() if spec.split else _inloop_dots(prec)).rstrip()}
    out = part_ptr + tl.program_id(2) * sp + rm.to(tl.int64)[:, None] * E + rn[None, :]
    tl.store(out, acc, mask=m_ok[:, None] & n_ok[None, :])
'''


def _split_dots() -> str:
    """W's terms from split_bf16, smallest first, each product exact in the fp32 acc."""
    return "".join(f"        {t} = tl.load(w_cols + {i} * E * H + kk[:, None], "
                   "mask=k_ok[:, None] & n_ok[None, :], other=0.0)\n"
                   f"        acc = tl.dot(a, {t}, acc)\n"
                   for i, t in ((2, "lo"), (1, "mid"), (0, "hi")))


def _inloop_dots(prec: str) -> str:
    return f'''\
        b = tl.load(w_cols + kk[:, None], mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        if x_ptr.dtype.element_ty == tl.bfloat16:  # W = hi + mid + lo, bf16 each: exact
            hi = b.to(tl.bfloat16)
            r = b - hi.to(tl.float32)
            mid = r.to(tl.bfloat16)
            acc = tl.dot(a, (r - mid.to(tl.float32)).to(tl.bfloat16), acc)
            acc = tl.dot(a, mid, acc)
            acc = tl.dot(a, hi, acc)
        else:
            acc = tl.dot(a.to(tl.float32), b, acc, input_precision="{prec}")
'''


def _groups(spec: RouterSpec) -> str:
    """Keeps the top `topk_group` groups by their top-2 sum (nothing to do with one group)."""
    if spec.topk_group == spec.n_group:
        return ""
    top2 = "    gscore = m1\n"
    if spec.group_size > 1:  # the second largest: the max without one instance of the max
        top2 = ("    first = tl.min(tl.where(c == m1[:, None], j, GSB), 1)\n"
                "    gscore = m1 + tl.max(tl.where(j == first[:, None], NEG, c), 1)  # [GB]\n")
    return f'''    m1 = tl.max(c, 1)
{top2}    gi = tl.arange(0, GB)
    taken = gi >= G
    for _ in tl.static_range({spec.topk_group}):
        best = tl.max(tl.where(taken, NEG, gscore), 0)
        pick = tl.min(tl.where(~taken & (gscore == best), gi, GB), 0)
        taken = taken | (gi == pick)
    c = tl.where((taken & (gi < G))[:, None], c, NEG)
'''


def _select(name: str, spec: RouterSpec) -> str:
    norm = "    ws = ws / (tl.sum(ws, 0) + 1e-20)\n" if spec.norm_topk_prob else ""
    return f'''@triton.jit
def {name}(part_ptr, bias_ptr, wt_ptr, id_ptr, sp, sw, si, SPLITS: tl.constexpr,
        E: tl.constexpr = {spec.experts}, G: tl.constexpr = {spec.n_group},
        GS: tl.constexpr = {spec.group_size}, GB: tl.constexpr = {_pow2(spec.n_group)},
        GSB: tl.constexpr = {_pow2(spec.group_size)}, K: tl.constexpr = {spec.top_k},
        KB: tl.constexpr = {_pow2(spec.top_k)}):
{pdl("    ")}    NEG = float("-inf")
    t = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, GSB)[None, :]
    ok = (tl.arange(0, GB)[:, None] < G) & (j < GS)
    e = tl.arange(0, GB)[:, None] * GS + j  # [GB, GSB] expert ids, group-major
    logit = tl.zeros([GB, GSB], dtype=tl.float32)
    for s in tl.static_range(SPLITS):
        logit += tl.load(part_ptr + s * sp + t * E + e, mask=ok, other=0.0)
    score = tl.sigmoid(logit)
    c = tl.where(ok, score + tl.load(bias_ptr + e, mask=ok, other=0.0), NEG)
{_groups(spec)}    kv = tl.arange(0, KB)
    ids = tl.zeros([KB], dtype=tl.int32)
    ws = tl.zeros([KB], dtype=tl.float32)
    free = ok
    for i in tl.static_range(K):
        best = tl.max(tl.max(tl.where(free, c, NEG), 1), 0)
        pick = tl.min(tl.min(tl.where(free & (c == best), e, E), 1), 0)
        hit = e == pick
        w = tl.sum(tl.sum(tl.where(hit, score, 0.0), 1), 0)
        ids = tl.where(kv == i, pick, ids)
        ws = tl.where(kv == i, w, ws)
        free = free & ~hit
{norm}    ws = ws * {float(spec.scaling)!r}
    tl.store(wt_ptr + t * sw + kv, ws, mask=kv < K)
    tl.store(id_ptr + t * si + kv, ids, mask=kv < K)
'''


def source(name: str, spec: RouterSpec, header: str = "") -> str:
    return (f"{comment(header)}import triton\nimport triton.language as tl\n\n\n"
            f"{_logits(name, spec)}\n\n{_select(name, spec)}")


@dataclass(frozen=True)
class Tiles:
    bm: int
    bn: int
    bk: int
    splits: int
    warps: int
    stages: int


def tiles(spec: RouterSpec, rows: int) -> Tiles:
    """Few rows: narrow E blocks and H split so W (E x H fp32) streams through many programs."""
    bk = min(128 if rows <= MID_ROWS else 64, max(16, _pow2(spec.hidden)))
    if rows >= WIDE_ROWS:
        return Tiles(128, 64, bk, WIDE_SPLITS, 8, 4 if spec.split else 3)
    if rows > MID_ROWS:
        return Tiles(64, 32, bk, 1, 4, 4)
    bm = 16 if rows <= GEMV_ROWS else 64
    splits = max(1, min(16, spec.hidden // SPLIT_MIN))
    return Tiles(bm, 32, bk, splits, 4, 4)


def _split(spec: RouterSpec, t: Tiles) -> tuple[int, int]:
    """(columns per split, a multiple of BK; the number of splits that covers H)."""
    split = cdiv(cdiv(spec.hidden, t.splits), t.bk) * t.bk
    return split, cdiv(spec.hidden, split)


def scratch(spec: RouterSpec, rows: int, device) -> torch.Tensor:
    """The partial logits for launches of up to `rows` rows (allocate once, outside capture)."""
    need = max(_split(spec, tiles(spec, r))[1] * r
               for r in {min(rows, GEMV_ROWS), min(rows, MID_ROWS), rows})
    return torch.empty(need * spec.experts, dtype=torch.float32, device=device)


def _check(spec: RouterSpec, x, w, bias, weights, ids, part, rows: int) -> None:
    e, h, k = spec.experts, spec.hidden, spec.top_k
    require(x.dim() == 2 and x.shape[1] == h and x.shape[0] >= rows and x.stride(1) == 1,
            lambda: f"router x: [>= {rows}, {h}], got {tuple(x.shape)}")
    want = ((3, e, h), torch.bfloat16, "split_bf16 terms") if spec.split \
        else ((e, h), torch.float32, "fp32")
    require(tuple(w.shape) == want[0] and w.is_contiguous() and w.dtype == want[1],
            lambda: f"router W: contiguous {want[2]} {list(want[0])}, got {tuple(w.shape)} "
                    f"{w.dtype}")
    require(not spec.split or x.dtype == torch.bfloat16,
            lambda: f"router x: bf16 rows for split_bf16 W terms, got {x.dtype}")
    require(tuple(bias.shape) == (e,) and bias.is_contiguous(),
            lambda: f"router bias: contiguous [{e}], got {tuple(bias.shape)}")
    for name, t, dt in (("weights", weights, torch.float32), ("ids", ids, torch.int32)):
        require(t.dim() == 2 and t.shape[1] == k and t.shape[0] >= rows and t.stride(1) == 1
                and t.dtype == dt,
                lambda: f"router {name}: {dt} [>= {rows}, {k}], got {t.dtype} {tuple(t.shape)}")
    need = _split(spec, tiles(spec, rows))[1] * rows * e
    require(part.numel() >= need, lambda: f"router scratch: {part.numel()} < {need} floats")


def launch(kernels, spec: RouterSpec, *, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor,
           weights: torch.Tensor, ids: torch.Tensor, part: torch.Tensor, rows: int) -> None:
    """Route the first `rows` rows of x: weights[:rows], ids[:rows]; part from `scratch`."""
    _check(spec, x, w, bias, weights, ids, part, rows)
    if rows <= 0:
        return
    logits, select = kernels
    t = tiles(spec, rows)
    split, splits = _split(spec, t)
    grid = (cdiv(rows, t.bm), cdiv(spec.experts, t.bn), splits)
    logits[grid](x, w, part, rows, x.stride(0), rows * spec.experts, SPLIT=split, BM=t.bm,
                 BN=t.bn, BK=t.bk, num_warps=t.warps, num_stages=t.stages)
    select[(rows,)](part, bias, weights, ids, rows * spec.experts, weights.stride(0),
                    ids.stride(0), SPLITS=splits, num_warps=SELECT_WARPS)
