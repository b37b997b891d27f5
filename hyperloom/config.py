"""Every knob of hyperloom in one place: name, default, help. Nothing else reads os.environ.
Tests override knobs with `overrides(...)`."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


@dataclass
class Config:
    max_seq_len: int = field(default=4096,
                             metadata={"help": "per-sequence cache capacity (tokens)"})
    max_sequences: int = field(default=8, metadata={"help": "sequence slots in the state pools"})
    prefill_chunk: int = field(default=256, metadata={"help": "rows per prefill step (arena rows)"})
    kv_block_size: int = field(default=64, metadata={"help": "tokens per KV-cache block, a power "
                                                     "of two >= 16 (0: one contiguous cache per "
                                                     "slot; 64 decodes as fast: BENCHMARKS)"})
    kv_blocks: int = field(default=0, metadata={"help": "KV-cache blocks in the pool (0: enough "
                                                "for every slot at full length)"})
    pdl: bool = field(default=True, metadata={"help": "kernels wait on their predecessor grid "
                                               "(griddepcontrol) and launch as its programs "
                                               "exit (programmatic dependent launch, sm_90+)"})
    fold_sites: bool = field(default=True, metadata={
        "help": "a one-row decode step finishes each mHC site's hc_pre in the last program of "
                "the GEMM whose hc_post epilogue wrote its streams (one launch a site fewer: "
                "decode 0.596 -> 0.580 ms on the H200, BENCHMARKS)"})
    form_sites: bool = field(default=True, metadata={
        "help": "with fold_sites, a folded site whose y is read only by the GEMV right after "
                "it: that GEMV forms y at one row by linearity from the new streams (their "
                "parts as its A rows, y's norm from their Gram, the gates from the partials), "
                "and one more of its programs writes the site's post and comb; the GEMM "
                "before writes partials only, with no finish"})
    embed_site: bool = field(default=True, metadata={
        "help": "with form_sites, a one-row step's embedding launch also writes the first mHC "
                "site's partials and stream parts (the site launches nothing there)"})
    head_mean: bool = field(default=True, metadata={
        "help": "a step whose hc_post epilogue runs in its GEMM (at most 64 rows) has the last "
                "layer's GEMM store the new streams' mean too; up to 16 rows the LM head norms "
                "that mean in its own K loop: no stream-mean norm kernel (one launch fewer at "
                "decode)"})
    site_lo_parts: bool = field(default=True, metadata={
        "help": "a formed site's GEMV takes each stream's lo part (what rounding it to the "
                "weights' dtype left) as A rows beside its hi part: y to about 2^-16; off: "
                "the hi parts alone (each stream rounded, as the stored y was), half the rows"})
    conv_gate: bool = field(default=True, metadata={
        "help": "a step of at most 16 rows runs each KDA layer's f_b GEMM and decay gate as "
                "more programs of its conv's launch (both read only the front projections' "
                "outputs): one launch a KDA layer fewer at decode"})
    kda_norm_rows: int = field(default=1, metadata={
        "help": "a step of at most this many rows (at most 31) runs each KDA layer's g_b GEMM "
                "and gated output norm in its recurrence's launch (a ticket a (row, head): "
                "the head's last program writes the norm), one launch a KDA layer fewer; 0: "
                "never (H200, GLM-5.3-Flash's KDA layer: one row 7.2 us against 4.5 + 3.5 "
                "apart; 16 rows 46.0 against 35.9 + 4.0)"})
    eager_replay: bool = field(default=True, metadata={
        "help": "a GPU step of Python launches (prefill) replays its shape's first step's "
                "compiled kernels on the same arguments, past Triton's argument binding (H200: "
                "a 2048-token prefill issued in 0.74-0.80 ms, not 2.6-3.0; BENCHMARKS)"})
    sms: int = field(default=132, metadata={
        "help": "multiprocessors the launch tilings plan their waves for (H100 and H200 SXM: "
                "132): GEMV tiles, split-KV and MLA decode splits, hc_pre's K splits"})
    compile_threads: int = field(default_factory=lambda: min(16, os.cpu_count() or 1), metadata={
        "help": "threads that compile a program's kernels ahead of its first step (Triton "
                "releases the GIL while it compiles; 0: each kernel at its first launch)"})
    dump_dir: str = field(default_factory=lambda: _env("HYPERLOOM_DUMP_DIR", ""),
                          metadata={"help": "write IR / plan / kernel dumps of every compile here"})
    kernel_cache_dir: str = field(
        default_factory=lambda: _env("HYPERLOOM_KERNEL_CACHE",
                                     os.path.expanduser("~/.cache/hyperloom/kernels")),
        metadata={"help": "where generated Triton sources are written and imported from"})
    interpret: bool = field(default_factory=lambda: _env("TRITON_INTERPRET", "0") == "1",
                            metadata={"help": "Triton runs in its CPU interpreter (TRITON_INTERPRET"
                                      "=1, the default without CUDA); dot operands upcast to fp32"})
    bench_commit: str = field(default_factory=lambda: _env("HYPERLOOM_COMMIT", ""),
                              metadata={"help": "the commit a bench record names (a copy run "
                                        "on another machine); empty: ask git"})
    max_random_bytes: int = field(default=8 << 30,
                                  metadata={"help": "refuse larger seeded random weights"})


def _default_interpreter() -> None:
    """Without CUDA, Triton can only run its interpreter, and it must know before it is first
    imported: hyperloom imports this module before anything imports triton."""
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


_default_interpreter()
CONFIG = Config()


@contextmanager
def overrides(**knobs: object) -> Iterator[Config]:
    """Temporarily set knobs: `with overrides(max_seq_len=64): ...`."""
    old = dataclasses.asdict(CONFIG)
    unknown = set(knobs) - set(old)
    if unknown:
        raise KeyError(f"unknown knob(s) {sorted(unknown)}; knobs: {sorted(old)}")
    for k, v in knobs.items():
        setattr(CONFIG, k, v)
    try:
        yield CONFIG
    finally:
        for k, v in old.items():
            setattr(CONFIG, k, v)


def knobs(items: list[str]) -> dict[str, object]:
    """`KNOB=VALUE` strings (the command line's --set) as typed overrides; ValueError names a
    malformed item, an unknown knob or a value of the wrong type."""
    fields = {f.name: type(getattr(CONFIG, f.name)) for f in dataclasses.fields(CONFIG)}
    out: dict[str, object] = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or name not in fields:
            raise ValueError(f"--set {item!r}: want KNOB=VALUE with a knob of {sorted(fields)}")
        kind = fields[name]
        if kind is bool:
            if value.lower() not in ("0", "1", "true", "false"):
                raise ValueError(f"--set {item!r}: {name} takes true/false or 1/0")
            out[name] = value.lower() in ("1", "true")
            continue
        try:
            out[name] = kind(value)
        except ValueError:
            article = "an" if kind.__name__[0] in "aeiou" else "a"
            raise ValueError(f"--set {item!r}: {name} takes {article} {kind.__name__}") from None
    return out


def changed() -> dict[str, object]:
    """The knobs set away from their defaults (a bench record names them)."""
    default = Config()
    return {f.name: getattr(CONFIG, f.name) for f in dataclasses.fields(CONFIG)
            if getattr(CONFIG, f.name) != getattr(default, f.name)}


def describe() -> str:
    return "\n".join(f"{f.name} = {getattr(CONFIG, f.name)!r}  # {f.metadata.get('help', '')}"
                     for f in dataclasses.fields(CONFIG))
