"""Our engine's compile time as a user meets it, in a fresh process: build the engine (the
scenario's capacity and sequence slots), prefill 16 tokens and decode one (synchronized), first
with cold caches (hyperloom's kernel cache and Triton's, both in a new temporary directory), then
warm (the same directories again).

The child prints one line, `compile-time {json}`: imports_s (python, torch, hyperloom),
setup_s (random weights, device init) and compile_s (engine build to the first decoded token),
the only one the bench records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROMPT = 16  # prefill tokens before the one decode step
TIMEOUT_S = 1800
TAG = "compile-time "
# the child starts its clock before its imports
CHILD = ("import sys, time; t = time.perf_counter(); "
         "from hyperloom.bench.compile_time import child; child(sys.argv[1:], t)")


class ChildError(RuntimeError):
    """The child process failed or printed no result."""


def cold_and_warm(model: str, config: str, layers: int | None, dtype: str, device: str,
                  max_seq_len: int, chunk: int, slots: int = 1,
                  seed: int = 0) -> dict[str, float]:
    """{"ours cold cache": s, "ours warm cache": s}: two children sharing fresh caches."""
    argv = [model, config, str(layers or 0), dtype, device, str(max_seq_len), str(chunk),
            str(slots), str(seed)]
    with tempfile.TemporaryDirectory(prefix="hyperloom-compile-time-") as tmp:
        env = {**os.environ, "HYPERLOOM_KERNEL_CACHE": str(Path(tmp, "kernels")),
               "TRITON_CACHE_DIR": str(Path(tmp, "triton"))}
        cold, warm = run_child(argv, env), run_child(argv, env)
    return {"ours cold cache": cold["compile_s"], "ours warm cache": warm["compile_s"]}


def run_child(argv: list[str], env: dict[str, str]) -> dict:
    try:
        p = subprocess.run([sys.executable, "-c", CHILD, *argv], env=env, capture_output=True,
                           text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise ChildError(f"no result after {TIMEOUT_S} s") from e
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(TAG)]
    if p.returncode or not lines:
        tail = "\n".join(p.stderr.strip().splitlines()[-5:])
        raise ChildError(f"exit status {p.returncode}, no result:\n{tail}")
    return json.loads(lines[-1][len(TAG):])


def _files(folder: str) -> int:
    return sum(1 for f in Path(folder).rglob("*") if f.is_file())


def child(argv: list[str], t_start: float) -> None:
    """argv: model config layers(0: all) dtype device max_seq_len chunk slots seed."""
    import torch

    import hyperloom
    from hyperloom.config import CONFIG
    from hyperloom.models.random_weights import random_weights

    t_setup = time.perf_counter()
    name, config, layers, dtype, device, cap, chunk, slots, seed = argv
    dtype, device = getattr(torch, dtype), torch.device(device)
    model = hyperloom.build(name, config, int(layers) or None, dtype)
    weights = random_weights(model, int(seed))
    ids = torch.randint(0, model.vocab_size, (PROMPT + 1,),
                        generator=torch.Generator().manual_seed(int(seed)))
    torch.empty(1, device=device).sum().item()  # device init: not compile time
    cached = _files(CONFIG.kernel_cache_dir)
    t0 = time.perf_counter()
    eng = hyperloom.compile(model, weights, device, dtype, max_seq_len=int(cap),
                            max_sequences=int(slots), prefill_chunk=int(chunk))
    seq = eng.new_sequence()
    eng.prefill(seq, ids[:PROMPT])
    eng.decode([seq], ids[PROMPT:])
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    end = time.perf_counter()
    print(TAG + json.dumps({"imports_s": t_setup - t_start, "setup_s": t0 - t_setup,
                            "compile_s": end - t0, "kernel_cache": CONFIG.kernel_cache_dir,
                            "cached_files_before": cached}), flush=True)
