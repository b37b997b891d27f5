"""The KDA gate emitter against semantics.kda.kda_gate (fp64): both gate forms (GLM-5.3's
lower-bounded sigmoid and the softplus form), f large enough either way to take each branch of
softplus, widths that leave a ragged column block, a block spanning part of a head, strided rows,
slack rows untouched. CPU: Triton's interpreter in fp32; GPU (`gpu` mark): bf16 f at GLM-5.3
width (64 heads x 128) on the H200."""

from __future__ import annotations

import pytest
import torch

from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters import kda_gate as emitter
from hyperloom.codegen.emitters.kda_gate import KDAGateSpec, launch, source
from hyperloom.ir import ops
from hyperloom.ir.semantics import Ctx, kda
from tests.tolerances import assert_close, assert_rel

FORMS = [-5.0, None]  # GLM-5.3's lower bound; the softplus form


def _case(spec: KDAGateSpec, rows: int, device: str, dtype: torch.dtype, seed: int,
          g_dtype: torch.dtype = torch.float32):
    gen = torch.Generator().manual_seed(seed)
    w, slack = spec.width, 3
    f = torch.randn((rows + slack, w + 7), generator=gen) * 3
    big = f[:, ::5]  # |f + dt_bias| past 20 both ways: softplus's linear and exp branches
    big.copy_(big.sign() * (25 + 25 * torch.rand(big.shape, generator=gen)))
    f = f[:, :w].to(device, dtype)  # strided rows
    dt_bias = torch.randn(w, generator=gen).to(device)
    a_log = (torch.rand(spec.heads, generator=gen) * 2.5 - 2).to(device)  # rates e^-2 .. e^.5
    g = torch.full((rows + slack, w), float("nan"), dtype=g_dtype, device=device)
    kernel = load(source("kda_gate", spec, header="test"), "kda_gate", device)
    launch(kernel, spec, f=f, dt_bias=dt_bias, a_log=a_log, g=g, rows=rows)
    at = ops.KDAGateAttrs(spec.heads, spec.head_dim, spec.lower_bound)
    want = kda.kda_gate(Ctx(torch.float64, None, ()), at, f[:rows].double(), dt_bias.double(),
                        a_log.double())
    assert g[rows:].isnan().all(), "slack rows written"
    return g[:rows], want


@pytest.mark.parametrize("lower_bound", FORMS)
@pytest.mark.parametrize("heads,head_dim", [(4, 16), (3, 24), (5, 100)])
@pytest.mark.parametrize("rows", [1, 6])
def test_kda_gate(lower_bound: float | None, heads: int, head_dim: int, rows: int) -> None:
    spec = KDAGateSpec(heads, head_dim, lower_bound)
    got, want = _case(spec, rows, "cpu", torch.float32, seed=heads * head_dim + rows)
    assert_close(got, want, torch.float32, f"kda_gate {spec}")


@pytest.mark.parametrize("lower_bound", FORMS)
def test_kda_gate_blocks_split_the_row(monkeypatch, lower_bound: float | None) -> None:
    monkeypatch.setattr(emitter, "BLOCK", 32)  # 6 blocks (the last ragged) across heads of 24
    spec = KDAGateSpec(7, 24, lower_bound)
    got, want = _case(spec, 3, "cpu", torch.float32, seed=7)
    assert_close(got, want, torch.float32, "kda_gate in 32-column blocks")


def test_kda_gate_softplus_is_exact_at_both_tails() -> None:
    """Far negative x: softplus(x) ~ e^x, a tiny relative-error check (1 + e^x rounds to 1);
    far positive: x itself (exp would overflow). One head, rate 1: g = -softplus(x)."""
    spec = KDAGateSpec(1, 8, None)
    x = torch.tensor([[-80.0, -30.0, -17.0, -8.0, 0.5, 19.9, 20.5, 200.0]])
    g = torch.full((1, 8), float("nan"))
    kernel = load(source("kda_gate", spec), "kda_gate", "cpu")
    launch(kernel, spec, f=x, dt_bias=torch.zeros(8), a_log=torch.zeros(1), g=g, rows=1)
    want = -torch.nn.functional.softplus(x.double())
    assert ((g.double() - want).abs() <= 4e-7 * want.abs()).all(), (g, want)


def test_kda_gate_bad_shape_is_named() -> None:
    spec = KDAGateSpec(4, 16, -5.0)
    kernel = load(source("kda_gate", spec), "kda_gate", "cpu")
    f, g = torch.randn(2, 64), torch.empty(2, 64)
    with pytest.raises(ValueError, match=r"KDA gate a_log: contiguous \[4\], got \(64,\)"):
        launch(kernel, spec, f=f, dt_bias=torch.randn(64), a_log=torch.randn(64), g=g, rows=2)
    with pytest.raises(ValueError, match=r"KDA gate g: \[>= 3, 64\].*got \(2, 64\)"):
        launch(kernel, spec, f=torch.randn(3, 64), dt_bias=torch.randn(64),
               a_log=torch.randn(4), g=g, rows=3)


@pytest.mark.gpu
@pytest.mark.parametrize("lower_bound", FORMS)
@pytest.mark.parametrize("rows", [1, 4096])
def test_kda_gate_gpu(lower_bound: float | None, rows: int) -> None:
    spec = KDAGateSpec(64, 128, lower_bound)
    got, want = _case(spec, rows, "cuda", torch.bfloat16, seed=rows)
    assert_close(got, want, torch.float32, "kda_gate, bf16 f, fp32 math")
    got, want = _case(spec, rows, "cuda", torch.bfloat16, seed=rows, g_dtype=torch.bfloat16)
    assert_rel(got.float(), want, 1e-2, "kda_gate, bf16 f and g")
