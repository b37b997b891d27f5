# The dense scores as (latents x q^T)^T: the latent tile is the first operand of both products,
# so it is not transposed in registers each iteration (ptxas for sm_90: 239 registers against
# 252, no spills). The split form keeps its tile helper.
import re

from variant import make

from hyperloom.codegen.emitters import mla

HELPER = re.compile(r"\n@triton\.jit\ndef _attend_tile\(.*?\n    return m_new, l_i, acc\n", re.S)
SCORES = re.compile(r"tl\.dot\(q(\S*), tl\.trans\(lat(\S*)\)\)")


def transposed(source: str, name: str) -> str:
    tile = HELPER.search(source).group(0)
    up = SCORES.search(tile).group(1)  # the CPU interpreter's upcast, if any
    tile_t = SCORES.sub(rf"tl.trans(tl.dot(lat{up}, qt))", tile).replace(
        "def _attend_tile(q,", "def _attend_tile_t(qt,")
    source = source.replace(tile, tile + tile_t)
    dense = source.index(f"def {name}_dense(")
    head, body = source[:dense], source[dense:]
    body = body.replace("    n = tl.arange(0, BN)\n    while",
                        f"    qt = tl.trans(q{up})\n    n = tl.arange(0, BN)\n    while")
    return head + body.replace("_attend_tile(q, lat,", "_attend_tile_t(qt, lat,")


globals().update(make(host=mla, text=[transposed]))
