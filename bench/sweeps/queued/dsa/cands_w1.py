"""cands at 1 warp(s) (cands_warps.py)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the sibling variant modules
from cands_warps import variant

globals().update(variant(1))
