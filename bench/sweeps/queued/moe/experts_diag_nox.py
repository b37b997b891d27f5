"""Diagnostic, WRONG output: each tile loads its first x / h block once and reuses it for every
K step, so the time shows what the rows' re-reads from L2 cost (the weights still stream)."""

from variant import make

from hyperloom.codegen.emitters import moe_experts

LOOP = "    for k0 in range(0, KD, BK):\n"
A = "        a = tl.load(a_rows + kk[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)\n"
ONCE = "    a = tl.load(a_rows + rk[None, :], mask=m_ok[:, None], other=0.0)\n"


def hoist(src: str, name: str) -> str:
    assert A in src and LOOP in src
    return src.replace(A, "").replace(LOOP, ONCE + LOOP)


globals().update(make(text=[hoist], host=moe_experts))
