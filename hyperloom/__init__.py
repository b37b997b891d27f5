"""hyperloom: a compiler for LLM decoder layers.

Model specs (hyperloom.models) declare decoder stacks in a small IR (hyperloom.ir); the reference
interpreter defines what every op means; passes, codegen and the runtime compile the IR to
Triton kernels replayed as CUDA graphs.
"""

from hyperloom.api import build, engine, from_pretrained, load
from hyperloom.errors import (
    CapacityError, CheckpointError, HyperloomError, InputError, IRError, SpecError,
)

__all__ = [
    "build", "engine", "from_pretrained", "load", "CapacityError", "CheckpointError",
    "HyperloomError", "InputError", "IRError", "SpecError",
]
