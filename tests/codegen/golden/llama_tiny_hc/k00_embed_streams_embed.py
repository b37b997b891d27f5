# k00_embed_streams_embed: embedding
# fuses: %0 embedding, %1 hc_expand
# node: %1 = embed_streams(%ids, @embed_tokens.weight) {n=4} : f32[T, 4, 64]  # fused: %0 embedding, %1 hc_expand
# %ids -> row input
# @embed_tokens.weight -> weights
# %1 -> arena+0 col 0 [4, 64]
import triton
import triton.language as tl


@triton.jit
def k00_embed_streams_embed(ids_ptr, table_ptr, out_ptr, vocab, table_stride, out_stride_row, out_stride_stream,
        D: tl.constexpr = 64, N: tl.constexpr = 4,
        BLOCK_D: tl.constexpr = 64):
    tl.extra.cuda.gdc_wait()  # the previous grid's writes are visible
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    tok = tl.load(ids_ptr + row)
    ok = (tok >= 0) & (tok < vocab)
    # clamp as well as mask, so not even the address of an invalid row is formed
    tok = tl.where(ok, tok, 0).to(tl.int64)
    vals = tl.load(table_ptr + tok * table_stride + cols, mask=(cols < D) & ok, other=0.0)
    vals = vals.to(out_ptr.dtype.element_ty)
    base = out_ptr + row.to(tl.int64) * out_stride_row + cols
    for i in tl.static_range(N):
        tl.store(base + i * out_stride_stream, vals, mask=cols < D)
