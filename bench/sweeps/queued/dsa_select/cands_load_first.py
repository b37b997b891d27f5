"""The DSA select's `cands` with its segment's score load ahead of the histogram's scan (half
of loads_first.py)."""

import importlib.util
from pathlib import Path

from variant import make

from hyperloom.codegen.emitters import dsa

_spec = importlib.util.spec_from_file_location("dsa_select_loads_first",
                                               Path(__file__).with_name("loads_first.py"))
_first = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_first)
globals().update(make(text=[_first.cands_first], host=dsa))
