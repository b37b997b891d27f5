"""The embedding gather emitter against semantics.dense.embedding (and hc_expand for the stream
layout): table dtype and fp32 streams (n = 4, n = 1), odd and multi-block widths, row-strided
outputs, ids outside the table masked to zero rows, rows past `rows` untouched. CPU: Triton's
interpreter in fp32; GPU (`gpu` mark): bf16 tables on the H200."""

from __future__ import annotations

import pytest
import torch

from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters.embedding import EmbeddingSpec, launch, source
from hyperloom.ir import ops
from hyperloom.ir.semantics import Ctx, dense, hc
from tests.tolerances import assert_close, assert_rel

SLACK = 3  # rows allocated past `rows`: the kernel must leave them untouched
PAD = 16  # extra columns of the wider buffer a strided output is cut from


def run(spec: EmbeddingSpec, ids: torch.Tensor, table: torch.Tensor, out: torch.Tensor) -> None:
    kernel = load(source("embed", spec, header="test embedding"), "embed", table.device)
    launch(kernel, spec, ids=ids, table=table, out=out, rows=ids.shape[0])


def poisoned(shape: tuple[int, ...], dtype: torch.dtype, device: str = "cpu",
             strided: bool = False) -> torch.Tensor:
    wide = (*shape[:-1], shape[-1] + PAD) if strided else shape
    t = torch.full(wide, float("nan"), dtype=dtype, device=device)
    return t[..., 5: 5 + shape[-1]] if strided else t


def reference(spec: EmbeddingSpec, ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    ctx = Ctx(torch.float64, None, ())
    emb = dense.embedding(ctx, ops.NoAttrs(), ids, table.double())
    if spec.to_streams and spec.streams > 1:
        return hc.hc_expand(ctx, ops.HCExpandAttrs(spec.streams), emb)
    return emb


@pytest.mark.parametrize("d", [40, 1100])  # one partial block; two blocks, the last partial
@pytest.mark.parametrize("streams,to_streams", [(1, False), (4, True), (1, True)])
@pytest.mark.parametrize("strided", [False, True])
def test_gather(d: int, streams: int, to_streams: bool, strided: bool) -> None:
    gen = torch.Generator().manual_seed(d + 7 * streams + strided)
    vocab, rows = 37, 6
    spec = EmbeddingSpec(d=d, streams=streams, to_streams=to_streams)
    table = torch.randn(vocab, d, generator=gen) + 0.5
    ids = torch.randint(0, vocab, (rows,), generator=gen)
    ids[0], ids[-1] = 0, vocab - 1
    shape = (rows + SLACK, streams, d) if to_streams and streams > 1 else (rows + SLACK, d)
    out = poisoned(shape, torch.float32, strided=strided)
    run(spec, ids, table, out)
    assert_close(out[:rows], reference(spec, ids, table), torch.float32, "embedding")
    assert out[rows:].isnan().all(), "rows past `rows` were written"


def test_ids_outside_table_read_nothing() -> None:
    gen = torch.Generator().manual_seed(3)
    vocab, d = 11, 24
    spec = EmbeddingSpec(d=d, streams=2, to_streams=True)
    table = torch.randn(vocab, d, generator=gen) + 0.5
    ids = torch.tensor([4, vocab, -1, 1 << 40, 2])
    out = poisoned((5, 2, d), torch.float32)
    run(spec, ids, table, out)
    valid = torch.tensor([True, False, False, False, True])
    assert_close(out[valid], reference(spec, ids[valid], table), torch.float32, "valid ids")
    assert (out[~valid] == 0).all(), "an id outside the table must give a zero row"


@pytest.mark.gpu
@pytest.mark.parametrize("streams,to_streams", [(1, False), (4, True), (1, True)])
def test_gather_gpu(streams: int, to_streams: bool) -> None:
    gen = torch.Generator().manual_seed(11)
    vocab, d, rows = 32000, 4096, 300
    spec = EmbeddingSpec(d=d, streams=streams, to_streams=to_streams)
    table = torch.randn(vocab, d, generator=gen).to("cuda", torch.bfloat16)
    ids = torch.randint(0, vocab, (rows,), generator=gen).cuda()
    dtype = torch.float32 if to_streams else torch.bfloat16
    shape = (rows + SLACK, streams, d) if to_streams and streams > 1 else (rows + SLACK, d)
    out = poisoned(shape, dtype, "cuda", strided=True)
    run(spec, ids, table, out)
    want = reference(spec, ids, table.float())
    assert_rel(out[:rows].float(), want, 1e-2, "embedding gpu")
    assert torch.equal(out[:rows].double(), want), "a gather must copy exactly"
    assert out[rows:].isnan().all(), "rows past `rows` were written"
