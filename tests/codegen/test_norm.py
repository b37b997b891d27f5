"""The standalone norm emitter against semantics.dense (fp64): rmsnorm, KDA's per-head gated
rmsnorm and layernorm, widths that pad their block, rows of several dims, strided rows, slack
rows untouched, bad operands named. CPU: Triton's interpreter in fp32; GPU (`gpu` mark): bf16
at GLM-5.3 widths."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters.norm import NormSpec, Operands, launch, source
from hyperloom.ir import ops
from hyperloom.ir.semantics import Ctx, dense
from tests.tolerances import assert_close, assert_rel

SLACK = 2


def _case(spec: NormSpec, rows: int, inner: tuple[int, ...], device: str, dtype: torch.dtype,
          gen: torch.Generator) -> tuple[Operands, torch.Tensor]:
    """Fresh random operands of `spec` (x strided when 2-D rows, out NaN) and the fp64
    reference of their first `rows` rows."""
    def rand(*shape, scale=1.0, shift=0.0):
        return (torch.randn(shape, generator=gen) * scale + shift).to(device)

    alloc = (rows + SLACK, *inner)
    x = rand(*alloc[:-1], alloc[-1] + 6, scale=2.0, shift=0.5)[..., 3: 3 + alloc[-1]]
    x = x.to(dtype) if len(inner) == 1 else x.contiguous().to(dtype)  # strided rows when 2-D
    gate = rand(*alloc, scale=3.0).to(dtype) if spec.kind == "gated_rmsnorm" else None
    w, b = rand(spec.group, shift=1.0), rand(spec.group) if spec.kind == "layernorm" else None
    out = torch.full(alloc, float("nan"), device=device, dtype=dtype)
    d = [t[:rows].double() if t is not None else None for t in (x, gate)]
    ctx, flat = Ctx(torch.float64, None, ()), d[0].reshape(rows, -1)
    if spec.kind == "rmsnorm":
        want = dense.rmsnorm(ctx, ops.NormAttrs(spec.eps), d[0], w.double())
    elif spec.kind == "gated_rmsnorm":
        want = dense.gated_rmsnorm(ctx, ops.GatedNormAttrs(spec.eps, spec.group), flat,
                                   d[1].reshape(rows, -1), w.double())
    else:
        want = dense.layernorm(ctx, ops.NormAttrs(spec.eps), d[0], w.double(), b.double())
    return Operands(x, w, out, gate, b), want


def _run(spec: NormSpec, rows: int, inner: tuple[int, ...], device: str, dtype: torch.dtype,
         seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    case, want = _case(spec, rows, inner, device, dtype, torch.Generator().manual_seed(seed))
    kernel = load(source("norm", spec, header="test"), "norm", device)
    launch(kernel, spec, x=case.x, w=case.w, out=case.out, rows=rows, gate=case.gate, b=case.b)
    assert case.out[rows:].isnan().all(), "slack rows written"
    return case.out[:rows].reshape(want.shape), want


def _run_pair(first: NormSpec, second: NormSpec, rows: int, device: str, dtype: torch.dtype,
              seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Both norms in one launch (spec.then): each one's rows against its reference."""
    gen, spec = torch.Generator().manual_seed(seed), dataclasses.replace(first, then=second)
    (a, want_a), (b, want_b) = (_case(s, rows, (s.width,), device, dtype, gen)
                                for s in (first, second))
    kernel = load(source("pair", spec, header="test"), "pair", device)
    launch(kernel, spec, x=a.x, w=a.w, out=a.out, rows=rows, gate=a.gate, b=a.b, then=b)
    assert a.out[rows:].isnan().all() and b.out[rows:].isnan().all(), "slack rows written"
    return [(a.out[:rows], want_a), (b.out[:rows], want_b)]


