# The split form alone (every row through the index, as before the dense form): the baseline
# the dense form must beat.
from variant import make

from hyperloom.codegen.emitters import mla

globals().update(make(host=mla, launch_kw={"seq_rows": None}))  # no run known: no dense form
