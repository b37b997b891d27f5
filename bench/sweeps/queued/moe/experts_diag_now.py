"""Diagnostic, WRONG output: each tile loads its first weight block once and reuses it for every
K step, so the time shows what streaming the weights costs (the x / h rows still stream)."""

import re

from variant import make

from hyperloom.codegen.emitters import moe_experts

LOOP = "    for k0 in range(0, KD, BK):\n"
LOAD = re.compile(r"        (b\d) = tl.load\((\w+) \+ w_off \+ k0 \* N, mask=b_ok, other=0.0\)\n")


def hoist(src: str, name: str) -> str:
    parts = src.split("@triton.jit")
    for i, part in enumerate(parts):
        for m in LOAD.finditer(parts[i]):
            b, w = m.groups()
            part = part.replace(m.group(0), "").replace(
                LOOP, f"    {b} = tl.load({w} + w_off, mask=n_ok[None, :], other=0.0)\n" + LOOP)
        parts[i] = part
    return "@triton.jit".join(parts)


globals().update(make(text=[hoist], host=moe_experts))
