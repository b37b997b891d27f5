"""Every error hyperloom raises on bad input, by area. Each message names the offending thing."""

from collections.abc import Callable


class HyperloomError(Exception):
    """Base class: the CLI prints these as one line, without a traceback."""


class IRError(HyperloomError):
    """A malformed graph, op or IR text (the message quotes the IR around the failing node)."""


class SpecError(HyperloomError):
    """A model config that cannot be built (names the config field)."""


class CheckpointError(HyperloomError):
    """A checkpoint that does not match the spec (names the tensor and both shapes)."""


class CapacityError(HyperloomError):
    """A step that would pass a sequence's capacity (names the length and the capacity)."""


class InputError(HyperloomError):
    """Bad runtime input: token ids out of range, a freed sequence, and the like."""


class CodegenError(HyperloomError):
    """A kernel-plan entry that no emitter can generate (names the emitters that exist)."""


def require(ok: bool, message: str | Callable[[], str]) -> None:
    """A kernel launch's contract on its operands: ValueError(message) unless ok (an assert
    would vanish under `python -O` and let an out-of-bounds launch through). A callable message
    is formatted only on failure: launches of eager steps check on every call."""
    if not ok:
        raise ValueError(message() if callable(message) else message)


def require_shape(what: str, t, shape: tuple[int, ...], rows: int | None = None) -> None:
    """`t` is [>= rows, *shape] (rows None: exactly shape) with a contiguous last dim."""
    got = tuple(t.shape) if rows is None else tuple(t.shape[1:])
    if got == tuple(shape) and (rows is None or t.shape[0] >= rows) and t.stride(-1) == 1:
        return
    dims = ", ".join(([] if rows is None else [f">= {rows}"]) + [str(d) for d in shape])
    raise ValueError(f"{what}: [{dims}] with a contiguous last dim, got {tuple(t.shape)} with "
                     f"strides {t.stride()}")
