# 16 heads a program (32 at GLM-5.3's 64 heads): twice the programs, half the accumulator each.
# (A CPU run's 4 heads already take 16: the patch leaves them, and the added programs see none.)
from variant import make

from hyperloom.codegen.emitters import mla

globals().update(make(host=mla, text=[lambda src, name: src.replace("BH: tl.constexpr = 32",
                                                                    "BH: tl.constexpr = 16")],
                      grids={1: lambda g: (g[0], g[1] * 2, g[2])}))
