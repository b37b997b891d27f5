"""The elementwise emitter against the reference semantics (fp64): add (mixed operand dtypes,
rows of several dims, widths that pad their block, strided rows), concat, cast and
hc_head_mean (odd stream counts, strided rows and streams); rows past `rows` untouched, bad
operands named. CPU: Triton's interpreter in fp32; GPU (`gpu` mark): bf16."""

from __future__ import annotations

import pytest
import torch

from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters.elementwise import ElementwiseSpec, launch, source
from hyperloom.ir import ops
from hyperloom.ir.semantics import Ctx, dense, hc
from tests.tolerances import assert_close, assert_rel

SLACK = 3  # buffer rows past `rows`, poisoned with NaN
CTX = Ctx(torch.float64, None, ())


def _rand(gen: torch.Generator, *shape: int, device: str, dtype: torch.dtype) -> torch.Tensor:
    return (torch.randn(shape, generator=gen) * 2.0 + 0.25).to(device=device, dtype=dtype)


def _strided(t: torch.Tensor, pad: int) -> torch.Tensor:
    """t's values in a buffer whose rows are `pad` elements wider (a column view of it)."""
    wide = torch.full((t.shape[0], t.shape[1] + pad, *t.shape[2:]), float("nan"),
                      dtype=t.dtype, device=t.device)
    wide[:, pad // 2: pad // 2 + t.shape[1]] = t
    return wide[:, pad // 2: pad // 2 + t.shape[1]]


def _add(rows: int, inner: tuple[int, ...], device: str, dtypes: tuple, pad: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    spec = ElementwiseSpec("add", int(torch.Size(inner).numel()))
    a, b = (_rand(gen, rows + SLACK, *inner, device=device, dtype=d) for d in dtypes[:2])
    if pad:
        a, b = _strided(a, pad), _strided(b, pad + 1)
    out = torch.full((rows + SLACK, *inner), float("nan"), device=device, dtype=dtypes[2])
    if pad:
        out = _strided(out, pad + 2)
    launch(load(source("add", spec, header="test"), "add", device), spec, a=a, b=b, out=out,
           rows=rows)
    assert out[rows:].isnan().all(), "rows past `rows` written"
    want = dense.add(CTX, ops.NoAttrs(), a[:rows].double(), b[:rows].double())
    return out[:rows], want


def _concat(rows: int, wa: int, wb: int, device: str, dtypes: tuple, pad: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    spec = ElementwiseSpec("concat", wa + wb, split=wa)
    a = _strided(_rand(gen, rows + SLACK, wa, device=device, dtype=dtypes[0]), pad)
    b = _strided(_rand(gen, rows + SLACK, wb, device=device, dtype=dtypes[1]), 2 * pad)
    out = _strided(torch.full((rows + SLACK, wa + wb), float("nan"), device=device,
                              dtype=dtypes[2]), pad + 1)
    launch(load(source("cat", spec, header="test"), "cat", device), spec, a=a, b=b, out=out,
           rows=rows)
    assert out[rows:].isnan().all(), "rows past `rows` written"
    return out[:rows], dense.concat(CTX, ops.NoAttrs(), a[:rows].double(), b[:rows].double())


def _cast(rows: int, inner: tuple[int, ...], device: str, dtypes: tuple, seed: int):
    gen = torch.Generator().manual_seed(seed)
    spec = ElementwiseSpec("cast", int(torch.Size(inner).numel()))
    x = _rand(gen, rows + SLACK, *inner, device=device, dtype=dtypes[0])
    out = torch.full((rows + SLACK, *inner), float("nan"), device=device, dtype=dtypes[1])
    launch(load(source("cast", spec, header="test"), "cast", device), spec, x=x, out=out,
           rows=rows)
    assert out[rows:].isnan().all(), "rows past `rows` written"
    return out[:rows], dense.cast(CTX, ops.CastAttrs(str(dtypes[1])), x[:rows].double())


def _head_mean(rows: int, n: int, d: int, device: str, dtype: torch.dtype, pad: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    spec = ElementwiseSpec("head_mean", d, n)
    x = _rand(gen, rows + SLACK, n + pad, d + 2 * pad, device=device, dtype=dtype)
    x = x[:, pad:, pad: pad + d]  # strided rows and streams when pad > 0
    x[rows:] = float("nan")
    out = torch.full((rows + SLACK, d + pad), float("nan"), device=device, dtype=dtype)[:, :d]
    launch(load(source("mean", spec, header="test"), "mean", device), spec, x=x, out=out,
           rows=rows)
    assert out[rows:].isnan().all(), "rows past `rows` written"
    return out[:rows], hc.hc_head_mean(CTX, ops.NoAttrs(), x[:rows].double())


F32 = torch.float32


@pytest.mark.parametrize("inner,pad", [((64,), 0), ((300,), 5), ((1,), 0), ((3, 37), 0),
                                       ((2500,), 3)])
@pytest.mark.parametrize("rows", [1, 7])
def test_add(inner: tuple[int, ...], pad: int, rows: int) -> None:
    got, want = _add(rows, inner, "cpu", (F32, F32, F32), pad, seed=rows + inner[-1])
    assert_close(got, want, F32, f"add {inner} pad {pad}")


def test_add_mixed_dtypes_cast_at_the_store() -> None:
    """fp64 and fp32 operands into an fp32 buffer: math in fp32, one rounding at the store."""
    got, want = _add(5, (40,), "cpu", (torch.float64, F32, F32), 0, seed=3)
    assert got.dtype == F32
    assert_close(got, want, F32, "add f64 + f32 -> f32")


def test_add_in_place() -> None:
    """out may be one of the operands (a residual stream updated where it lies)."""
    gen = torch.Generator().manual_seed(9)
    spec = ElementwiseSpec("add", 70)
    a, b = _rand(gen, 6, 70, device="cpu", dtype=F32), _rand(gen, 6, 70, device="cpu", dtype=F32)
    want = a[:4].double() + b[:4].double()
    keep = a[4:].clone()
    launch(load(source("add", spec), "add", "cpu"), spec, a=a, b=b, out=a, rows=4)
    assert_close(a[:4], want, F32, "in place")
    assert torch.equal(a[4:], keep)


@pytest.mark.parametrize("wa,wb,pad", [(64, 64, 0), (5, 300, 3), (1030, 7, 1)])
@pytest.mark.parametrize("rows", [1, 4])
def test_concat(wa: int, wb: int, pad: int, rows: int) -> None:
    got, want = _concat(rows, wa, wb, "cpu", (F32, torch.float64, F32), pad, seed=wa + rows)
    assert_close(got, want, F32, f"concat {wa} | {wb} pad {pad}")


@pytest.mark.parametrize("inner,dtypes", [((64,), (torch.float64, F32)), ((3, 37), (F32, F32)),
                                          ((1100,), (F32, torch.float64))])
def test_cast(inner: tuple[int, ...], dtypes: tuple) -> None:
    got, want = _cast(5, inner, "cpu", dtypes, seed=inner[-1])
    assert got.dtype == dtypes[1]
    assert_close(got, want, F32, f"cast {dtypes} {inner}")


@pytest.mark.parametrize("n,d,pad", [(4, 64, 0), (3, 100, 2), (1, 17, 0), (5, 1030, 1)])
@pytest.mark.parametrize("rows", [1, 6])
def test_head_mean(n: int, d: int, pad: int, rows: int) -> None:
    got, want = _head_mean(rows, n, d, "cpu", F32, pad, seed=n * d + rows)
    assert_close(got, want, F32, f"head_mean n {n} d {d} pad {pad}")


def test_zero_rows_launch_nothing() -> None:
    got, _ = _add(0, (16,), "cpu", (F32, F32, F32), 0, seed=1)
    assert got.numel() == 0
    got, _ = _head_mean(0, 4, 16, "cpu", F32, 0, seed=1)
    assert got.numel() == 0


def test_elementwise_refuses_what_it_cannot_read() -> None:
    add = ElementwiseSpec("add", 64)
    kernel = load(source("add", add), "add", "cpu")
    x = torch.randn(3, 64)
    with pytest.raises(ValueError, match="add and concat take a and b"):
        launch(kernel, add, x=x, out=x.clone(), rows=3)
    with pytest.raises(ValueError, match=r"elementwise b: \[>= 3, 64\] .*\(3, 32\)"):
        launch(kernel, add, a=x, b=torch.randn(3, 32, 2)[..., 0], out=x.clone(), rows=3)
    with pytest.raises(ValueError, match=r"elementwise out: \[>= 4, 64\]"):
        launch(kernel, add, a=torch.randn(4, 64), b=torch.randn(4, 64), out=x, rows=4)
    mean = ElementwiseSpec("head_mean", 64, 4)
    kernel = load(source("mean", mean), "mean", "cpu")
    with pytest.raises(ValueError, match=r"head_mean x: \[>= 3, 4, 64\] with a contiguous"):
        launch(kernel, mean, x=torch.randn(3, 64, 4).transpose(1, 2), out=x, rows=3)
    with pytest.raises(ValueError, match=r"cast and head_mean take x"):
        launch(kernel, mean, a=x, b=x, out=x, rows=3)
    with pytest.raises(ValueError, match=r"streams 2 \(1 but for head_mean\)"):
        ElementwiseSpec("add", 64, 2)
    with pytest.raises(ValueError, match=r"split 64 \(inside the row for concat"):
        ElementwiseSpec("concat", 64, split=64)
    cat = ElementwiseSpec("concat", 64, split=16)
    kernel = load(source("cat", cat), "cat", "cpu")
    with pytest.raises(ValueError, match=r"elementwise b: \[>= 3, 48\] .*\(3, 32\)"):
        launch(kernel, cat, a=x[:, :16], b=x[:, :32], out=x, rows=3)


@pytest.mark.gpu
@pytest.mark.parametrize("inner,pad", [((4096,), 0), ((6144,), 8), ((3, 37), 0)])
def test_add_gpu(inner: tuple[int, ...], pad: int) -> None:
    bf16 = torch.bfloat16
    got, want = _add(300, inner, "cuda", (bf16, bf16, bf16), pad, seed=inner[-1])
    assert_rel(got, want.float(), 1e-2, f"add bf16 {inner}")
    got, want = _add(257, inner, "cuda", (bf16, F32, F32), pad, seed=inner[-1])
    assert_close(got, want, bf16, f"add bf16 + f32 -> f32 {inner}")


@pytest.mark.gpu
def test_concat_and_cast_gpu() -> None:
    bf16 = torch.bfloat16
    got, want = _concat(300, 6144, 6144, "cuda", (bf16, bf16, bf16), 2, seed=1)
    assert torch.equal(got.double(), want), "concat moves bf16 values exactly"
    got, want = _cast(300, (6144,), "cuda", (bf16, F32), seed=2)
    assert torch.equal(got.double(), want), "bf16 -> f32 is exact"
    got, want = _cast(300, (6144,), "cuda", (F32, bf16), seed=3)
    assert torch.equal(got, want.float().to(bf16)), "f32 -> bf16 rounds to nearest even"


@pytest.mark.gpu
@pytest.mark.parametrize("n,d,pad", [(4, 6144, 0), (4, 4096, 1), (3, 100, 2)])
def test_head_mean_gpu(n: int, d: int, pad: int) -> None:
    got, want = _head_mean(300, n, d, "cuda", torch.bfloat16, pad, seed=d)
    assert_rel(got, want.float(), 1e-2, f"head_mean bf16 n {n} d {d}")
    got, want = _head_mean(77, n, d, "cuda", F32, pad, seed=d + 1)
    assert_close(got, want, F32, f"head_mean f32 n {n} d {d}")
