import pytest

from hyperloom.config import overrides


@pytest.fixture(autouse=True, scope="module")
def _kernel_cache(tmp_path_factory):
    """Each test module compiles into a kernel cache of its own (no stale sources)."""
    with overrides(kernel_cache_dir=str(tmp_path_factory.mktemp("kernels"))):
        yield
