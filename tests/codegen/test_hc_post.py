"""The standalone hc_post emitter against semantics.hc.hc_post (fp64): stream counts that pad
(3 -> 4), widths that leave a ragged column block, strided rows, slack rows untouched; with a
Feed, the next site's hc_pre (fed) against semantics.hc.hc_pre of the reference new streams.
CPU: Triton's interpreter in fp32; GPU (`gpu` mark): a bf16 sublayer output at bench width."""

from __future__ import annotations

import pytest
import torch

from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters import hc_post as emitter
from hyperloom.codegen.emitters import hc_pre
from hyperloom.codegen.emitters.hc_post import Feed, HCPostSpec, kernel_names, launch, source
from hyperloom.ir import ops
from hyperloom.ir.semantics import Ctx, hc
from tests.tolerances import assert_close, assert_rel


def _kernels(spec: HCPostSpec, device: str) -> tuple:
    src = source("hc_post", spec, header="test")
    return tuple(load(src, n, device) for n in kernel_names("hc_post"))


def _case(spec: HCPostSpec, rows: int, device: str, dtype: torch.dtype, seed: int):
    gen = torch.Generator().manual_seed(seed)
    n, d, slack = spec.n, spec.d, 3

    def rand(*shape):
        return torch.randn(shape, generator=gen)

    f = rand(rows + slack, d + 5)[:, :d].to(device, dtype)  # strided rows
    x = rand(rows + slack, n, d).to(device)
    post = (2 * torch.sigmoid(rand(rows + slack, n))).to(device)
    comb = torch.softmax(rand(rows + slack, n, n), -1).to(device)  # not symmetric
    out = torch.full((rows + slack, n, d), float("nan"), device=device)
    launch(_kernels(spec, device), spec, f=f, x=x, post=post, comb=comb, out=out, rows=rows)
    want = hc.hc_post(Ctx(torch.float64, None, ()), ops.NoAttrs(), f[:rows].double(),
                      x[:rows].double(), post[:rows].double(), comb[:rows].double())
    assert out[rows:].isnan().all(), "slack rows written"
    return out[:rows], want


@pytest.mark.parametrize("n,d", [(4, 300), (3, 64), (2, 2500)])
@pytest.mark.parametrize("rows", [1, 6])
def test_hc_post(n: int, d: int, rows: int) -> None:
    got, want = _case(HCPostSpec(n, d), rows, "cpu", torch.float32, seed=10 * n + rows)
    assert_close(got, want, torch.float32, f"hc_post n={n} d={d}")


def test_hc_post_bad_shape_is_named() -> None:
    spec = HCPostSpec(4, 64)
    x = torch.randn(2, 4, 64)
    with pytest.raises(ValueError, match=r"hc_post comb: \[>= 2, 4, 4\].*\(2, 3, 3\)"):
        launch(_kernels(spec, "cpu"), spec, f=torch.randn(2, 64), x=x, post=torch.randn(2, 4),
               comb=torch.randn(2, 3, 3), out=torch.empty_like(x), rows=2)


def test_hc_post_blocks_split_the_row(monkeypatch) -> None:
    monkeypatch.setattr(emitter, "BLOCK_D", 128)
    got, want = _case(HCPostSpec(4, 300), 3, "cpu", torch.float32, seed=5)
    assert_close(got, want, torch.float32, "hc_post in 128-column blocks")


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 4096])
def test_hc_post_gpu(rows: int) -> None:
    got, want = _case(HCPostSpec(4, 4096), rows, "cuda", torch.bfloat16, seed=rows)
    assert_close(got, want, torch.float32, "hc_post, bf16 f, fp32 math")


