"""Loops whose bound is a runtime value. Triton 3.6's interpreter cannot take a tensor as a
range() bound under numpy >= 2.4 (triton-lang/triton#9171): there the loop is a while; on the GPU
a (pipelined) for."""

from __future__ import annotations

from hyperloom.config import CONFIG


def runtime_loop(var: str, start: str, stop: str, step: str, indent: str) -> tuple[str, str]:
    """(head, tail) source lines of `for var in range(start, stop, step)` at `indent`; the body
    goes between them, one level deeper."""
    if CONFIG.interpret:
        return (f"{indent}{var} = {start}\n{indent}while {var} < {stop}:\n",
                f"{indent}    {var} += {step}\n")
    return f"{indent}for {var} in range({start}, {stop}, {step}):\n", ""
