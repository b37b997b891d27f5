import os

import pytest
import torch

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
if not torch.cuda.is_available():
    # Triton kernels run through its CPU interpreter (fp32 only: it mis-computes bf16 dots)
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_configure(config):
    # tiny tensors on 2 cores: OpenMP fork/join costs far more than the math
    torch.set_num_threads(1)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: pytest -p no:xdist must still run
def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject): a worker a core on CPU, where each test runs one thread; none on
    a CUDA machine, whose tests share one card."""
    return 0 if torch.cuda.is_available() else None


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (runs on the H200)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