def _fed_site(n: int, d: int, rows: int, device: str, dtype: torch.dtype, in_place: bool,
              seed: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """hc_post with a Feed, then the next site's hc_pre fed from it: ([streams, y, post,
    comb], the same from fp64 semantics)."""
    gen = torch.Generator().manual_seed(seed)
    slack, spec = 3, HCPostSpec(n, d)

    def rand(*shape):
        return torch.randn(shape, generator=gen).to(device)

    f = rand(rows + slack, d).to(dtype)
    x = rand(rows + slack, n, d) * 1.7
    post = 2 * torch.sigmoid(rand(rows + slack, n))
    comb = torch.softmax(rand(rows + slack, n, n), -1)
    x_in = x.clone()
    out = x if in_place else torch.full_like(x, float("nan"))
    site = hc_pre.HCPreSpec(n=n, d=d, norm_eps=1e-6, hc_eps=1e-6, iters=20, out_eps=1e-5)
    j = hc_pre.widths(n)[0]
    fn = (rand(j, n * d) / (n * d) ** 0.5).to(dtype)
    base, scale = rand(j) * 0.5, torch.rand(3, generator=gen).to(device) + 0.5
    part, count = hc_pre.scratch(site, rows, device)
    part.fill_(float("nan"))  # every partial the site reads, the hc_post wrote
    count.fill_(-1)  # a fed step takes no ticket
    launch(_kernels(spec, device), spec, f=f, x=x, post=post, comb=comb, out=out, rows=rows,
           feed=Feed(site, fn, part))
    src = hc_pre.source("hc_pre", site, header="test")
    kernels = tuple(load(src, k, device) for k in hc_pre.kernel_names("hc_pre"))
    y = torch.full((rows + slack, d), float("nan"), dtype=dtype, device=device)
    s_post = torch.full((rows + slack, n), float("nan"), device=device)
    s_comb = torch.full((rows + slack, n, n), float("nan"), device=device)
    hc_pre.launch(kernels, site, x=out, fn=fn, base=base, scale=scale, y=y, post=s_post,
                  comb=s_comb, part=part, count=count, rows=rows, fused=False, fed=True)
    assert (count == -1).all() and y[rows:].isnan().all() and s_comb[rows:].isnan().all()
    ctx = Ctx(torch.float64, None, ())
    streams = hc.hc_post(ctx, ops.NoAttrs(), f[:rows].double(), x_in[:rows].double(),
                         post[:rows].double(), comb[:rows].double())
    at = ops.HCPreAttrs(n=n, norm_eps=site.norm_eps, hc_eps=site.hc_eps, iters=site.iters,
                        out_eps=site.out_eps)
    want = hc.hc_pre(ctx, at, streams, fn.double(), base.double(), scale.double())
    return [out[:rows], y[:rows], s_post[:rows], s_comb[:rows]], [streams, *want]


@pytest.mark.parametrize("n,d,rows,in_place", [(4, 300, 5, True), (3, 200, 70, False),
                                               (2, 130, 40, True)])
def test_hc_post_feeds_the_next_site(n: int, d: int, rows: int, in_place: bool,
                                     monkeypatch) -> None:
    # 300 and 130 columns: ragged FEED_COLS blocks; 70 rows: gates + apply (WIDE_ROWS 32),
    # 5 and 40 rows: the per-row finish; 5 and 70 rows: a ragged FEED_ROWS block
    monkeypatch.setattr(hc_pre, "WIDE_ROWS", 32)
    got, want = _fed_site(n, d, rows, "cpu", torch.float32, in_place, seed=rows + n)
    for name, g, w in zip(("streams", "y", "post", "comb"), got, want):
        assert_close(g, w, torch.float32, f"fed site {name}")


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [300, 2048])  # the finish; gates + apply
def test_hc_post_feeds_the_next_site_gpu(rows: int) -> None:
    got, want = _fed_site(4, 4096, rows, "cuda", torch.bfloat16, True, seed=rows)
    assert_close(got[0], want[0], torch.float32, "fed site streams (fp32 math)")
    for name, g, w in zip(("y", "post", "comb"), got[1:], want[1:]):
        assert_rel(g, w, 1e-2, f"fed site {name}")
