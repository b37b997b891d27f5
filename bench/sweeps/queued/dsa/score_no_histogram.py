"""Diagnostic, WRONG selection past 2048 pools (run with --no-check): the score kernel without
its histogram atomics (one per score, into the row's 4096 bins), so "score" shows what they
cost."""

from variant import make

from hyperloom.codegen.emitters import dsa

COUNT = "        if counted:\n            _count(hist_ptr + r * NB, sc, jm, NB)\n"
globals().update(make(text=[(COUNT, "")], host=dsa))
