"""tma.py's weight tiles through 2-D descriptors (BK = R, column blocks tiling N)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the sibling variant modules
from tma import variant

globals().update(variant(flat=True))
