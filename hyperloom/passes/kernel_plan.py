"""The kernel plan: the final list of kernels, each with the emitter that generates it, the IR
nodes it fused, its grid, and where its operands live (arena, weights, state, row inputs).
Ops with no emitter yet run on the reference interpreter, and the plan says so."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass

from hyperloom.config import CONFIG
from hyperloom.ir.graph import Graph, Node
from hyperloom.ir.ops import Op
from hyperloom.ir.printer import print_node
from hyperloom.passes.arena import CARRIED_AFTER, ArenaPlan

EMITTER_OF: dict[Op, str] = {
    Op.EMBEDDING: "embedding", Op.EMBED_STREAMS: "embedding",
    Op.LINEAR: "matmul", Op.LM_HEAD: "matmul", Op.NORM_LINEAR: "matmul",
    Op.SWIGLU_LINEAR: "matmul", Op.LINEAR_RESIDUAL: "matmul", Op.LINEAR_HC_POST: "matmul",
    Op.LINEAR_KDA_GATE: "matmul", Op.LINEAR_GATED_NORM: "matmul",
    Op.HC_PRE: "hc_pre", Op.HC_POST: "hc_post", Op.ROPE_ATTENTION: "attention", Op.KDA: "kda",
    Op.KDA_CONV: "kda_conv", Op.KDA_GATE: "kda_gate", Op.RMSNORM: "norm",
    Op.GATED_RMSNORM: "norm", Op.LAYERNORM: "norm",
    Op.MOE_ROUTER: "moe_router", Op.MOE_EXPERTS: "moe_experts",
    Op.DSA_INDEX: "dsa", Op.MLA_ATTENTION: "mla",
    Op.ADD: "elementwise", Op.RESIDUAL_ADD: "elementwise", Op.CONCAT: "elementwise",
    Op.CAST: "elementwise", Op.HC_HEAD_MEAN: "elementwise",
}
INTERPRETER = "interpreter"
NARROW_ROWS = 1  # a step of at most this many rows (decode of one sequence) is narrow
APART_ROWS = 64  # a wider step runs a GEMM's hc_post epilogue as a kernel of its own
GEMV_ROWS = 16  # the most rows a GEMM takes its GEMV tiling for
# up to this many rows the LM head norms the stream mean its GEMM before stored (CONFIG.head_
# mean): the GEMV tiling, where sum(x^2) is one more MMA a K step; wider steps keep the norm
# kernel, whose tiled GEMM is measured
MEAN_ROWS = GEMV_ROWS
# above this many rows hc_pre's finish is gates + apply (emitters.hc_pre); on Triton's
# interpreter, whose cost is its programs' ops, from two rows: a finish program runs a row's
# whole Sinkhorn, a gates program 16 rows' at once (GLM tiny's 16-row prefill: 61 -> 45 s)
HC_WIDE_ROWS = 1 if CONFIG.interpret else 512
KDA_CHUNKED_ROWS = 32  # a step whose longest run has this many rows takes the chunked KDA form
KDA_CHUNK_LAUNCHES = 6  # its kernels (emitters.kda_chunk.kernel_names)
KDA_CONV_SERIAL_ROWS = 16  # up to this many rows a sequence the KDA conv walks each run
MLA_DENSE_ROWS = 64  # a step whose longest run has this many rows attends its MLA rows below
# index_topk in the dense form (emitters.mla), one launch more
ALWAYS = 1 << 62  # carried_rows of an entry carried at every width


def folds(rows: int) -> bool:
    """Whether a step of `rows` rows finishes a folded mHC site in the GEMM before it
    (CONFIG.fold_sites), so that the site's own hc_pre launches nothing."""
    return rows <= NARROW_ROWS


LAUNCHES = {"attention": (1, 2),  # (narrow step, wide step)
            "moe_router": (2, 2), "dsa": (3, 3), "mla": (3, 3)}
