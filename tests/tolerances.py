"""The one per-dtype tolerance table: max |delta| of fp32 logits against the reference."""

import torch

ATOL = {
    torch.float64: 1e-9,
    torch.float32: 1e-4,
    torch.bfloat16: 5e-2,  # GPU tests only: the interpreter mis-computes bf16 dots on CPU
}

# relative error ||got - want|| / ||want|| of whole-model logits (bf16 kernels vs fp32 reference)
REL = {torch.bfloat16: 2e-2, torch.float32: 1e-5,
       torch.float16: 1e-3}  # fp32 math over fp16-stored intermediates (unit roundoff 4.9e-4)

# real-width models' discrete choices on rounding ties: the bench's rule (TIE_ROWS, TIE_REL)
from hyperloom.bench.scenarios import TIE_REL, TIE_ROWS  # noqa: E402,F401


def assert_close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, what: str = "") -> None:
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    assert torch.isfinite(got).all(), f"{what}: non-finite values"
    delta = (got.double() - want.double()).abs().max().item()
    assert delta <= ATOL[dtype], f"{what}: max |delta| {delta:.3g} > {ATOL[dtype]:.1g} ({dtype})"


def assert_rel(got: torch.Tensor, want: torch.Tensor, tol: float, what: str = "") -> None:
    """Relative error ||got - want|| / ||want|| <= tol (bf16 kernels on the GPU: tol 1e-2)."""
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    assert torch.isfinite(got).all(), f"{what}: non-finite values"
    err = ((got.double() - want.double()).norm() / want.double().norm()).item()
    assert err <= tol, f"{what}: relative error {err:.3g} > {tol:.1g}"
