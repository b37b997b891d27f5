# The attention's loop pipelined 2 deep (Triton's default 3).
from variant import make

from hyperloom.codegen.emitters import mla

globals().update(make(host=mla, opts={1: {"num_stages": 2}}))