@pytest.mark.parametrize("kind,width,group,inner", [
    ("rmsnorm", 300, 300, (300,)), ("rmsnorm", 64, 64, (64,)),
    ("gated_rmsnorm", 96, 24, (96,)), ("gated_rmsnorm", 64, 16, (64,)),
    ("layernorm", 200, 200, (200,)), ("rmsnorm", 6 * 40, 40, (6, 40)),
])
@pytest.mark.parametrize("rows", [1, 5])
def test_norm(kind: str, width: int, group: int, inner: tuple[int, ...], rows: int) -> None:
    spec = NormSpec(kind, width, group, 1e-5)
    got, want = _run(spec, rows, inner, "cpu", torch.float32, seed=rows + width)
    assert_close(got, want, torch.float32, f"{kind} width {width} group {group}")


@pytest.mark.parametrize("first,second", [
    (NormSpec("rmsnorm", 48, 48, 1e-6), NormSpec("layernorm", 16, 16, 1e-5)),  # DSA's latent, key
    (NormSpec("rmsnorm", 40, 40, 1e-5), NormSpec("rmsnorm", 40, 40, 1e-5)),  # MTP's enorm, hnorm
    (NormSpec("gated_rmsnorm", 64, 16, 1e-6), NormSpec("rmsnorm", 300, 300, 1e-6)),
])
@pytest.mark.parametrize("rows", [1, 5])
def test_two_norms_in_one_launch(first: NormSpec, second: NormSpec, rows: int) -> None:
    for i, (got, want) in enumerate(_run_pair(first, second, rows, "cpu", torch.float32, rows)):
        assert_close(got, want, torch.float32, f"norm {i} of the pair")


def test_a_pair_needs_the_second_norm_s_operands() -> None:
    spec = NormSpec("rmsnorm", 32, 32, 1e-6, then=NormSpec("layernorm", 16, 16, 1e-6))
    x = torch.randn(3, 32)
    with pytest.raises(ValueError, match=r"a spec with a second norm needs its operands"):
        launch(None, spec, x=x, w=torch.randn(32), out=x.clone(), rows=3)
    y = torch.randn(3, 16)
    with pytest.raises(ValueError, match=r"norm layernorm: gate given False, bias given False"):
        launch(None, spec, x=x, w=torch.randn(32), out=x.clone(), rows=3,
               then=Operands(y, torch.randn(16), y.clone()))


def test_norm_refuses_what_it_cannot_read() -> None:
    spec = NormSpec("gated_rmsnorm", 64, 16, 1e-6)
    kernel = load(source("norm", spec), "norm", "cpu")
    x = torch.randn(3, 64)
    with pytest.raises(ValueError, match=r"norm gated_rmsnorm: gate given False"):
        launch(kernel, spec, x=x, w=torch.randn(16), out=x.clone(), rows=3)
    with pytest.raises(ValueError, match=r"norm w: contiguous \[16\], got \(64,\)"):
        launch(kernel, spec, x=x, w=torch.randn(64), out=x.clone(), rows=3, gate=x)
    with pytest.raises(ValueError, match=r"norm x: .*rows of 64 contiguous.*\(3, 32\)"):
        launch(kernel, spec, x=x[:, ::2], w=torch.randn(16), out=x.clone(), rows=3, gate=x)
    with pytest.raises(ValueError, match="multiple of group"):
        NormSpec("gated_rmsnorm", 60, 16, 1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("kind,width,group", [("rmsnorm", 4096, 4096),
                                              ("gated_rmsnorm", 64 * 128, 128),
                                              ("layernorm", 128, 128)])
def test_norm_gpu(kind: str, width: int, group: int) -> None:
    spec = NormSpec(kind, width, group, 1e-6)
    got, want = _run(spec, 300, (width,), "cuda", torch.bfloat16, seed=group)
    assert_rel(got, want.float(), 1e-2, f"{kind} bf16")


@pytest.mark.gpu
def test_two_norms_in_one_launch_gpu() -> None:
    """A DSA layer's latent rmsnorm (512) and indexer-key layernorm (128) in one launch."""
    pair = _run_pair(NormSpec("rmsnorm", 512, 512, 1e-6), NormSpec("layernorm", 128, 128, 1e-6),
                     16, "cuda", torch.bfloat16, seed=3)
    for i, (got, want) in enumerate(pair):
        assert_rel(got, want.float(), 1e-2, f"norm {i} of the pair, bf16")
