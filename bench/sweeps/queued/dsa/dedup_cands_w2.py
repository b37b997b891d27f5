"""hist_dedup.py's score kernel and cands at 2 warps."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the sibling variant modules
import hist_dedup
from cands_warps import variant

globals().update(variant(2, hist_dedup.TEXT))
