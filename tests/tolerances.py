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

# Real-width prompts checked row by row (GLM-5.3-Flash's 4 layers, 4501 rows) hold rounding's
# bulk and its tail, of which TAIL_ROWS of the rows may pass REL (at full-size experts the median
# row sits at 0.37 REL in fp32 and 0.44 REL in bf16, and the tail past REL grows with it: 12 and
# 33 rows on the H100, against 3 and 2 with experts 50 times smaller), and discrete choices on
# rounding ties (a pool, an expert): the only rows allowed past TIE_FAR x REL, TIE_ROWS of them,
# none past TIE_REL. A comparison of fewer than 1 / TAIL_ROWS rows allows none past REL.
TAIL_ROWS = 1e-2
TIE_FAR = 2


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


def assert_rows(errs: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    """Each row's relative error under the real-width rule above (bulk, tail, ties)."""
    n, rel = len(errs), REL[dtype]
    worst, bad, median = float(errs.max()), int(errs.argmax()), float(errs.median())
    tail = (errs > rel).nonzero().flatten().tolist()
    far = (errs > TIE_FAR * rel).nonzero().flatten().tolist()
    q = torch.quantile(errs.double(), torch.tensor([0.9, 0.99, 0.999], dtype=torch.float64))
    print(f"{what}: {n} rows, median {median:.3g}, p90/p99/p99.9 "
          f"{' '.join(f'{v:.3g}' for v in q.tolist())}, worst row {bad} {worst:.3g}; "
          f"over {rel:g}: {len(tail)} {tail[:16]}; over {TIE_FAR * rel:g}: {len(far)} {far[:16]}")
    assert worst <= TIE_REL[dtype], f"{what}, row {bad}: {worst:.3g} > {TIE_REL[dtype]:g}"
    assert len(tail) <= TAIL_ROWS * n, f"{what}: {len(tail)} of {n} rows over {rel:g}"
    assert len(far) <= TIE_ROWS * n, f"{what}: {len(far)} of {n} rows over {TIE_FAR * rel:g}"
