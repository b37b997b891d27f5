"""The embedding gather emitter against semantics.dense.embedding (and hc_expand for the stream
layout): table dtype and fp32 streams (n = 4, n = 1), odd and multi-block widths, row-strided
outputs, ids outside the table masked to zero rows, rows past `rows` untouched. CPU: Triton's
interpreter in fp32; GPU (`gpu` mark): bf16 tables on the H200."""

from __future__ import annotations

import pytest
import torch

from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters import hc_pre, hc_pre_launch
from hyperloom.codegen.emitters.embedding import (EmbeddingSpec, launch, launch_parts, parts_name,
                                                  source)
from hyperloom.codegen.emitters.gemv import site_block
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


@pytest.mark.parametrize("d", [40, 1100])  # one program; several, the last partial
@pytest.mark.parametrize("inside", [True, False])  # an id past the table: zero streams, parts
def test_one_row_writes_the_first_sites_parts(d: int, inside: bool) -> None:
    """The embedding that carries the first formed site (kernel_plan `_embeds`): at one row its
    parts kernel writes the streams and exactly what the site's own parts kernel writes from
    them (partials with the Gram, hi and lo stream parts)."""
    check_site_parts(d, inside, "cpu", torch.float32)


def check_site_parts(d: int, inside: bool, device: str, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(d + inside)
    vocab, n = 29, 4
    site = hc_pre.HCPreSpec(n, d, 1e-6, 1e-6, 20, 1e-6)
    spec = EmbeddingSpec(d=d, streams=n, to_streams=True, site=site)
    table = (torch.randn(vocab, d, generator=gen) + 0.5).to(device, dtype)
    ids = torch.tensor([vocab // 2 if inside else vocab + 3], device=device)
    fn = (torch.randn((2 + n) * n, n * d, generator=gen) / d).to(device)
    part, _ = hc_pre_launch.scratch(site, 1, device)
    want_part, parts, want_parts = part.clone(), *(
        torch.full((2 * n, d), float("nan"), dtype=dtype, device=device) for _ in range(2))
    out = poisoned((1 + SLACK, n, d), torch.float32, device)
    src = source("embed", spec)
    launch_parts(load(src, parts_name("embed"), device, "embed"), spec, ids=ids, table=table,
                 out=out, fn=fn, part=part, parts=parts)
    want = reference(spec, ids.cpu(), table.cpu()) if inside else torch.zeros(1, n, d)
    assert_close(out[:1].cpu(), want, torch.float32, "embedded streams")
    assert out[1:].isnan().all(), "rows past the one row were written"
    own = load(hc_pre.source("site", site), hc_pre.parts_name("site"), device, "site")
    hc_pre_launch.launch_parts(own, site, x=out, fn=fn, part=want_part, parts=want_parts,
                        block_n=site_block(d))
    at, nn = hc_pre.gram(site)
    used = at + hc_pre.site_programs(d) * nn
    assert torch.equal(part[:used], want_part[:used]), "partials differ from the site's own"
    assert torch.equal(parts, want_parts), "stream parts differ from the site's own"


@pytest.mark.gpu
@pytest.mark.parametrize("inside", [True, False])
def test_gpu_one_row_writes_the_first_sites_parts(inside: bool) -> None:
    # llama bench's width: a bf16 table, bf16 stream parts
    check_site_parts(4096, inside, "cuda", torch.bfloat16)


def test_a_site_needs_the_embeddings_streams() -> None:
    site = hc_pre.HCPreSpec(4, 40, 1e-6, 1e-6, 20, 1e-6)
    with pytest.raises(ValueError, match="4 x 40 streams"):
        EmbeddingSpec(d=40, streams=2, to_streams=True, site=site)
    with pytest.raises(ValueError, match="4 x 40 streams"):
        EmbeddingSpec(d=40, streams=4, to_streams=False, site=site)


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
