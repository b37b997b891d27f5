# k00_embed_streams_embed: embedding
# fuses: %0 embedding, %1 hc_expand
# node: %1 = embed_streams(%ids, @embed_tokens.weight) {n=4} : f32[T, 4, 64]  # fused: %0 embedding, %1 hc_expand
# %ids -> row input
# @embed_tokens.weight -> weights
# %1 -> arena+0 col 0 [4, 64]
import triton
import triton.language as tl


@triton.jit
def _streams(id_ptr, table_ptr, out_at, vocab, table_stride, s_stream, cols, cmask,
             N: tl.constexpr):
    """The table row of the id at id_ptr, columns cols (cmask), into N streams at out_at + i *
    s_stream + cols, in out's dtype (a zero row for an id outside the table)."""
    tok = tl.load(id_ptr)
    ok = (tok >= 0) & (tok < vocab)
    # clamp as well as mask, so not even the address of an invalid row is formed
    tok = tl.where(ok, tok, 0).to(tl.int64)
    vals = tl.load(table_ptr + tok * table_stride + cols, mask=cmask & ok, other=0.0)
    vals = vals.to(out_at.dtype.element_ty)
    for i in tl.static_range(N):
        tl.store(out_at + i * s_stream, vals, mask=cmask)


@triton.jit
def k00_embed_streams_embed(ids_ptr, table_ptr, out_ptr, vocab, table_stride, out_stride_row, out_stride_stream,
        D: tl.constexpr = 64, N: tl.constexpr = 4,
        BLOCK_D: tl.constexpr = 64):
    tl.extra.cuda.gdc_wait()  # the previous grid's writes are visible
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    base = out_ptr + row.to(tl.int64) * out_stride_row + cols
    _streams(ids_ptr + row, table_ptr, base, vocab, table_stride, out_stride_stream, cols,
             cols < D, N)


@triton.jit
def k00_embed_streams_embed_parts(ids_ptr, table_ptr, out_ptr, fn_ptr, part_ptr, parts_ptr, vocab,
        table_stride, sx_stream, s_fn, BLOCK_N: tl.constexpr):
    """Row 0: its embedding into every stream, then the formed site's parts from them."""
    tl.extra.cuda.gdc_wait()  # the previous grid's writes are visible
    pid_n = tl.program_id(0)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = rn < 64
    _streams(ids_ptr, table_ptr, out_ptr + rn, vocab, table_stride, sx_stream, rn, n_ok, 4)
    tl.debug_barrier()  # this program's stream columns are stored
    jj = tl.arange(0, 32)
    pj = tl.zeros((32,), tl.float32)
    q = tl.arange(0, 16)
    gv = tl.zeros((16,), tl.float32)
    xs0 = tl.load(out_ptr + 0 * sx_stream + rn, mask=n_ok, other=0.0)
    wf = tl.load(fn_ptr + jj[:, None] * s_fn + 0 + rn[None, :],
                 mask=(jj < 24)[:, None] & n_ok[None, :], other=0.0)
    pj += tl.sum(wf.to(tl.float32) * xs0[None, :], axis=1)
    hi = xs0.to(parts_ptr.dtype.element_ty)
    tl.store(parts_ptr + 0 + rn, hi, mask=n_ok)
    tl.store(parts_ptr + 256 + rn, (xs0 - hi.to(tl.float32)).to(parts_ptr.dtype.element_ty), mask=n_ok)
    xs1 = tl.load(out_ptr + 1 * sx_stream + rn, mask=n_ok, other=0.0)
    wf = tl.load(fn_ptr + jj[:, None] * s_fn + 64 + rn[None, :],
                 mask=(jj < 24)[:, None] & n_ok[None, :], other=0.0)
    pj += tl.sum(wf.to(tl.float32) * xs1[None, :], axis=1)
    hi = xs1.to(parts_ptr.dtype.element_ty)
    tl.store(parts_ptr + 64 + rn, hi, mask=n_ok)
    tl.store(parts_ptr + 320 + rn, (xs1 - hi.to(tl.float32)).to(parts_ptr.dtype.element_ty), mask=n_ok)
    xs2 = tl.load(out_ptr + 2 * sx_stream + rn, mask=n_ok, other=0.0)
    wf = tl.load(fn_ptr + jj[:, None] * s_fn + 128 + rn[None, :],
                 mask=(jj < 24)[:, None] & n_ok[None, :], other=0.0)
    pj += tl.sum(wf.to(tl.float32) * xs2[None, :], axis=1)
    hi = xs2.to(parts_ptr.dtype.element_ty)
    tl.store(parts_ptr + 128 + rn, hi, mask=n_ok)
    tl.store(parts_ptr + 384 + rn, (xs2 - hi.to(tl.float32)).to(parts_ptr.dtype.element_ty), mask=n_ok)
    xs3 = tl.load(out_ptr + 3 * sx_stream + rn, mask=n_ok, other=0.0)
    wf = tl.load(fn_ptr + jj[:, None] * s_fn + 192 + rn[None, :],
                 mask=(jj < 24)[:, None] & n_ok[None, :], other=0.0)
    pj += tl.sum(wf.to(tl.float32) * xs3[None, :], axis=1)
    hi = xs3.to(parts_ptr.dtype.element_ty)
    tl.store(parts_ptr + 192 + rn, hi, mask=n_ok)
    tl.store(parts_ptr + 448 + rn, (xs3 - hi.to(tl.float32)).to(parts_ptr.dtype.element_ty), mask=n_ok)
    gv = tl.where((q == 0) | (q == 0), tl.sum(xs0 * xs0, axis=0), gv)
    gv = tl.where((q == 1) | (q == 4), tl.sum(xs0 * xs1, axis=0), gv)
    gv = tl.where((q == 2) | (q == 8), tl.sum(xs0 * xs2, axis=0), gv)
    gv = tl.where((q == 3) | (q == 12), tl.sum(xs0 * xs3, axis=0), gv)
    gv = tl.where((q == 5) | (q == 5), tl.sum(xs1 * xs1, axis=0), gv)
    gv = tl.where((q == 6) | (q == 9), tl.sum(xs1 * xs2, axis=0), gv)
    gv = tl.where((q == 7) | (q == 13), tl.sum(xs1 * xs3, axis=0), gv)
    gv = tl.where((q == 10) | (q == 10), tl.sum(xs2 * xs2, axis=0), gv)
    gv = tl.where((q == 11) | (q == 14), tl.sum(xs2 * xs3, axis=0), gv)
    gv = tl.where((q == 15) | (q == 15), tl.sum(xs3 * xs3, axis=0), gv)
    pj = tl.where(jj == 24, tl.sum(tl.where((q == 0) | (q == 5) | (q == 10) | (q == 15), gv, 0.0), axis=0), pj)
    tl.store(part_ptr + pid_n * 32 + jj, pj)
    tl.store(part_ptr + 64 + pid_n * 16 + q, gv)
