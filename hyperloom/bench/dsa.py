"""DSA kernel scenario (issue 7): one decode step of one DSA layer, B sequences at context C each,
through the indexer (`codegen.emitters.dsa`: key write + pooling, pool scores; `dsa_select`: radix
top-k select + expansion) and the absorbed sparse MLA (`emitters.mla`: latent write + absorbed
query, split attention over the selected tokens, merge + value projection), launched as the
runtime's launchers launch them. The caches are written with torch for context C, not by a C-token
prefill: random token keys, gates and latents, and the pooled keys of the complete pools by the
reference formula (`ir.semantics.dsa.pool_keys`). Before anything is timed the step is checked: the
selection against `semantics.dsa.dsa_index` as sets (a pool in one set only must score within the
tolerance of the k-th score: torch.topk orders near-ties arbitrarily), the attention against
`semantics.attention.mla_attention` on the kernels' own selection (fp32, over a cache of just the
selected latents). Sizes: the model's first DSA layer; without one, GLM-5.3-Flash's on a GPU and GLM
tiny's on the interpreter.

Work is bytes. The indexer's floor: each row's visible pooled keys read once (C // P + 1 pools at
most, x d), its query and head weights, its key and gate written. The attend kernel's: the selected
latent rows gathered (topk + tail, whatever C) and the absorbed query. The step's: the indexer's,
the gathered latents, kv_b_proj once, the rows' q and c read, latent and out written. On a GPU each
timed graph walks `copies` copies of the caches and of kv_b_proj, a step on each, so no step finds
its pooled keys, latents or weights in L2 (in a model the other layers evict them); the whole step
and each kernel group are timed in graphs of their own."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

import hyperloom
from hyperloom.bench.kda import ROTATE_BYTES, graphed
from hyperloom.bench.kernels import first_layer, load_emitters, randn
from hyperloom.bench.measure import Limits, median_seconds, profile_top
from hyperloom.bench.scenarios import AgreementError, Result, rel_err
from hyperloom.codegen.emitters import dsa as dsa_emitter
from hyperloom.codegen.emitters import dsa_select
from hyperloom.codegen.emitters import mla as mla_emitter
from hyperloom.codegen.emitters.dsa_spec import DSASpec
from hyperloom.codegen.emitters.mla import MLASpec
from hyperloom.codegen.specs import dsa_spec, mla_spec
from hyperloom.errors import InputError
from hyperloom.ir import ops
from hyperloom.ir.ops import Op
from hyperloom.ir.semantics import Ctx
from hyperloom.ir.semantics import attention as attn_sem
from hyperloom.ir.semantics import dsa as dsa_sem
from hyperloom.ir.state import segments
from hyperloom.models import Model

SCENARIOS = ("dsa-decode",)
STATE = "bench"  # the reference's state names
MAX_COPIES = 64
ROOM = 0.25  # of the free GPU memory, the most the cache copies take (the reference needs more)

# the kernel groups timed, each in a graph of its own: which of the indexer's (pool, score, and
# the selection's four) and the attention's (absorb, attend, merge, and the dense form's, which
# a decode step never launches) they launch. The segmented
# select reads the histogram the score kernel counts, so it is timed with it ("scored") and
# its time is the difference (the histogram's share stays in the score kernel's)
GROUPS = {"step": ((1,) * 6, (1,) * 4), "indexer": ((1,) * 6, (0,) * 4),
          "score": ((0, 1, 0, 0, 0, 0), (0,) * 4), "scored": ((0, 1, 1, 1, 1, 1), (0,) * 4),
          "mla": ((0,) * 6, (1,) * 4), "attend": ((0,) * 6, (0, 1, 0, 0))}


@dataclass
class DSAResult(Result):
    """A Result whose `extra` fields (sizes, kernel groups' times, floors, notes) join its row."""
    extra: dict = field(default_factory=dict)


def _first_dsa(model: Model) -> tuple[DSASpec, MLASpec] | None:
    return first_layer(model, (Op.DSA_INDEX, dsa_spec), (Op.MLA_ATTENTION, mla_spec))


def dsa_specs(model: Model, gpu: bool) -> tuple[DSASpec, MLASpec]:
    """The model's first DSA layer (indexer, sparse MLA); without one, GLM-5.3-Flash's on a GPU
    (a tiny one there would time launch latency only) and GLM tiny's on the interpreter."""
    return _first_dsa(model) or _first_dsa(
        hyperloom.build("glm5next", "glm-5.3-flash" if gpu else "tiny", 4))


def capacity(index: DSASpec, ctx: int) -> int:
    """Positions a slot holds: the ctx cached tokens and the step's own, in whole 64-token units
    (whole blocks when paged)."""
    unit = max(64, index.block_size)
    return -(-(ctx + 1) // unit) * unit


def selected(index: DSASpec, ctx: int) -> int:
    """Tokens a row at position ctx attends: its top topk / P visible pools (all of them when
    fewer are visible), P tokens each, then the visible tail of the incomplete pool."""
    p = index.kpool
    tail = (ctx + 1) % p if index.select_tail and p > 1 else 0
    return min(index.topk // p, (ctx + 1) // p) * p + tail


@dataclass(frozen=True)
class Floors:
    """Bytes a decode step must move: the indexer's, the attend kernel's, the whole step's."""
    indexer: float
    attend: float
    step: float


def floors(index: DSASpec, attn: MLASpec, batch: int, ctx: int, itemsize: int) -> Floors:
    d, h = index.head_dim, index.heads
    pooled = (ctx + 1) // index.kpool * d  # the visible pools' keys
    idx = batch * (pooled + h * d + h + 2 * d) * itemsize
    gathered = batch * selected(index, ctx) * attn.rank * itemsize
    attend = gathered + batch * attn.heads * attn.rank * itemsize
    width = attn.heads * (attn.qk_head_dim + attn.v_head_dim)
    step = idx + gathered + (width * attn.rank + batch * (width + 2 * attn.rank)) * itemsize
    return Floors(float(idx), float(attend), float(step))


def copy_bytes(index: DSASpec, attn: MLASpec, batch: int, ctx: int, itemsize: int) -> int:
    """One copy of the state a step reads: `batch` slots of keys and gates, latents and pooled
    keys at capacity(ctx), and kv_b_proj."""
    cap = capacity(index, ctx)
    slot = cap * (2 * index.head_dim + attn.rank) + cap // index.kpool * index.head_dim
    return (batch * slot + attn.heads * (attn.qk_head_dim + attn.v_head_dim) * attn.rank) \
        * itemsize


def rotation(step_bytes: float, one_copy: int, free: int | None) -> int:
    """Copies one timed graph walks: enough that the bytes it moves pass ROTATE_BYTES (5x the
    H200's L2), within ROOM of the `free` device memory; one off a GPU (free None)."""
    if free is None:
        return 1
    if one_copy > ROOM * free:
        raise InputError(f"a DSA step's caches take {one_copy / 2 ** 30:.1f} GiB, "
                         f"{free / 2 ** 30:.1f} GiB are free: lower --dsa-batch or --dsa-ctx")
    return max(1, min(MAX_COPIES, -(-ROTATE_BYTES // int(step_bytes)),
                      int(ROOM * free) // one_copy))


class _Skip:
    """A kernel left out of a timed group: its launch does nothing."""

    def __getitem__(self, grid: tuple) -> object:
        return lambda *args, **kw: None


SKIP = _Skip()


def group(kernels: tuple[tuple, tuple], mask: tuple[tuple, tuple]) -> tuple[tuple, tuple]:
    """kernels with those mask leaves out (0) replaced by SKIP."""
    return tuple(tuple(k if on else SKIP for k, on in zip(ks, m))
                 for ks, m in zip(kernels, mask))


@dataclass
class Step:
    """One scenario's device state: caches of `copies` x `batch` slots (copy c holds slots
    [c B, (c + 1) B)), contiguous [slots, S, width] (the kernels get block views behind an
    identity table when paged), one kv_b_proj per copy, the step's rows (every copy's the same),
    outputs and scratch."""
    batch: int
    ctx: int
    keys: torch.Tensor  # [slots, S, 2d]: key | gate
    pooled: torch.Tensor  # [slots, S // P, d]
    latent: torch.Tensor  # [slots, S, R]
    table: torch.Tensor | None
    wkvb: list[torch.Tensor]
    rows: dict[str, torch.Tensor]  # qi, w, ki, gate, q, c
    slots: list[torch.Tensor]
    pos: torch.Tensor
    index: torch.Tensor
    out: torch.Tensor
    select: dsa_select.Work  # the indexer's scores and selection scratch
    work: tuple[torch.Tensor, ...]

    @property
    def copies(self) -> int:
        return len(self.slots)

    def cache(self, t: torch.Tensor) -> torch.Tensor:
        """A cache as the kernels take it: itself, or a pool of blocks when paged."""
        if self.table is None:
            return t
        return t.view(self.table.numel(), -1, t.shape[-1])


def compact(index: torch.Tensor, pos: int, latent: torch.Tensor) -> tuple[torch.Tensor,
                                                                          torch.Tensor]:
    """A row's selection over a cache of only the tokens it selects before pos, in order, then
    pos itself: (the index renumbered so, those tokens' latents [m, R]). The reference then
    attends at most index width latents instead of the whole context."""
    ids = index.long()
    before = ids[(ids >= 0) & (ids < pos)].unique()
    renum = torch.full((pos + 2,), -1, dtype=torch.long, device=ids.device)
    renum[before] = torch.arange(before.numel(), device=ids.device)
    renum[pos] = before.numel()
    return torch.where(ids >= 0, renum[ids.clamp(0, pos + 1)], -1), latent[before]


def same_pools(at: ops.DSAIndexAttrs, got: torch.Tensor, want: torch.Tensor, pos: int,
               scores, tol: float, what: str) -> int:
    """A row's selection (got, on the CPU) against the reference's: the same tail, topk / P
    whole pools (P consecutive tokens from a pool start, once each, then -1), and a pool in one
    set only must score within tol x the largest |score| of the k-th score (scores(): the
    reference's, computed only then). Returns the pools in one set only."""
    p, topk = at.kpool, at.topk
    k = min(topk // p, (pos + 1) // p)
    pools = got[: k * p].view(k, p).long()
    starts = pools[:, 0]
    whole = (torch.equal(pools, starts[:, None] + torch.arange(p)) and bool((starts % p == 0).all())
             and bool((got[k * p: topk] == -1).all()) and len(set(starts.tolist())) == k)
    if not whole or not torch.equal(got[topk:], want[topk:]):
        raise AgreementError(f"{what}: {got.tolist()} is not whole pools, then -1, then the "
                             f"reference's tail (reference {want.tolist()})")
    mine = set((starts // p).tolist())
    theirs = set((want[: k * p].view(k, p)[:, 0].long() // p).tolist())
    if mine == theirs:
        return 0
    sc = scores()
    kth, tie = sc.sort(descending=True).values[k - 1], tol * float(sc.abs().max())
    far = sorted(j for j in mine ^ theirs if abs(sc[j] - kth) > tie)
    if far:
        raise AgreementError(f"{what}: pools {far} are in one selection only and score "
                             f"{[round(float(sc[j]), 5) for j in far]}, not within {tie:.3g} of "
                             f"the k-th score {float(kth):.5f}")
    return len(mine ^ theirs)


class DSABench:
    """The DSA scenario of one bench run: kernels loaded once, each step's state made anew."""

    def __init__(self, model: Model, device: torch.device, dtype: torch.dtype, tol: float,
                 limits: Limits, seed: int = 0, profile_steps: int = 0) -> None:
        self.index, self.attn = dsa_specs(model, device.type == "cuda")
        self.device, self.dtype, self.tol, self.limits = device, dtype, tol, limits
        self.profile_steps = profile_steps  # 0: no profile
        self.gen = torch.Generator(device).manual_seed(seed)
        self.ape = self._randn(self.index.kpool, self.index.head_dim)
        self.kernels = load_emitters(device, (dsa_emitter, self.index, "bench_dsa"),
                                     (mla_emitter, self.attn, "bench_mla"))
        self.attend_s: dict[int, dict[int, float]] = {}  # batch -> ctx -> attend seconds

    def _randn(self, *shape: int, scale: float = 1.0) -> torch.Tensor:
        return randn(self.gen, self.device, self.dtype, *shape, scale=scale)

    def _free(self) -> int | None:
        """Free device memory (None off a GPU), the last scenario's cached blocks returned."""
        if self.device.type != "cuda":
            return None
        torch.cuda.empty_cache()
        return torch.cuda.mem_get_info(self.device)[0]

    # -- the state -----------------------------------------------------------------------
    def _caches(self, slots: int, ctx: int) -> tuple[torch.Tensor, ...]:
        """(keys, pooled, latent) of `slots` slots at context ctx: random tokens, the complete
        pools' keys by the reference formula."""
        ix, cap = self.index, capacity(self.index, ctx)
        d, done = ix.head_dim, ctx // ix.kpool  # pools complete before the step
        keys, latent = self._randn(slots, cap, 2 * d), self._randn(slots, cap, self.attn.rank)
        pooled = torch.zeros((slots, cap // ix.kpool, d), device=self.device, dtype=self.dtype)
        ape = self.ape.float()
        for s in range(slots):
            k = keys[s, :ctx].float()
            pooled[s, :done] = dsa_sem.pool_keys(k[:, :d], k[:, d:], ape)
        return keys, pooled, latent

    def _state(self, batch: int, ctx: int, copies: int) -> Step:
        ix, a, dev = self.index, self.attn, self.device
        keys, pooled, latent = self._caches(batch * copies, ctx)
        table = None
        if ix.block_size:  # identity: slot s's blocks in order
            blocks = batch * copies * keys.shape[1] // ix.block_size
            table = torch.arange(blocks, dtype=torch.int32, device=dev).view(batch * copies, -1)
        widths = {"qi": ix.heads * ix.head_dim, "w": ix.heads, "ki": ix.head_dim,
                  "gate": ix.head_dim, "q": a.heads * a.qk_head_dim, "c": a.rank}
        rank = a.rank
        return Step(batch, ctx, keys, pooled, latent, table,
                    [self._randn(a.heads * (a.qk_head_dim + a.v_head_dim), rank,
                                 scale=rank ** -0.5) for _ in range(copies)],
                    {k: self._randn(batch, n) for k, n in widths.items()},
                    [torch.arange(c * batch, (c + 1) * batch, device=dev) for c in range(copies)],
                    torch.full((batch,), ctx, device=dev),
                    torch.empty((batch, a.width), dtype=torch.int32, device=dev),
                    torch.empty((batch, a.heads * a.v_head_dim), dtype=self.dtype, device=dev),
                    dsa_select.scratch(batch, pooled),
                    mla_emitter.scratch(a, batch, self.dtype, dev))

    def scenario(self, batch: int, ctx: int) -> tuple[Step, Floors, int]:
        """(the state of a step of `batch` sequences at context ctx, with as many cache copies
        as one timed graph walks; the step's floors; the bytes of one copy)."""
        item = self.dtype.itemsize
        fl = floors(self.index, self.attn, batch, ctx, item)
        one = copy_bytes(self.index, self.attn, batch, ctx, item)
        return self._state(batch, ctx, rotation(fl.step, one, self._free())), fl, one

    def _launch(self, st: Step, kernels: tuple[tuple, tuple], copy: int) -> None:
        """The step on copy `copy`, as runtime.launchers' _dsa and _mla launch it."""
        (ix, at), x, slot = kernels, st.rows, st.slots[copy]
        dsa_emitter.launch(ix, self.index, qi=x["qi"], w=x["w"], ki=x["ki"], gate=x["gate"],
                           ape=self.ape, slot=slot, pos=st.pos, keys=st.cache(st.keys),
                           pooled=st.pooled, work=st.select, out=st.index, rows=st.batch,
                           block_table=st.table)
        mla_emitter.launch(at, self.attn, q=x["q"], c=x["c"], wkvb=st.wkvb[copy], slot=slot,
                           pos=st.pos, index=st.index, latent=st.cache(st.latent), out=st.out,
                           work=st.work, rows=st.batch, block_table=st.table)

    # -- the check -----------------------------------------------------------------------
    def _check(self, name: str, st: Step) -> tuple[float, int]:
        """Copy 0's step, run already, against the reference: (the attention's worst relative
        error over sequences, pools in one selection only)."""
        ix, b = self.index, st.batch
        x, ape = {k: v.float() for k, v in st.rows.items()}, self.ape.float()
        at = ops.DSAIndexAttrs(ix.heads, ix.head_dim, ix.topk, ix.kpool, ix.select_tail, STATE)
        ref = st.keys[:b, : st.ctx + 1].float()  # the reference writes the step's row itself
        ctx = Ctx(torch.float32, {f"{STATE}.keys": ref}, segments(st.slots[0], st.pos))
        want = dsa_sem.dsa_index(ctx, at, x["qi"], x["w"], x["ki"], x["gate"], ape,
                                 st.slots[0], st.pos).cpu()
        got, ties = st.index.cpu(), 0
        for r in range(b):
            def scores(r: int = r) -> torch.Tensor:
                return dsa_sem.pool_scores(at, x["qi"][r:r + 1], x["w"][r:r + 1], ref[r],
                                           ape)[0].cpu()
            ties += same_pools(at, got[r], want[r], st.ctx, scores, self.tol,
                               f"{name}: sequence {r}'s selection")
        return self._attention(name, st, x), ties

    def _attention(self, name: str, st: Step, x: dict[str, torch.Tensor]) -> float:
        """The MLA output against the reference on the kernels' selection, sequence by
        sequence; the worst relative error."""
        a, b = self.attn, st.batch
        rows = [compact(st.index[r], st.ctx, st.latent[r]) for r in range(b)]
        m = torch.tensor([lat.shape[0] for _, lat in rows], device=self.device)
        store = torch.zeros((b, int(m.max()) + 1, a.rank), device=self.device)
        for r, (_, lat) in enumerate(rows):
            store[r, : lat.shape[0]] = lat.float()
        slot = torch.arange(b, device=self.device)
        at = ops.MLAAttrs(a.heads, a.qk_head_dim, a.v_head_dim, a.rank, a.scale, STATE)
        ctx = Ctx(torch.float32, {f"{STATE}.latent": store}, segments(slot, m))
        want = attn_sem.mla_attention(ctx, at, x["q"], x["c"], st.wkvb[0].float(), slot, m,
                                      torch.stack([i for i, _ in rows]))
        worst = 0.0
        for r in range(b):
            err = rel_err(st.out[r].float(), want[r])
            if not err <= self.tol:
                raise AgreementError(f"{name}: sequence {r}'s attention and the reference's "
                                     f"disagree (relative error {err:.3g} > {self.tol:g}); "
                                     "refusing to time it")
            worst = max(worst, err)
        return worst

    # -- the scenario --------------------------------------------------------------------
    def _time(self, st: Step, mask: tuple[tuple, tuple]) -> float:
        """Seconds a step of the group's kernels: one (graphed) run steps every copy once."""
        kernels = group(self.kernels, mask)

        def steps() -> None:
            for c in range(st.copies):
                self._launch(st, kernels, c)

        cpu = {} if self.device.type == "cuda" else {"warmup": 0, "reps": 1}
        return median_seconds(graphed(steps, self.device), self.device, **cpu) / st.copies

    def step(self, batch: int, ctx: int) -> DSAResult:
        """One decode row per sequence for `batch` sequences after ctx cached tokens each."""
        if batch < 1 or ctx < 1:
            raise InputError(f"dsa-decode: batch and context must be >= 1, got {batch}, {ctx}")
        name = f"dsa step b{batch} ctx{ctx}"
        st, fl, one = self.scenario(batch, ctx)
        with torch.no_grad():
            self._launch(st, self.kernels, 0)
            err, ties = self._check(name, st)
            t = {g: self._time(st, mask) for g, mask in GROUPS.items()}
            t["select"] = max(0.0, t.pop("scored") - t["score"])
            kernels = dsa_emitter.launches(st.pooled.shape[1]) + 3  # + absorb, attend, merge
            r = DSAResult(name, fl.step, "bytes", t["step"], kernels=kernels, rel_err=err,
                          batch=batch, ctx=ctx)
            if self.profile_steps:
                r.profile = profile_top(lambda: self._launch(st, self.kernels, 0), self.device,
                                        self.profile_steps)
        r.extra = self._extra(st, fl, t, ties, one * st.copies)
        return r

    def _extra(self, st: Step, fl: Floors, t: dict[str, float], ties: int,
               cache_bytes: int) -> dict:
        ix, a, bw = self.index, self.attn, self.limits.bandwidth
        seen = self.attend_s.setdefault(st.batch, {})
        seen[st.ctx] = t["attend"]
        base = min(seen)
        growth = t["attend"] / seen[base] if base < st.ctx else None
        gpu = self.device.type == "cuda"
        extra = {"index_heads": ix.heads, "index_head_dim": ix.head_dim, "index_topk": ix.topk,
                 "index_kpool": ix.kpool, "heads": a.heads, "kv_lora_rank": a.rank,
                 "capacity": st.keys.shape[1], "pools": (st.ctx + 1) // ix.kpool,
                 "selected_tokens": selected(ix, st.ctx),
                 **{f"{g}_s": s for g, s in t.items() if g != "step"},
                 "indexer_bytes": fl.indexer,
                 "indexer_hbm_fraction": fl.indexer / t["indexer"] / bw,
                 "score_hbm_fraction": fl.indexer / t["score"] / bw,
                 "attend_bytes": fl.attend, "attend_hbm_fraction": fl.attend / t["attend"] / bw,
                 "attend_growth": growth, "attend_growth_vs_ctx": base if growth else None,
                 "near_tie_pools": ties, "copies": st.copies, "cache_bytes": cache_bytes,
                 "timing": (f"cuda graphs (the step, and each kernel group alone) of a step on "
                            f"each of {st.copies} cache copies; per step") if gpu
                 else "one eager run per kernel group",
                 "checked_against": "ir.semantics.dsa.dsa_index (selection as sets) and "
                                    "ir.semantics.attention.mla_attention (fp32)"}
        return extra | {"notes": [note(extra)]}


def note(e: dict) -> str:
    """The table's line of a DSA row: the kernel groups' times, floors and growth."""
    grow = (f", {e['attend_growth']:.2f}x ctx{e['attend_growth_vs_ctx']}"
            if e["attend_growth"] else "")
    return (f"indexer {e['indexer_s'] * 1e6:.1f}us ({100 * e['indexer_hbm_fraction']:.1f}% of "
            f"HBM for {e['indexer_bytes'] / 1e6:.2f} MB; score kernel "
            f"{e['score_s'] * 1e6:.1f}us, {100 * e['score_hbm_fraction']:.1f}%), select "
            f"{e['select_s'] * 1e6:.1f}us; attend {e['attend_s'] * 1e6:.1f}us "
            f"({e['attend_bytes'] / 1e6:.2f} MB{grow}), mla {e['mla_s'] * 1e6:.1f}us")
