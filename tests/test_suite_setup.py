"""The test suite's own setup: it must collect with and without pytest-xdist."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.tolerances import assert_rows

ROOT = Path(__file__).resolve().parents[1]


def test_suite_collects_without_xdist():
    """conftest's xdist hook is optional: `-p no:xdist` (or no xdist installed) still collects."""
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-o", "addopts=",
                          "--collect-only", "-q", "tests/ir/test_text.py"],
                         check=False, cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "tests collected" in run.stdout, run.stdout[-2000:]


def _errs(n_tail: int, n_far: int, worst: float = 0.03) -> torch.Tensor:
    """4501 bf16 rows' errors: a bulk under REL, n_tail rows just past it, n_far past 2 REL."""
    errs = torch.rand(4501, generator=torch.Generator().manual_seed(3)) * 0.015
    errs[:n_tail] = 0.025
    errs[n_tail:n_tail + n_far] = worst
    return errs[torch.randperm(4501, generator=torch.Generator().manual_seed(4))]


def test_real_width_row_rule_passes_a_tail_and_few_ties_and_fails_more():
    """tests.tolerances.assert_rows: 45 rows past REL, 9 of them past 2 REL, pass; one more of
    either, or one row past TIE_REL, fails, naming the count or the row."""
    assert_rows(_errs(36, 9, 0.045), torch.bfloat16, "ok")
    for errs, msg in ((_errs(37, 9), "46 of 4501 rows over 0.02"),
                      (_errs(0, 10, 0.045), "10 of 4501 rows over 0.04"),
                      (_errs(0, 1, 0.051), "0.051 > 0.05")):
        with pytest.raises(AssertionError, match=msg):
            assert_rows(errs, torch.bfloat16, "bad")
    with pytest.raises(AssertionError, match="1 of 1 rows over 1e-05"):
        assert_rows(torch.tensor([1.1e-5]), torch.float32, "one fp32 row")