MOE_ROUTE_PAIRS = 1024  # (row, expert) pairs one route program sorts: more add a count kernel
GRIDS = {
    "embedding": "(R,)",
    "matmul": "(cdiv(R, BM), cdiv(N, BN))",
    "hc_pre": "(cdiv(R, BT), splits) [; finish (R,) | gates (R/RB,) ; apply (R,)]",
    "hc_post": "(R, cdiv(D, BD))",
    "attention": "decode: split (R, kv_heads, S) | rope_kv (R,) ; attend",
    "kda": "(R, heads, d / BV) | chunked: (1,) ; (chunks, heads, C/16) ; (chunks, heads) ; "
           "(chunks, heads, d/BK) ; (d/BV, heads, runs)",
    "kda_conv": f"(R, 3 * cdiv(C, BC) [+ cdiv(W, BG) gate]) up to {KDA_CONV_SERIAL_ROWS} rows "
                "a sequence | (cdiv(R, BR), 3 * cdiv(C, BC))",
    "kda_gate": "(R, cdiv(W, BW))",
    "norm": "(R, width / group)",
    "moe_router": "(R/BM, E/BN, splits) ; (R,)",
    "moe_experts": "[count] route (chunks,) ; (tiles, I/BN) ; (tiles, H/BN) ; (R, H/BH)",
    "dsa": "pool (R,) ; score (R, S/P/BP/IT) ; select (R,) | segmented: cands, write (R, segs)",
    "mla": "absorb (R/BM, H, R/BR) ; [dense (R/BM, H/HB) ;] (R, H/BH, splits) ; "
           "(R/BM, H, dv/BV)",
    "elementwise": "(R, cdiv(W, BW))",
    INTERPRETER: "host",
}


@dataclass(frozen=True)
class KernelEntry:
    name: str
    emitter: str
    node: Node
    bindings: tuple[str, ...]  # operand -> where it lives
    # (most rows, launches), ascending: a step launches the count of the first bound its rows
    # are within (the last bound, None, holds any)
    counts: tuple[tuple[int | None, int], ...] = ((None, 1),)
    batched: bool = False  # a decode step of any width (one row a sequence) counts as one row
    # CONFIG.fold_sites: a GEMM with the hc_post epilogue that finishes, at one row, the hc_pre
    # entry right after it (which then launches nothing at one row: `folded`)
    finishes: KernelEntry | None = None
    folded: bool = False
    # CONFIG.form_sites: a folded hc_pre whose y the GEMV right after it forms at one row from
    # the streams' parts (`formed`; the GEMM before then writes partials only), and that GEMV
    # (`forms`: the hc_pre entry)
    formed: bool = False
    forms: KernelEntry | None = None
    # an entry whose launch also runs the entry right after it in steps of at most
    # `carried_rows` rows (the carried entry launches nothing there): CONFIG.conv_gate, a KDA
    # conv carries the f_b GEMM + decay gate (up to GEMV_ROWS rows); CONFIG.kda_norm_rows, the
    # KDA recurrence carries g_b's GEMM + gated output norm; a row norm carries an independent
    # norm right after it (ALWAYS); CONFIG.embed_site, the embedding the first formed site's
    # parts (NARROW_ROWS)
    carries: KernelEntry | None = None
    carried_rows: int = 0
    # CONFIG.head_mean: a GEMM with the hc_post epilogue that also stores its new streams'
    # mean in steps of at most APART_ROWS rows (`means`: the stream-mean norm GEMM right after
    # it, the LM head), and that GEMM (`meaned`), which norms the mean in its K loop in steps
    # of at most MEAN_ROWS rows
    means: KernelEntry | None = None
    meaned: bool = False

    def launches_at(self, rows: int, decode: bool = False) -> int:
        if (self.folded and folds(rows)) or rows <= self.carried_rows:
            return 0
        rows = 1 if decode and self.batched else rows
        return next(n for most, n in self.counts if most is None or rows <= most)

    def line(self) -> str:
        also = ""
        if self.finishes:
            also = (f"; writes {self.finishes.name}'s partials at one row" if self.finishes.formed
                    else f"; finishes {self.finishes.name} at one row")
        if self.forms:
            also += f"; forms {self.forms.name}'s y at one row"
        if self.formed and not self.folded and not self.carried_rows:
            also += "; writes its parts for the GEMV after it at one row"
        if self.means:
            also += f"; writes {self.means.name}'s stream mean up to {APART_ROWS} rows"
        if self.meaned:
            also += f"; reads its stream mean up to {MEAN_ROWS} rows"
        if self.carries:
            most = self.carries.carried_rows
            also += f"; runs {self.carries.name}" + (
                f" up to {most} row{'s' * (most > 1)}" if most < ALWAYS else " in its launch")
        return (f"{self.name:<34} {self.emitter:<11} grid {GRIDS[self.emitter]:<26} "
                f"fuses {', '.join(self.node.sources)}{also}")


