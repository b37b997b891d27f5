"""Sweep variants of the chunked KDA prefill (`hyperloom.codegen.emitters.kda_chunk`): each
variant's output and final state are checked against the fp32 reference of `hyperloom.bench.kda`
on the same inputs, then (on a GPU) each of its six launches is timed with CUDA events (median of
10 steps) and the whole step too, in alternating rounds. A variant is "committed" (the package
module) or a file defining the module's API, most simply through `variant.make`.

    python bench/sweeps/kda_chunk.py 8192 committed bench/sweeps/my_variant.py

On a CPU it runs Triton's interpreter at a small size (--heads 2 --head-dim 16, fp32) and only
checks: a dry run of the variants before a device call. `--dtype fp16` checks the fp16 scratch
path there (`--head-dim 128` for the GPU's shapes; bf16 is refused: the interpreter multiplies
bf16 wrongly), and `--tests [K]` also runs tests/codegen/test_kda_chunk.py's CPU tests (those
matching -k K) with each variant in place of the module (`patch_variant.py`, a process each)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import torch

from hyperloom.bench import kda as kb
from hyperloom.bench.kernels import load_emitters
from hyperloom.bench.scenarios import rel_err
from hyperloom.codegen.emitters import kda_chunk
from hyperloom.codegen.emitters.kda import KDASpec

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import common  # noqa: E402

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def load_variant(path: str, tag: str):
    """The kda_chunk API of a variant file (or the package module for "committed")."""
    return common.load_variant(path, f"kda_chunk_{tag}", kda_chunk)


def sweep_one(mod, tag: str, x, want, heads: int, head_dim: int) -> dict:
    """{"tag", "out_err", "state_err"} and, on a GPU, "total_us" and each launch's median µs."""
    spec = mod.KDAChunkSpec(heads, head_dim)
    name = f"sweep_{tag}"
    names = mod.kernel_names(name)
    (kernels,) = load_emitters(x.q.device, (mod, spec, name))
    work = mod.scratch(spec, x.rows, x.batch, x.q.device, x.q.dtype)
    start = kb.stored(x.state)  # as the engine keeps it: each head's S transposed
    state, out = start.clone(), torch.empty_like(x.q)

    def step(ks) -> None:
        state.copy_(start)
        mod.launch(ks, spec, q=x.q, k=x.k, v=x.v, g=x.g, b=x.b, slot=x.slot, state=state,
                   out=out, rows=x.rows, work=work)

    step(kernels)
    res = {"tag": tag, "out_err": rel_err(out, want[0]),
           "state_err": rel_err(kb.stored(state), want[1])}
    if x.q.device.type != "cuda":
        return res
    return res | common.timed_step(step, kernels, names, name, "_walk")


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tokens", type=int)
    ap.add_argument("variants", nargs="+", help='"committed" or variant files')
    ap.add_argument("--heads", type=int)
    ap.add_argument("--head-dim", type=int)
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--dtype", choices=sorted(DTYPES),
                    help="activations (bf16 on a GPU, else fp32)")
    ap.add_argument("--tests", nargs="?", const="", metavar="K",
                    help="also run the CPU tests of kda_chunk (-k K) with each variant patched in")
    args = ap.parse_args(argv)
    gpu = torch.cuda.is_available()
    dev = torch.device("cuda" if gpu else "cpu")
    heads, head_dim = args.heads or (64 if gpu else 2), args.head_dim or (128 if gpu else 16)
    dtype = args.dtype or ("bf16" if gpu else "fp32")
    if dtype == "bf16" and not gpu:
        ap.error("--dtype bf16 needs a GPU: the interpreter multiplies bf16 wrongly")
    kspec = KDASpec(heads, head_dim)
    x = kb.make_inputs(kspec, 1, args.tokens, dev, DTYPES[dtype], torch.Generator().manual_seed(0))
    want = kb.reference(kspec, x)
    mods = [load_variant(p, f"v{i}") for i, p in enumerate(args.variants)]
    results = []
    for _ in range(args.rounds or (2 if gpu else 1)):
        for i, (path, mod) in enumerate(zip(args.variants, mods)):
            r = sweep_one(mod, f"v{i}", x, want, heads, head_dim)
            times = ", ".join(f"{k} {v:.1f}" for k, v in r.items() if k.startswith("_"))
            total = f" total {r['total_us']:.1f} us | {times}" if "total_us" in r else ""
            print(f"[v{i}] {path}: out err {r['out_err']:.3e} state err {r['state_err']:.3e}"
                  f"{total}", flush=True)
            results.append(r | {"variant": path})
    if args.tests is not None:
        for path in args.variants:
            rc = run_tests(path, args.tests)
            print(f"tests with {path}: {'passed' if rc == 0 else f'FAILED (pytest exit {rc})'}",
                  flush=True)
            results.append({"variant": path, "tests_rc": rc})
    return results


def run_tests(path: str, k: str = "") -> int:
    """pytest's exit status of tests/codegen/test_kda_chunk.py (-k k) with the variant at `path`
    in place of kda_chunk's source and launch, in a process of its own."""
    env = os.environ | {"KDA_CHUNK_VARIANT": str(Path(path).resolve()) if path != "committed"
                        else "committed", "TRITON_INTERPRET": "1",
                        "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT),
                                                       os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "patch_variant",
           "-o", "addopts=", "-m", "not gpu", str(ROOT / "tests/codegen/test_kda_chunk.py")]
    return subprocess.run(cmd + (["-k", k] if k else []), env=env, cwd=ROOT).returncode


if __name__ == "__main__":
    main()
