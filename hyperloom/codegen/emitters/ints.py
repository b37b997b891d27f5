"""Host integer arithmetic for grids and block sizes. Plain Python: Triton's own `cdiv` and
`next_power_of_2` are constexpr-function objects whose call costs about 3 us on the host, and a
step of Python launches (prefill, the bench's site) makes about six of them a kernel."""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of 2 >= n (1 for n == 1, 0 for n == 0, as Triton's)."""
    return 1 << (n - 1).bit_length() if n > 0 else 0