@dataclass(frozen=True)
class KernelPlan:
    graph: str
    kernels: tuple[KernelEntry, ...]

    @property
    def fallbacks(self) -> tuple[KernelEntry, ...]:
        return tuple(k for k in self.kernels if k.emitter == INTERPRETER)

    def launches(self, rows: int, decode: bool = False) -> int:
        """Kernel launches of a step of `rows` rows (`decode`: one row a sequence)."""
        return sum(k.launches_at(rows, decode) for k in self.kernels)

    def text(self, detail: bool = False) -> str:
        lines = [f"kernel plan of {self.graph}: {len(self.kernels)} entries, {self.launches(1)} "
                 f"launches ({self.launches(APART_ROWS + 1)} in a prefill step), "
                 f"{len(self.fallbacks)} on the interpreter"]
        for k in self.kernels:
            lines.append(k.line())
            if detail:
                lines.append(f"    {print_node(k.node)}")
                lines += [f"    {b}" for b in k.bindings]
        return "\n".join(lines) + "\n"


def _tag(node: Node) -> str:
    ref = next((a for a in node.args if a.startswith("@")), node.state or node.outs[0])
    layer = re.search(r"layers\.(\d+)\.", ref)
    leaf = ref.lstrip("@%").split("~")[0].removesuffix(".weight").rsplit(".", 1)[-1]
    leaf = leaf.replace("_proj", "").replace("+", "_").replace("embed_tokens", "embed")
    tag = (f"l{layer.group(1)}_" if layer else "") + leaf
    return re.sub(r"\W", "_", tag)[:28]


def _where(value: str, arena: ArenaPlan) -> str:
    if value.startswith("@"):
        return f"{value} -> weights"
    if value in arena.values:
        p = arena.values[value]
        buf = next(b for b in arena.buffers if b.name == p.buffer)
        return f"{value} -> arena+{buf.offset} col {p.col} {list(p.shape)}"
    return f"{value} -> row input"


