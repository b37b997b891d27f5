"""The host's cdiv and next_power_of_2 (`codegen.emitters.ints`) against Triton's own, which
they replace at launch time."""

from __future__ import annotations

import triton

from hyperloom.codegen.emitters.ints import cdiv, next_power_of_2


def test_ints_match_triton() -> None:
    for n in list(range(0, 2100)) + [2 ** 31 - 1, 2 ** 31, 2 ** 31 + 1, 3 * 2 ** 40]:
        assert next_power_of_2(n) == triton.next_power_of_2(n), n
        for b in (1, 2, 3, 16, 64, 100, 128, 1024):
            assert cdiv(n, b) == triton.cdiv(n, b), (n, b)
