"""The DSA indexer with each row's histogram in 8 copies (`dsa_copies`)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dsa_copies import make  # noqa: E402

globals().update(make(8))