def _launches(node: Node, emitter: str, types: dict) -> tuple[tuple[int | None, int], ...]:
    """KernelEntry.counts. A normed projection of the [T, n, K] streams (the LM head after
    hc_head_mean) runs a stream-mean norm kernel before its GEMM; a GEMM with the hc_post
    epilogue runs hc_post apart above APART_ROWS rows, and its gated norm prologue as a kernel of
    its own; attention runs split-KV decode (RoPE and KV write inside) or RoPE + KV write,
    then attend; hc_pre finishes 2 to HC_WIDE_ROWS rows in a second kernel, more in two (gates,
    apply); routed experts count their pairs in a kernel of its own past MOE_ROUTE_PAIRS; KDA
    takes its chunked kernels for a run of KDA_CHUNKED_ROWS rows, and MLA its dense kernel for a
    run of MLA_DENSE_ROWS (both counted here by the step's rows)."""
    if emitter == "matmul" and _stream_mean_norm(node, types):
        return ((None, 2),)
    if node.op is Op.LINEAR_HC_POST:
        if node.attrs.group:  # the gated norm's kernel first
            return (APART_ROWS, 2), (None, 3)
        return (APART_ROWS, 1), (None, 2)
    if emitter == "kda":
        return (KDA_CHUNKED_ROWS - 1, 1), (None, KDA_CHUNK_LAUNCHES)
    if emitter == "mla" and _dense_mla(node, types):
        return (MLA_DENSE_ROWS - 1, 3), (None, 4)
    if emitter == "hc_pre":
        return (NARROW_ROWS, 1), (HC_WIDE_ROWS, 2), (None, 3)
    if emitter == "moe_experts":  # ids [T, top_k]
        return (MOE_ROUTE_PAIRS // int(types[node.args[2]].shape[1]), 4), (None, 5)
    narrow, wide = LAUNCHES.get(emitter, (1, 1))
    return (NARROW_ROWS, narrow), (None, wide)


def _dense_mla(node: Node, types: dict) -> bool:
    """An MLA over a DSA selection that keeps the tail: its rows below index_topk see every
    earlier token (emitters.mla.MLASpec.dense)."""
    topk = node.attrs.index_topk
    return len(node.args) > 5 and 0 < topk < int(types[node.args[5]].shape[1])


def plan_kernels(graph: Graph, arena: ArenaPlan) -> KernelPlan:
    kernels, types = [], graph.value_types()
    for i, node in enumerate(graph.nodes):
        emitter = EMITTER_OF.get(node.op, INTERPRETER)
        name = f"k{i:02d}_{node.op.value}_{_tag(node)}"
        binds = tuple(_where(a, arena) for a in node.args + node.outs)
        if node.state:
            binds += (f"${node.state}.* -> state pool",)
        kernels.append(KernelEntry(name, emitter, node, binds, _launches(node, emitter, types),
                                   batched=emitter in ("attention", "kda")))
    if CONFIG.fold_sites:
        kernels = _fold_sites(kernels)
    if CONFIG.fold_sites and CONFIG.form_sites:
        kernels = _form_sites(kernels, types)
    if CONFIG.head_mean:
        kernels = _mean_heads(kernels, types)
    return KernelPlan(graph.name, tuple(_carry(kernels, arena)))


def _forms(site: KernelEntry, nxt: KernelEntry, kernels: list[KernelEntry], types: dict) -> bool:
    """Whether `nxt` can form the folded `site`'s y at one row (emitters.matmul's site_in): a
    GEMV with no norm prologue and the store or swiglu epilogue is y's only reader, and y is
    the site norm's output without a weight of its own (the weight is folded into nxt's)."""
    y, at = site.node.outs[0], site.node.attrs
    return (nxt.emitter == "matmul" and nxt.node.op in (Op.LINEAR, Op.NORM_LINEAR,
                                                        Op.SWIGLU_LINEAR)
            and nxt.node.args[0] == y and getattr(nxt.node.attrs, "eps", None) is None
            and at.out_eps is not None and len(site.node.args) == 4 and 2 * at.n <= 16
            and types[y].dtype == types[nxt.node.args[1]].dtype
            and sum(y in k.node.args for k in kernels) == 1)


def _form_sites(kernels: list[KernelEntry], types: dict) -> list[KernelEntry]:
    """Mark each site whose y the GEMV after it forms (`_forms`): that GEMV, its `forms`, and
    for a folded site the GEMM before, whose `finishes` then writes the partials and stream
    parts only; a site of its own (the first, after the embedding) launches its parts kernel
    at one row instead, or has the embedding's launch write them there (`_embeds`). The
    site's finish (a ticket, then one program's Sinkhorn, row read and y) leaves the one-row
    step's critical path."""
    out = list(kernels)
    for i, (site, nxt) in enumerate(zip(kernels, kernels[1:])):
        before = out[i - 1] if i else None
        if site.emitter != "hc_pre" or not _forms(site, nxt, kernels, types) \
                or (site.folded and not (before and before.finishes)):
            continue
        embedded = not site.folded and _embeds(before, site)
        out[i] = dataclasses.replace(site, formed=True, carried_rows=NARROW_ROWS * embedded)
        if site.folded:
            out[i - 1] = dataclasses.replace(before, finishes=out[i])
        elif embedded:
            out[i - 1] = dataclasses.replace(before, carries=out[i])
        out[i + 1] = dataclasses.replace(nxt, forms=out[i])
    return out


def _embeds(before: KernelEntry | None, site: KernelEntry) -> bool:
    """Whether the embedding right before a formed site of its own writes the site's parts at
    one row (CONFIG.embed_site): it gathers the streams the site reads, in the same launch."""
    return CONFIG.embed_site and before is not None and before.emitter == "embedding" \
        and before.node.op is Op.EMBED_STREAMS and before.node.outs[0] == site.node.args[0]


def _mean_heads(kernels: list[KernelEntry], types: dict) -> list[KernelEntry]:
    """Pair each GEMM with the hc_post epilogue with the stream-mean norm GEMM right after it
    that reads its new streams (the LM head after hc_head_mean): in steps of at most
    APART_ROWS rows the first stores the streams' mean beside them, and up to MEAN_ROWS the
    second norms that mean in its K loop, with no norm kernel (`means`, `meaned`)."""
    out = list(kernels)
    for i, (k, nxt) in enumerate(zip(kernels, kernels[1:])):
        if k.emitter == "matmul" and k.node.op is Op.LINEAR_HC_POST and nxt.emitter == "matmul" \
                and nxt.node.args[0] == k.node.outs[0] and _stream_mean_norm(nxt.node, types):
            out[i + 1] = dataclasses.replace(nxt, meaned=True,
                                             counts=((MEAN_ROWS, 1),) + nxt.counts)
            out[i] = dataclasses.replace(out[i], means=out[i + 1])
    return out


def _stream_mean_norm(node: Node, types: dict) -> bool:
    """Whether a GEMM node norms the mean of [T, n, K] streams (the mean_rmsnorm prologue)."""
    return getattr(node.attrs, "eps", None) is not None and types[node.args[0]].rank == 3 \
        and not getattr(node.attrs, "group", 0)


def _overlap(a: str, b: str, arena: ArenaPlan) -> bool:
    """Whether values a and b may share bytes of the arena (params and row inputs share none)."""
    pa, pb = arena.values.get(a), arena.values.get(b)
    if pa is None or pb is None:
        return False
    if pa.buffer == pb.buffer:
        return pa.col < pb.col + math.prod(pb.shape) and pb.col < pa.col + math.prod(pa.shape)
    ba, bb = (next(x for x in arena.buffers if x.name == p.buffer) for p in (pa, pb))
    return ba.offset < bb.offset + bb.nbytes and bb.offset < ba.offset + ba.nbytes


def _carried_rows(k: KernelEntry, nxt: KernelEntry) -> int:
    """Up to how many rows `k`'s launch can run `nxt` (0: it cannot): a KDA conv the f_b GEMM +
    decay gate that reads no conv output; the KDA recurrence g_b's GEMM + gated norm of its own
    output over whole heads, up to CONFIG.kda_norm_rows (a step of that many rows takes the
    recurrent form); a row norm another that reads none of its outputs, at every width. Only
    the pairs the arena births early (arena.CARRIED_AFTER) qualify."""
    if k.node.op not in CARRIED_AFTER.get(nxt.node.op, ()):
        return 0
    if k.emitter == "norm" and nxt.emitter == "norm" and not set(nxt.node.args) & set(k.node.outs):
        return ALWAYS
    if k.emitter == "kda_conv" and nxt.node.op is Op.LINEAR_KDA_GATE and CONFIG.conv_gate \
            and not set(nxt.node.args) & set(k.node.outs):
        return GEMV_ROWS
    if k.emitter == "kda" and nxt.node.op is Op.LINEAR_GATED_NORM \
            and nxt.node.args[2] == k.node.outs[0] and nxt.node.args[0] not in k.node.outs \
            and nxt.node.attrs.head_dim == k.node.attrs.head_dim:
        return min(CONFIG.kda_norm_rows, KDA_CHUNKED_ROWS - 1)
    return 0


def _carry(kernels: list[KernelEntry], arena: ArenaPlan) -> list[KernelEntry]:
    """Pair each entry with the one right after it that its launch can run (`_carried_rows`)
    when that entry's output shares no bytes with either's operands (it is written ahead of
    its plan position, inside the first's launch, while the first's programs still read)."""
    out = list(kernels)
    for i, (k, nxt) in enumerate(zip(kernels, kernels[1:])):
        most = 0 if k.carried_rows else _carried_rows(k, nxt)
        if most <= 0 or any(_overlap(nxt.node.outs[0], v, arena)
                            for v in k.node.args + k.node.outs + nxt.node.args):
            continue
        out[i + 1] = dataclasses.replace(nxt, carried_rows=most)
        out[i] = dataclasses.replace(k, carries=out[i + 1])
    return out


def _fold_sites(kernels: list[KernelEntry]) -> list[KernelEntry]:
    """Pair each GEMM with the hc_post epilogue with the hc_pre entry right after it when that
    site reads the GEMM's new streams: its outputs are written ahead of their plan position, so
    nothing may run between the two."""
    out = list(kernels)
    for i, (k, nxt) in enumerate(zip(kernels, kernels[1:])):
        if k.emitter == "matmul" and k.node.op is Op.LINEAR_HC_POST \
                and nxt.node.op is Op.HC_PRE and nxt.emitter == "hc_pre" \
                and nxt.node.args[0] == k.node.outs[0]:
            out[i + 1] = dataclasses.replace(nxt, folded=True)
            out[i] = dataclasses.replace(k, finishes=out[i + 1])
    return out
