"""The routed experts' weight tiles loaded by TMA: each packed stack [E, KD / R, N, R] is a 4-D
tensor descriptor whose box [1, BK / R, BN, R] is one K step of one column block, so a tile is one
bulk copy into shared memory (no per-thread addresses, zero fill past N and KD), not BK x BN
loads through registers' address math. Prefill's gate_up and down stream the experts' 14.5 GB at
86-87% of the copy rate (BENCHMARKS), 50% of the matmul peak asks about 83%. The launch is the
host's with descriptors in place of the stacks. `variant(flat=True)`: where a K step is one run
(BK = R) and the column blocks tile N, each stack is a 2-D descriptor [E KD / R N, R] with box
[BN, R] instead, so a tile needs no reshape on its way to the tensor cores."""
import re

from triton.tools.tensor_descriptor import TensorDescriptor
from variant import make

from hyperloom.codegen.emitters import moe_experts as mx
from hyperloom.codegen.emitters.ints import cdiv
from hyperloom.ir.derive import pack_run

TILE = '''
@triton.jit
def _tma_tile(desc, e, k0, pid_n, BN: tl.constexpr, BK: tl.constexpr, R: tl.constexpr,
              N: tl.constexpr, KD: tl.constexpr):
    """The [BK, BN] weight tile of K step k0, column block pid_n of expert e."""
    b = desc.load([e, k0 // R, pid_n * BN, 0])
    if BK == R:
        return tl.trans(tl.reshape(b, (BN, R)))
    return tl.reshape(tl.permute(tl.reshape(b, (BK // R, BN, R)), (0, 2, 1)), (BK, BN))

'''
FLAT = '''
@triton.jit
def _tma_tile(desc, e, k0, pid_n, BN: tl.constexpr, BK: tl.constexpr, R: tl.constexpr,
              N: tl.constexpr, KD: tl.constexpr):
    """The [BK, BN] weight tile of K step k0 (BK = R), column block pid_n of expert e."""
    return tl.trans(desc.load([(e * (KD // R) + k0 // R) * N + pid_n * BN, 0]))

'''


def _patch(tile: str):
    def tma(source: str, name: str) -> str:
        loads = r"tl\.load\((w[gud]_ptr) \+ w_off \+ k0 \* N, mask=b_ok, other=0\.0\)"
        source, hits = re.subn(loads, r"_tma_tile(\1, e, k0, pid_n, BN, BK, R, N, KD)", source)
        if hits != 3:
            raise ValueError(f"tma variant: {hits} weight loads patched, want 3")
        at = source.index("@triton.jit\ndef _gate_up_rows(")
        return source[:at] + tile + source[at:]
    return tma


def _desc(w, bk: int, bn: int, flat: bool):
    e, kr, n, r = w.shape
    if flat:
        assert bk == r and n % bn == 0, f"flat descriptors: BK {bk} = R {r}, BN {bn} | N {n}"
        return TensorDescriptor(w, [e * kr * n, r], [r, 1], [bn, r])
    return TensorDescriptor(w, list(w.shape), list(w.stride()), [1, bk // r, bn, r])


def _launch(kernels, spec, *, x, weights, ids, wg, wu, wd, out, rows, work, skip=None,
           gemv=None, flat=False) -> None:
    """moe_experts.launch with the stacks as descriptors."""
    mx._check(spec, x, weights, ids, wg, wu, wd, out, rows, work)
    if rows <= 0:
        return
    count, route, gate_up, down, combine = kernels
    t = mx.tiles(spec, rows, gemv, x.element_size(), wg.element_size())
    assert t.bk % pack_run(spec.hidden) == 0 and t.bk % pack_run(spec.inter) == 0
    pairs, has_skip = rows * spec.top_k, skip is not None
    skip = ids if skip is None else skip
    block, chunks = mx._route_block(pairs), mx._chunks(pairs)
    rmeta = dict(BLOCK=block, HAS_SKIP=has_skip, num_warps=8 if block > 256 else 4)
    if chunks > 1:
        count[(chunks,)](ids, skip, work.counts, pairs, ids.stride(0), skip.stride(0), **rmeta)
    route[(chunks,)](ids, skip, work.counts, work.order, work.meta, pairs, chunks,
                     ids.stride(0), skip.stride(0), BM=t.bm, **rmeta)
    ub = min(cdiv(pairs, t.bm) + min(spec.experts, pairs), spec.experts * cdiv(rows, t.bm))
    meta = dict(BM=t.bm, BK=t.bk, GROUP_M=t.group_m, num_warps=t.warps, num_stages=t.stages)
    gate_up[(ub * cdiv(spec.inter, t.bn),)](
        x, _desc(wg, t.bk, t.bn, flat), _desc(wu, t.bk, t.bn, flat), work.h, work.order,
        work.meta, ub, x.stride(0), BN=t.bn, **meta)
    down[(ub * cdiv(spec.hidden, t.bn_down),)](
        work.h, _desc(wd, t.bk, t.bn_down, flat), weights, work.part, work.order, work.meta, ub,
        weights.stride(0), BN=t.bn_down, **meta)
    block = mx.COMBINE_BLOCK // 4 if rows <= mx.GEMV_ROWS else mx.COMBINE_BLOCK
    bh = min(block, mx.next_power_of_2(spec.hidden))
    combine[(rows, cdiv(spec.hidden, bh))](
        work.part, ids, skip, out, ids.stride(0), skip.stride(0), out.stride(0), BH=bh,
        HAS_SKIP=has_skip, num_warps=4)


def variant(flat: bool = False) -> dict:
    return make(text=[_patch(FLAT if flat else TILE)], host=mx) | {
        "launch": lambda *a, **kw: _launch(*a, **kw, flat=flat)}


if __name__.startswith("sweep_variant"):  # loaded as a variant file: the 4-D form
    globals().update(variant())
