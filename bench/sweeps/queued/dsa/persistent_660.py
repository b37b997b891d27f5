"""persistent.py's score kernel over 660 programs."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the sibling variant modules
from persistent import variant

globals().update(variant(660))
