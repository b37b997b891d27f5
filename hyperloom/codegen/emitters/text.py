"""Source-text pieces every emitter's generated module shares."""

from __future__ import annotations

from hyperloom.config import CONFIG

# Programmatic dependent launch: a kernel whose body calls gdc_wait() before it touches memory
# is launched with the attribute (`cache.load`), so its grid starts as its predecessor's
# programs exit rather than after the whole grid drained. On the H200 (llama bench decode) this
# form gained 0.6%; an explicit early trigger (gdc_launch_dependents) and GEMV weight
# prefetches into L2 while waiting both lost 10 to 18%, and a trigger after each kernel's main
# loop lost 2.4% on the H100 (BENCHMARKS, sixteenth session).
PDL_WAIT = "tl.extra.cuda.gdc_wait()"


def pdl(indent: str) -> str:
    """The line that opens a kernel body: wait for the predecessor grid's writes. Empty under
    the interpreter (no PTX) or with CONFIG.pdl off."""
    if CONFIG.interpret or not CONFIG.pdl:
        return ""
    return f"{indent}{PDL_WAIT}  # the previous grid's writes are visible\n"


def pdl_if(indent: str, cond: str) -> str:
    """The wait under a constexpr condition (a kernel that places it by a launch option)."""
    wait = pdl(indent + "    ")
    return f"{indent}if {cond}:\n{wait}" if wait else ""


def comment(header: str) -> str:
    """The kernel header as leading comment lines (the cache strips them: `cache.canonical`)."""
    return "".join(f"# {line}\n" for line in header.splitlines())


def indent_block(text: str, by: int) -> str:
    """Source text `by` spaces deeper (blank lines stay empty)."""
    return "".join(" " * by + line if line.strip() else line
                   for line in text.splitlines(keepends=True))


def indented(lines: list[str]) -> list[str]:
    """Source lines one level (four spaces) deeper."""
    return ["    " + line for line in lines]


def wrap(head: str, items: list[str], tail: str, indent: int) -> str:
    """head + items joined by ", " + tail, broken between items into lines of <= 100 columns
    (continuation lines start with `indent` spaces)."""
    lines, line = [], head
    for i, item in enumerate(items):
        piece = item + (", " if i + 1 < len(items) else tail)
        if len(line) + len(piece.rstrip()) > 100:
            lines.append(line.rstrip())
            line = " " * indent
        line += piece
    return "\n".join(lines + [line])


# The end of a run of rows (`emitters.kda`, `emitters.kda_conv`): a step's rows of one sequence
# are contiguous (`ir.state.segments`), so a run ends at the first row from `at` whose slot
# differs; found 32 slots a load (a run of the recurrent form is shorter: one load), not a load
# a row. _run_stop: the run that starts at row r, which the program of that row does whole.
RUN_END = '''
@triton.jit
def _run_end(slot_ptr, at, s, rows):
    """The first row from `at` whose slot is not s (rows if none is)."""
    stop = -1
    while stop < 0:
        rr = at + tl.arange(0, 32)
        other = tl.load(slot_ptr + rr, mask=rr < rows, other=-1) != s
        first = tl.min(tl.where(other | (rr >= rows), rr, 1 << 30), axis=0)
        stop = tl.where(first < (1 << 30), first, -1)
        at += 32
    return stop
'''
RUN_STOP = RUN_END + '''

@triton.jit
def _run_stop(slot_ptr, r, rows):
    """One past the last row of the run that starts at row r; r when row r is padding (slot < 0)
    or not the first row of its run, so its program has nothing to do."""
    s = tl.load(slot_ptr + r)
    prev = tl.load(slot_ptr + r - 1, mask=r > 0, other=-1)
    stop = r
    if (s >= 0) & (prev != s):
        stop = _run_end(slot_ptr, r + 1, s, rows)
    return stop
'''
