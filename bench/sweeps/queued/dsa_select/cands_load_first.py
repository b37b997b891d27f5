"""The DSA select's `cands` with its segment's score load ahead of the histogram's scan (half
of loads_first.py)."""

from pathlib import Path

import common
from variant import make

from hyperloom.codegen.emitters import dsa

_first = common.load_variant(str(Path(__file__).with_name("loads_first.py")), "loads_first", dsa)
globals().update(make(text=[_first.cands_first], host=dsa))
