"""The standalone hc_post emitter against semantics.hc.hc_post (fp64): stream counts that pad
(3 -> 4), widths that leave a ragged column block, strided rows, slack rows untouched.
CPU: Triton's interpreter in fp32; GPU (`gpu` mark): a bf16 sublayer output at bench width."""

from __future__ import annotations

import pytest
import torch

from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters import hc_post as emitter
from hyperloom.codegen.emitters.hc_post import HCPostSpec, launch, source
from hyperloom.ir import ops
from hyperloom.ir.semantics import Ctx, hc
from tests.tolerances import assert_close


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
    kernel = load(source("hc_post", spec, header="test"), "hc_post", device)
    launch(kernel, spec, f=f, x=x, post=post, comb=comb, out=out, rows=rows)
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
    kernel = load(source("hc_post", spec), "hc_post", "cpu")
    x = torch.randn(2, 4, 64)
    with pytest.raises(ValueError, match=r"hc_post comb: \[>= 2, 4, 4\].*\(2, 3, 3\)"):
        launch(kernel, spec, f=torch.randn(2, 64), x=x, post=torch.randn(2, 4),
               comb=torch.randn(2, 3, 3), out=torch.empty_like(x), rows=2)


def test_hc_post_blocks_split_the_row(monkeypatch) -> None:
    monkeypatch.setattr(emitter, "BLOCK_D", 128)
    got, want = _case(HCPostSpec(4, 300), 3, "cpu", torch.float32, seed=5)
    assert_close(got, want, torch.float32, "hc_post in 128-column blocks")


@pytest.mark.parametrize("order", emitter.ORDERS)
def test_hc_post_walk_orders(monkeypatch, order: str) -> None:
    """Every walk (`ORDER`) gives each row its own streams, over ragged 128-column blocks."""
    monkeypatch.setattr(emitter, "ORDER", order)
    monkeypatch.setattr(emitter, "BLOCK_D", 128)
    got, want = _case(HCPostSpec(3, 300), 5, "cpu", torch.float32, seed=7)
    assert_close(got, want, torch.float32, f"hc_post walking {order}")


@pytest.mark.gpu
@pytest.mark.parametrize("order", emitter.ORDERS)
@pytest.mark.parametrize("rows", [1, 4096])
def test_hc_post_gpu(monkeypatch, rows: int, order: str) -> None:
    monkeypatch.setattr(emitter, "ORDER", order)
    got, want = _case(HCPostSpec(4, 4096), rows, "cuda", torch.bfloat16, seed=rows)
    assert_close(got, want, torch.float32, "hc_post, bf16 f, fp32 math")
