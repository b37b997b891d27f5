"""The test suite's own setup: it must collect with and without pytest-xdist."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_suite_collects_without_xdist():
    """conftest's xdist hook is optional: `-p no:xdist` (or no xdist installed) still collects."""
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-o", "addopts=",
                          "--collect-only", "-q", "tests/ir/test_text.py"],
                         check=False, cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "tests collected" in run.stdout, run.stdout[-2000:]
