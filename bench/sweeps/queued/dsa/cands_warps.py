"""The segmented select's cands programs at CANDS_WARPS warps (committed: 4): the row's last
program finds the K-th key bit by bit, 20 dependent sums over the candidates' keys; in fewer
warps each sum needs fewer crossings through shared memory. Set by the file name's digit:
cands_w1.py, cands_w2.py import this module."""
from variant import make

from hyperloom.codegen.emitters import dsa


def variant(warps: int, text=()) -> dict:
    return make(text=list(text), opts={4: {"num_warps": warps}}, host=dsa)
