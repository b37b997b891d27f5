"""Step runner: pads a step to its row bucket and replays what was recorded for that bucket.
On CUDA a decode bucket is captured once into a CUDA graph (one memory pool, largest buckets
first) and replayed; elsewhere, or when an op still runs on the interpreter, the recorded
launch list is replayed as is, so the replay logic runs in CI too."""

from __future__ import annotations

from collections.abc import Callable

import torch

from hyperloom.codegen.cache import compile_ahead
from hyperloom.config import CONFIG
from hyperloom.runtime.program import Program


def buckets(max_rows: int) -> tuple[int, ...]:
    out, b = [], 1
    while b < max_rows:
        out.append(b)
        b *= 2
    return tuple(out) + (max_rows,)


class Runner:
    def __init__(self, program: Program, decode_rows: int):
        self.program = program
        self.buckets = buckets(decode_rows)
        self.use_cuda_graphs = program.device.type == "cuda" and program.capturable
        self.recorded: dict[int, Callable[[], None]] = {}
        self._pool = None
        self._ahead = not self.use_cuda_graphs or CONFIG.compile_threads < 1
        self.replays = 0  # steps served from a recording (tests assert on it)

    def bucket(self, rows: int) -> int | None:
        return next((b for b in self.buckets if b >= rows), None)

    def run(self, rows: int, seq_rows: int, keep: int | None = None) -> int:
        """Launch a step whose inputs are already in the program's row buffers; returns the
        padded row count that ran. Decode-shaped steps (one row per sequence) are replayed with
        every row's logits (`keep` is for the others: the logits of their last rows only)."""
        self._compile_ahead(rows, seq_rows)
        bucket = self.bucket(rows) if seq_rows == 1 else None
        if bucket is None:
            self.program.step(rows, seq_rows, keep)
            return rows
        self._pad(rows, bucket)
        if bucket not in self.recorded:
            self.recorded[bucket] = self._capture(bucket)
        self.recorded[bucket]()
        self.replays += 1
        return bucket

    def _compile_ahead(self, rows: int, seq_rows: int) -> None:
        """Before the first step on a GPU: the kernels of this step and of a one-row decode step
        compile together on CONFIG.compile_threads threads (`cache.compile_ahead`), not one by
        one at their first launches. Later steps of new shapes compile as they launch."""
        if self._ahead:
            return
        self._ahead = True
        if seq_rows == 1:  # a decode step runs as its bucket
            rows = self.bucket(rows) or rows
        shapes = {(rows, seq_rows), (self.buckets[0], 1)}  # one pass if this step is that one
        with compile_ahead(CONFIG.compile_threads):
            for shape in shapes:
                for f in self.program.record(*shape):
                    f()

    def _pad(self, rows: int, bucket: int) -> None:
        """Padding rows write no state: slot -1 (kernels and state writes skip them)."""
        ins = self.program.inputs
        ins["%slot"][rows:bucket] = -1
        ins["%pos"][rows:bucket] = 0
        ins["%ids"][rows:bucket] = 0

    def warm_up(self, launches: list[Callable[[], None]], bucket: int) -> None:
        """Compile and run the launches once outside a capture with every row as padding: the
        step itself runs once, from the replay (recurrent state and conv windows advance on
        every run, so a warm-up on the live rows would apply the step twice)."""
        slot = self.program.inputs["%slot"]
        live = slot[:bucket].clone()
        slot[:bucket] = -1
        try:
            for f in launches:
                f()
        finally:
            slot[:bucket] = live

    def _capture(self, bucket: int) -> Callable[[], None]:
        launches = self.program.record(bucket, 1)
        if not self.use_cuda_graphs:
            def replay() -> None:
                for f in launches:
                    f()
            return replay
        self.warm_up(launches, bucket)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        with torch.cuda.graph(graph, pool=self._pool):
            for f in launches:
                f()
        return graph.replay
