"""Diagnostic, WRONG selection (run with --no-check): the score kernel without its score stores
(the histogram still counts them), so "score" shows what writing the scores costs."""

from variant import make

from hyperloom.codegen.emitters import dsa

STORE = "        tl.store(sc_ptr + r * ssc + j, sc, mask=jm)\n"
globals().update(make(text=[(STORE, "")], host=dsa))
