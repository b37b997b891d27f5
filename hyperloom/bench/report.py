"""Benchmark output: the table, the JSON record (with the GPU, commit and versions) and the bar
chart (matplotlib, only if it is installed: `pip install matplotlib`)."""

from __future__ import annotations

import json
import platform
import subprocess
from pathlib import Path

import torch
import triton

from hyperloom.bench.measure import Limits
from hyperloom.bench.scenarios import Result


def meta(device: torch.device, limits: Limits, what: str) -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        commit = ""
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    return {"model": what, "device": gpu or device.type, "commit": commit or "unknown",
            "torch": torch.__version__, "triton": triton.__version__,
            "meaningful": device.type == "cuda", **limits.as_dict()}


def record(results: list[Result], limits: Limits, info: dict) -> dict:
    rows = []
    for r in results:
        rows.append({"scenario": r.scenario, "ours_s": r.ours_s, "baselines_s": r.baselines_s,
                     "speedup": {k: v / r.ours_s for k, v in r.baselines_s.items()},
                     "work": r.work, "unit": r.unit, "fraction_of_limit": r.fraction(limits),
                     "kernels_per_step": r.kernels, "compile_s": r.compile_s,
                     "rel_err_vs_eager": r.rel_err})
    return {"meta": info, "results": rows}


def table(rec: dict) -> str:
    m = rec["meta"]
    lines = [f"hyperloom bench {m['model']} on {m['device']} (commit {m['commit']}, torch "
             f"{m['torch']}, triton {m['triton']})",
             f"limits: {m['hbm_bytes_per_s'] / 1e12:.2f} TB/s copy, "
             f"{m['matmul_flop_per_s'] / 1e12:.1f} TFLOP/s matmul"]
    if not m["meaningful"]:
        lines.append("CPU run (Triton interpreter, fp32): these numbers mean nothing about speed")
    head = f"{'scenario':<22}{'ours':>11}  {'baseline':<28}{'x':>7}  {'% limit':>8}  kernels"
    lines += [head, "-" * len(head)]
    for r in rec["results"]:
        first = True
        for mode, t in r["baselines_s"].items():
            lead = (f"{r['scenario']:<22}{r['ours_s'] * 1e3:>9.3f}ms" if first
                    else " " * 33)
            tail = (f"  {100 * r['fraction_of_limit']:>7.1f}%  {r['kernels_per_step']}"
                    if first else "")
            lines.append(f"{lead}  {mode + f' {t * 1e3:.3f}ms':<28}"
                         f"{r['speedup'][mode]:>6.2f}x{tail}")
            first = False
    compiles = [f"{r['scenario']}: " + ", ".join(f"{k} {v:.1f}s" for k, v in r["compile_s"].items())
                for r in rec["results"] if r["compile_s"]]
    if compiles:
        lines += ["compile times (cold process)"] + [f"  {c}" for c in compiles]
    return "\n".join(lines) + "\n"


def write_json(rec: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec, indent=2, sort_keys=True))


def plot(rec: dict, path: Path) -> bool:
    """A bar chart per scenario (ours, each baseline, the limit); False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    results = rec["results"]
    fig, axes = plt.subplots(1, len(results), figsize=(4 * len(results), 3.5), squeeze=False)
    m = rec["meta"]
    for ax, r in zip(axes[0], results):
        rate = m["hbm_bytes_per_s"] if r["unit"] == "bytes" else m["matmul_flop_per_s"]
        bars = {"ours": r["ours_s"], **r["baselines_s"], "limit": r["work"] / rate}
        ax.bar(list(bars), [v * 1e3 for v in bars.values()])
        ax.set_title(r["scenario"])
        ax.set_ylabel("ms")
        ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return True
