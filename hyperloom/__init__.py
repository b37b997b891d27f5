"""hyperloom: a compiler for LLM decoder layers.

Model specs (hyperloom.models) declare decoder stacks in a small IR (hyperloom.ir); the reference
interpreter defines what every op means; passes, codegen and the runtime compile the IR to
Triton kernels replayed as CUDA graphs.
"""

import hyperloom.config  # noqa: F401  (first: it picks Triton's interpreter when there is no GPU)
from hyperloom.api import build, compile, engine, from_pretrained, load
from hyperloom.ir.sampling import Sampling
from hyperloom.errors import (
    CapacityError, CheckpointError, HyperloomError, InputError, IRError, SpecError,
)

__all__ = [
    "Sampling", "build", "compile", "engine", "from_pretrained", "load", "CapacityError",
    "CheckpointError", "HyperloomError", "InputError", "IRError", "SpecError",
]
