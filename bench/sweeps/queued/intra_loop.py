"""Queued for the H200 (CPU-checked, not yet run there): the chunked KDA prefill's in-chunk
kernel as one program a (chunk, head) looping over its 16-row blocks in order, the products
16 rows high as committed. Each block stores its keys decayed to the block's end,
k e^(G_end - G) (fp16 under 16-bit activations, in qe's memory, which the row products write
later) and its total decay e^(sum g) (a scratch this variant allocates); a later block reads
them back and scales them by the totals between (a [1, d] factor each), so no left block is
loaded, normalised or summed again: 4 block preparations a (chunk, head) where the committed
kernel does 10. sm_90 on the CPU: 229 registers at 8 warps, none spilled (4 warps: 92 bytes
spilled; 2 warps: 380). Run it as

    python bench/sweeps/kda_chunk.py 8192 committed bench/sweeps/queued/intra_loop.py

(WARPS and MAXNREG below pick the launch) after `--tests` on the CPU."""

from __future__ import annotations

import torch

from hyperloom.codegen.emitters import kda_chunk as host
from hyperloom.codegen.emitters import kda_chunk_intra as ki
from hyperloom.codegen.emitters.kda_chunk_intra import SUB

WARPS, MAXNREG = 8, 255
_E: dict = {}  # the block totals' scratch, by launch shape

ARGS = ki.INTRA_ARGS[:-3] + ["ko_ptr", "e_ptr"] + ki.INTRA_ARGS[-3:]


_BLOCK_TP = ("    tp = tp_ptr + (i * H + h).to(tl.int64) * 2 * C * C + (ib * BC + j)[:, None] * C"
             " + j[None, :]\n")  # row block ib of the chunk's [2, C, C] pair


def intra_source(name: str, chunk: int, head_dim: int) -> str:
    block = indent(ki._block("i", "ib") + _BLOCK_TP + ki._OWN_BLOCK + ki._DIAGONAL
                   + ki._STORE_DIAGONAL)  # the committed kernel's text for row block ib
    return ki.intra_def(name, head_dim, ARGS) + f'''    NB: tl.constexpr = C // BC
    dd = tl.arange(0, D)
    at_e = (i * H + h).to(tl.int64) * NB * D
    for ib in range(0, NB):
{block}        f = tl.full([1, D], 1.0, tl.float32)
        for jj in range(0, ib):
            jb = ib - 1 - jj
            rj = row0 + jb * BC + j
            mj = _live(slot_ptr, rj, rows, s)
            kj = tl.load(ko_ptr + (rj[:, None].to(tl.int64) * H + h) * D + dd[None, :],
                         mask=mj[:, None], other=0.)
            kj = tl.trans((kj.to(tl.float32) * f).to(NT))
            tl.store(tp + jb * BC, _tc(ki16, kj) * bi[:, None])
            tl.store(tp + C * C + jb * BC, _tc(qi16, kj))
            f = f * tl.load(e_ptr + at_e + jb * D + dd)[None, :]
        ko = (k * tl.exp(_sums(gi, True, G16))).to(ko_ptr.dtype.element_ty)
        tl.store(ko_ptr + (ri[:, None].to(tl.int64) * H + h) * D + dd[None, :], ko,
                 mask=mi[:, None])
        tl.store(e_ptr + at_e + ib * D + dd, tl.exp(tl.sum(gi, 0)))
        tl.debug_barrier()
'''


def indent(text: str) -> str:
    return "".join("    " + line if line.strip() else line for line in text.splitlines(True))


def replace(src: str, name: str, chunk: int, head_dim: int) -> str:
    i = src.index(f"def {name}_intra(")
    i = src.rindex("@triton.jit", 0, i)
    j = src.index("@triton.jit", i + 5)
    return src[:i] + intra_source(name, chunk, head_dim).lstrip("\n") + "\n\n" + src[j:]


class _Intra:
    """The in-chunk kernel launched one program a (chunk, head) with its two operands more (they
    follow the committed kernel's positional arguments)."""

    def __init__(self, kernel, extra: tuple) -> None:
        self.kernel, self.extra = kernel, extra

    def __getitem__(self, grid: tuple):
        run = self.kernel[(grid[0], grid[1], 1)]
        return lambda *a, **kw: run(*a, *self.extra,
                                    **(kw | {"num_warps": WARPS, "maxnreg": MAXNREG}))


def launch(kernels, spec, *, q, state, rows, work=None, **kw):
    """kda_chunk's launch, the in-chunk kernel's keys in qe's memory and its totals in _E."""
    if work is None:
        work = host.scratch(spec, rows, state.shape[0], q.device, q.dtype)
    chunks = host.bounds(spec, rows, state.shape[0])[1]
    key = (chunks, spec.heads, spec.chunk, spec.head_dim, q.device)
    if key not in _E:
        _E[key] = torch.empty((max(chunks, 1), spec.heads, spec.chunk // SUB, spec.head_dim),
                              dtype=torch.float32, device=q.device)
    kernels = (kernels[0], _Intra(kernels[1], (work.qe, _E[key])), *kernels[2:])
    _BASE_LAUNCH(kernels, spec, q=q, state=state, rows=rows, work=work, **kw)


# kda_chunk.py --tests puts this module's in their place
_BASE_SOURCE, _BASE_LAUNCH = host.source, host.launch


def source(name: str, spec, header: str = "") -> str:
    return replace(_BASE_SOURCE(name, spec, header), name, spec.chunk, spec.head_dim)


KDAChunkSpec, scratch, kernel_names, bounds, narrow_dtype = (
    host.KDAChunkSpec, host.scratch, host.kernel_names, host.bounds, host.narrow_dtype)
