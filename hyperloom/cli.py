"""The `hyperloom` command: list models, dump IR, run greedy generation.

Errors from hyperloom are printed as one line (`error: ...`) with exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

import torch

import hyperloom
from hyperloom.config import knobs, overrides
from hyperloom.errors import HyperloomError, InputError
from hyperloom.ir.printer import print_graph
from hyperloom.passes.kernel_plan import APART_ROWS
from hyperloom.models import FAMILIES, Model, family

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


def _ids(text: str, flag: str = "--prompt-ids") -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as e:
        raise InputError(f"{flag} must be comma-separated integers, got {text!r}") from e


def _device(text: str) -> torch.device:
    """--device's value, refused by name when torch cannot use it here."""
    try:
        device = torch.device(text)
    except RuntimeError as e:
        raise InputError(f"--device {text!r}: not a torch device ({e})") from e
    if device.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"--device {text}: no CUDA device here (torch {torch.__version__})")
    return device


def _positive(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"wants an integer >= 1, got {text!r}")
    return value


def cmd_models(args: argparse.Namespace) -> None:
    for name, fam in FAMILIES.items():
        print(f"{name}  (model_type: {', '.join(fam.model_types)})")
        for cname, cfg in fam.configs.items():
            print(f"  --config {cname:<14} layers={cfg.num_hidden_layers:<3} "
                  f"hidden={cfg.hidden_size:<5} vocab={cfg.vocab_size:<7} hc_mult={cfg.hc_mult}")


def summary(model: Model) -> str:
    params = sum(p.type.numel() for p in model.params().values())
    ops = Counter(n.op.value for g in model.graphs for n in g.nodes)
    top = ", ".join(f"{k} x{v}" for k, v in ops.most_common())
    states = sum(len(g.states()) for g in model.graphs)
    return (f"{model.family}: {model.config.num_hidden_layers} layers"
            f"{' + MTP' if model.mtp else ''}, {params / 1e6:.2f}M params, {states} state "
            f"tensors per sequence\nops: {top}")


def cmd_dump_ir(args: argparse.Namespace) -> None:
    model = hyperloom.build(args.model, args.config, args.layers, DTYPES[args.dtype])
    texts = {"00_input.ir": print_graph(model.main)}
    if model.mtp:
        texts["00_input_mtp.ir"] = print_graph(model.mtp)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            (out / name).write_text(text)
        print(f"wrote {', '.join(texts)} to {out}")
    else:
        print("\n".join(texts.values()), end="")


def _compilations(args: argparse.Namespace):
    from hyperloom.codegen.compilation import compile_graph

    model = hyperloom.build(args.model, args.config, args.layers, DTYPES[args.dtype])
    named = {"main": model.main} | ({"mtp": model.mtp} if model.mtp else {})
    return {n: compile_graph(g, args.max_rows) for n, g in named.items()}


def cmd_compile(args: argparse.Namespace) -> None:
    from hyperloom.codegen.compilation import write_dump

    out = Path(args.dump)
    for name, comp in _compilations(args).items():
        files = write_dump(comp, out, "" if name == "main" else f"{name}_")
        print(f"{name}: {len(comp.stages) - 1} passes, {len(comp.plan.kernels)} kernels, "
              f"arena {comp.arena.total_bytes} B (naive {comp.arena.naive_bytes} B); "
              f"{len(files)} files in {out}")


def cmd_dump_plan(args: argparse.Namespace) -> None:
    for comp in _compilations(args).values():
        print(comp.plan.text(), end="")


def _sizes(args: argparse.Namespace, flag: str, gpu: bool) -> list[int]:
    """A bench flag's sizes (rows, tokens, sequences), its default (SIZES) where not given."""
    text = getattr(args, flag[2:].replace("-", "_"))
    sizes = _ids(text or SIZES[flag][0 if gpu else 1], flag)
    if not sizes or min(sizes) < 1:
        raise InputError(f"{flag} items must be positive integers, got {text!r}")
    return sizes


def _bench_device(args: argparse.Namespace) -> tuple[torch.device, list[str]]:
    """The bench's device and scenarios, every flag checked before any work (a model, the
    limits)."""
    device = _device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    gpu = device.type == "cuda"
    if not gpu and args.config not in ("tiny", "tiny-hc"):
        raise InputError(f"without a GPU, bench runs the tiny configs only (Triton's "
                         f"interpreter); got --config {args.config}")
    wanted = _wanted_scenarios(args.scenarios)
    for flag in SIZES:
        _sizes(args, flag, gpu)
    _decode_shapes(args.ctx or (DECODE_GPU if gpu else DECODE_CPU))
    _prefill_modes(args.prefill_modes)
    return device, wanted


def _benches(args: argparse.Namespace, wanted: list[str], model: Model, device: torch.device,
             limits) -> tuple:
    """(engine, KDA, MoE, DSA) benches, each only where a wanted scenario needs it: the engine's
    scenarios need random weights for the whole model (GLM-5.3-flash's MTP layer alone is 15
    GiB), the kernels' scenarios only their layer's sizes."""
    from hyperloom.bench.dsa import SCENARIOS as DSA_SCENARIOS
    from hyperloom.bench.dsa import DSABench
    from hyperloom.bench.kda import SCENARIOS as KDA_SCENARIOS
    from hyperloom.bench.kda import KDABench
    from hyperloom.bench.moe import SCENARIOS as MOE_SCENARIOS
    from hyperloom.bench.moe import MoEBench
    from hyperloom.bench.scenarios import TOLERANCE, Bench

    gpu = device.type == "cuda"
    dtype = torch.bfloat16 if gpu else torch.float32
    profile = (10 if gpu else 1) if args.profile else 0
    common = (model, device, dtype, TOLERANCE[dtype])
    bench = (Bench(*common, compile_modes=not args.no_compile, profile_steps=profile,
                   prefill_modes=_prefill_modes(args.prefill_modes))
             if set(wanted) & set(ENGINE_SCENARIOS) else None)
    kda = KDABench(*common, profile_steps=profile) if set(wanted) & set(KDA_SCENARIOS) else None
    moe = MoEBench(*common, profile_steps=profile) if set(wanted) & set(MOE_SCENARIOS) else None
    dsa = (DSABench(*common, limits, profile_steps=profile)
           if set(wanted) & set(DSA_SCENARIOS) else None)
    return bench, kda, moe, dsa


def cmd_bench(args: argparse.Namespace) -> None:
    from hyperloom.bench import report
    from hyperloom.bench.measure import measure_limits

    device, wanted = _bench_device(args)
    gpu = device.type == "cuda"
    model = hyperloom.build(args.model, args.config, args.layers,
                            torch.bfloat16 if gpu else torch.float32)
    limits = measure_limits(device)
    bench, kda, moe, dsa = _benches(args, wanted, model, device, limits)
    what = f"{args.model} --config {args.config}" + (f" --layers {args.layers}"
                                                     if args.layers else "")
    info = report.meta(device, limits, what)
    print(report.header({"meta": info}), end="", flush=True)

    def save(rec: dict) -> None:  # the run so far, rewritten as each scenario ends
        if args.json:
            report.write_json(rec, Path(args.json))

    results, rec = [], report.record([], limits, info)
    save(rec)
    for scenario in _bench_scenarios(args, wanted, bench, kda, gpu, moe, dsa):
        results.append(scenario())
        rec = report.record(results, limits, info)
        print(report.rows(rec["results"][-1]), end="", flush=True)
        save(rec)
    print("\n" + report.table(rec), end="")
    if args.plot and not report.plot(rec, Path(args.plot)):
        print("no plot: matplotlib is not installed (pip install matplotlib)")


ENGINE_SCENARIOS = ("decode", "site", "prefill")


def _wanted_scenarios(text: str) -> list[str]:
    from hyperloom.bench.dsa import SCENARIOS as DSA_SCENARIOS
    from hyperloom.bench.kda import SCENARIOS as KDA_SCENARIOS
    from hyperloom.bench.moe import SCENARIOS as MOE_SCENARIOS

    return _listed("--scenarios", text,
                   ENGINE_SCENARIOS + KDA_SCENARIOS + MOE_SCENARIOS + DSA_SCENARIOS)


def _listed(flag: str, text: str, known: tuple[str, ...]) -> list[str]:
    """The comma-separated items of a flag's value, each one of `known`, at least one."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [x for x in items if x not in known]
    if unknown or not items:
        raise InputError(f"{flag}: unknown {', '.join(unknown) or '(none given)'}; "
                         f"known: {', '.join(known)}")
    return items


def _prefill_modes(text: str | None) -> tuple[str, ...]:
    from hyperloom.bench.scenarios import PREFILL_MODES

    return PREFILL_MODES if text is None else tuple(_listed("--prefill-modes", text,
                                                            PREFILL_MODES))


def _bench_scenarios(args: argparse.Namespace, wanted: list[str], bench, kda,
                     gpu: bool, moe=None, dsa=None) -> list:
    """The scenarios to run, in order, as callables returning their Result."""
    from functools import partial

    from hyperloom.bench.kda import DECAYS

    runs = []
    sizes = partial(_sizes, args, gpu=gpu)
    if "decode" in wanted:
        shapes = _decode_shapes(args.ctx or (DECODE_GPU if gpu else DECODE_CPU))
        runs += [partial(_bench_decode, args, bench, c, b, i == 0)
                 for i, (b, c) in enumerate(shapes)]
    if "site" in wanted and bench.model.config.hc_mult > 1:
        runs += [partial(bench.site, n) for n in sizes("--site-rows")]
    if "kda-decode" in wanted:
        runs += [partial(kda.step, b) for b in sizes("--kda-batch")]
    if "kda-layer" in wanted:
        runs += [partial(kda.layer, b) for b in sizes("--kda-batch")]
    if "kda-prefill" in wanted:
        runs += [partial(kda.prefill, n, d) for n in sizes("--kda-tokens") for d in DECAYS]
    if "moe-decode" in wanted:
        runs += [partial(moe.step, b) for b in sizes("--moe-batch")]
    if "moe-prefill" in wanted:
        runs += [partial(moe.prefill, n) for n in sizes("--moe-tokens")]
    if "dsa-decode" in wanted:  # contexts ascending: each row's attend growth is over the first
        ctxs = sorted(sizes("--dsa-ctx"))
        runs += [partial(dsa.step, b, c) for b in sizes("--dsa-batch") for c in ctxs]
    if "prefill" in wanted:  # last: max-autotune's compile is the longest part of a run
        runs += [partial(bench.prefill, n) for n in sizes("--prefill-tokens")]
    return runs


# dsa-decode contexts; CPU: a few pools of GLM tiny's (39 completes a pool in the step, 100 has
# a tail). GLM-5.3-Flash at 131072 x 16 sequences: 3.2 GiB of caches a copy, 2 copies timed
DSA_CTX_GPU, DSA_CTX_CPU = "4096,32768,131072", "39,100"

# each bench size flag's default on a GPU and on the CPU (the interpreter's few rows)
SIZES = {"--site-rows": ("1,4096", "1,16"), "--kda-batch": ("1,16", "1,3"),
         "--kda-tokens": ("8192", "20"), "--moe-batch": ("1,16,64", "1,3"),
         "--moe-tokens": ("4096", "20"), "--dsa-batch": ("1,16", "1,3"),
         "--prefill-tokens": ("2048", "24"), "--dsa-ctx": (DSA_CTX_GPU, DSA_CTX_CPU)}

# decode scenarios, BATCHxCTX (a bare CTX: batch 1); CPU: the interpreter's few rows. The
# largest KV caches (--config bench: 4 layers of 8 x 128 bf16 K and V, 16 KiB a token) are
# 64 x 1040 slots 1.09 GB and 32784 slots 0.54 GB, engine and baseline each, next to 2.1 GB of
# weights each: well inside one GPU
DECODE_GPU = "1024,8192,16x1024,64x1024,32768"
DECODE_CPU = "12,4x12"


def _decode_shapes(text: str) -> list[tuple[int, int]]:
    """[(batch, ctx)] from "CTX" or "BATCHxCTX" items."""
    out = []
    for item in text.split(","):
        batch, x, ctx = item.strip().rpartition("x")
        try:
            shape = (int(batch if x else 1), int(ctx))
        except ValueError:
            shape = (0, 0)
        if min(shape) < 1:
            raise InputError(f"--ctx items are CTX or BATCHxCTX (positive integers), got {item!r}")
        out.append(shape)
    return out


def _bench_decode(args: argparse.Namespace, bench, ctx: int, batch: int, first: bool):
    """A decode scenario; the first also times our compile in fresh processes (cold, warm)."""
    from hyperloom.bench import compile_time
    from hyperloom.bench.scenarios import decode_shape

    r = bench.decode(ctx, batch)
    if first and not args.no_compile_time:
        try:
            ours = compile_time.cold_and_warm(
                args.model, args.config, args.layers, str(bench.dtype).removeprefix("torch."),
                str(bench.device), *decode_shape(ctx, batch))
        except compile_time.ChildError as e:
            print(f"warning: no compile time for our engine: {e}", file=sys.stderr)
        else:
            r.compile_s = ours | r.compile_s
    return r


def cmd_bench_plot(args: argparse.Namespace) -> None:
    from hyperloom.bench import report

    try:
        rec = report.read_json(Path(args.record))
        text = report.table(rec)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{args.record} is not a readable bench record: {e!r}") from e
    print(text, end="")
    if args.out and not report.plot(rec, Path(args.out)):
        raise HyperloomError("no plot: matplotlib is not installed (pip install matplotlib)")


def _engine(args: argparse.Namespace):
    kw = dict(device=_device(args.device), dtype=DTYPES[args.dtype], backend=args.backend)
    if Path(args.model).is_dir():
        eng = hyperloom.from_pretrained(args.model, **kw)
        return eng, args.model, eng.model
    family(args.model)  # a clear error for an unknown name before anything is built
    eng = hyperloom.load(args.model, args.config, layers=args.layers, seed=args.seed, **kw)
    what = f"{args.model} --config {args.config} (seeded random weights, seed {args.seed})"
    return eng, what, eng.model


def cmd_run(args: argparse.Namespace) -> None:
    from tqdm import tqdm

    from hyperloom.ir.sampling import Sampling

    prompts = [_ids(p) for p in args.prompt_ids.split(";")]
    if args.max_new_tokens < 1:
        raise InputError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    params = Sampling(args.temperature, args.top_k, args.top_p, args.seed, args.max_new_tokens,
                      tuple(_ids(args.stop, "--stop")) if args.stop else ())
    eng, what, model = _engine(args)
    bar = tqdm(total=len(prompts) * args.max_new_tokens, unit="tok", leave=False,
               disable=args.json or not sys.stderr.isatty(), file=sys.stderr)
    t0 = time.perf_counter()
    with bar:
        out = eng.generate(prompts, sampling=params, on_token=lambda i, t: bar.update())
    seconds = time.perf_counter() - t0
    tokens = out[0] if len(prompts) == 1 else out
    prompt = prompts[0] if len(prompts) == 1 else prompts
    if args.json:
        print(json.dumps({"model": what, "backend": args.backend, "prompt": prompt,
                          "tokens": tokens}))
        return
    print(f"model:   {what}")
    print(f"backend: {args.backend}")
    print(summary(model))
    for name, prog in getattr(eng, "programs", {}).items():
        plan = prog.plan
        print(f"kernels ({name}): {len(plan.kernels)} entries, "
              f"{plan.launches(1)} launches per decode step ({plan.launches(APART_ROWS + 1)} "
              "in a prefill step), "
              f"{len(plan.fallbacks)} on the interpreter; arena {prog.arena.total_bytes} B")
    for p, t in zip(prompts, out):
        print(f"prompt:  {p}")
        print(f"tokens:  {t}")
    n = sum(len(t) for t in out)
    print(f"{n} tokens in {seconds:.2f} s ({n / seconds:.1f} tokens/s, {len(prompts)} prompts)")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hyperloom", description=__doc__.splitlines()[0])
    p.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE",
                   help="override a knob of hyperloom/config.py for this command, e.g. "
                   "--set kv_block_size=64 (repeatable)")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("models", help="list model specs and named configs").set_defaults(
        fn=cmd_models)

    d = sub.add_parser("dump-ir", help="print the canonical IR of a model config")
    d.add_argument("model", choices=sorted(FAMILIES))
    _spec_args(d)
    d.add_argument("--out", help="write the dump files into this directory instead")
    d.set_defaults(fn=cmd_dump_ir, dtype="bfloat16")

    c = sub.add_parser("compile", help="compile a config and dump every stage, plan and kernel")
    c.add_argument("model", choices=sorted(FAMILIES))
    _spec_args(c)
    c.add_argument("--dump", required=True, help="directory for the dump files")
    c.add_argument("--max-rows", type=_positive, default=256,
                   help="rows per step the arena holds")
    c.set_defaults(fn=cmd_compile, dtype="bfloat16")

    q = sub.add_parser("dump-plan", help="print the kernel plan, one line per kernel")
    q.add_argument("model", choices=sorted(FAMILIES))
    _spec_args(q)
    q.add_argument("--max-rows", type=_positive, default=256)
    q.set_defaults(fn=cmd_dump_plan, dtype="bfloat16")

    _bench_parser(sub)

    bp = sub.add_parser("bench-plot", help="redraw a bench table (and chart) from its JSON")
    bp.add_argument("record", help="a JSON record written by bench --json")
    bp.add_argument("out", nargs="?", help="write the PNG bar chart here (needs matplotlib)")
    bp.set_defaults(fn=cmd_bench_plot)

    _run_parser(sub)
    return p


def _bench_parser(sub) -> None:
    """`hyperloom bench`: scenarios, their shapes and the outputs."""
    bn = sub.add_parser("bench", help="time the engine against torch eager and torch.compile")
    bn.add_argument("model", choices=sorted(FAMILIES))
    bn.add_argument("--config", default="tiny")
    bn.add_argument("--layers", type=int)
    bn.add_argument("--scenarios", default="decode,prefill,site",
                    help="comma-separated: decode, site, prefill (the engine vs torch); "
                    "kda-decode, kda-prefill (the KDA kernels vs flash-linear-attention); "
                    "moe-decode, moe-prefill (the MoE kernels vs the torch loop); "
                    "dsa-decode (one DSA layer's indexer and sparse MLA kernels)")
    bn.add_argument("--ctx", help=f"decode shapes: CTX (batch 1) or BATCHxCTX, e.g. 16x1024 "
                    f"(default {DECODE_GPU}; CPU: {DECODE_CPU})")
    bn.add_argument("--prefill-tokens", help="prefill lengths (default 2048; CPU: 24)")
    bn.add_argument("--site-rows", help="mHC site rows (default 1,4096; CPU: 1,16)")
    bn.add_argument("--kda-batch", help="kda-decode, kda-layer: sequences per step (default 1,16; "
                    "CPU: 1,3)")
    bn.add_argument("--kda-tokens", help="kda-prefill: tokens (default 8192; CPU: 20)")
    bn.add_argument("--moe-batch", help="moe-decode: rows per step (default 1,16,64; CPU: 1,3)")
    bn.add_argument("--moe-tokens", help="moe-prefill: tokens (default 4096; CPU: 20)")
    bn.add_argument("--dsa-ctx", help=f"dsa-decode: tokens cached per sequence (default "
                    f"{DSA_CTX_GPU}; CPU: {DSA_CTX_CPU})")
    bn.add_argument("--dsa-batch", help="dsa-decode: sequences per step (default 1,16; CPU: 1,3)")
    bn.add_argument("--device")
    bn.add_argument("--json", help="write the JSON record here")
    bn.add_argument("--plot", help="write a PNG bar chart here (needs matplotlib)")
    bn.add_argument("--no-compile", action="store_true", help="skip the torch.compile baselines")
    bn.add_argument("--prefill-modes", help="prefill: torch.compile's modes (default "
                    "default,max-autotune-no-cudagraphs)")
    bn.add_argument("--no-compile-time", action="store_true",
                    help="skip timing our compile in fresh processes (cold and warm cache)")
    bn.add_argument("--profile", action="store_true",
                    help="list the top kernels of our step (torch.profiler) per scenario")
    bn.set_defaults(fn=cmd_bench)


def _run_parser(sub) -> None:
    """`hyperloom run`: the model, prompts and sampling."""
    r = sub.add_parser("run", help="greedy generation (default: tiny GLM-5.3, random weights)")
    r.add_argument("model", nargs="?", default="glm5next", help="model name or checkpoint dir")
    _spec_args(r)
    r.add_argument("--prompt-ids", default="1,2,3,4,5,6,7,8,9,10,11,12",
                   help="comma-separated ids; several prompts separated by ';'")
    r.add_argument("--max-new-tokens", type=int, default=8)
    r.add_argument("--seed", type=int, default=0, help="random weights and sampling seed")
    r.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    r.add_argument("--top-k", type=int, default=0)
    r.add_argument("--top-p", type=float, default=1.0)
    r.add_argument("--stop", help="comma-separated stop token ids")
    r.add_argument("--device", default="cpu")
    r.add_argument("--json", action="store_true", help="print one JSON object")
    r.add_argument("--backend", choices=hyperloom.api.BACKENDS, default="compiled")
    r.set_defaults(fn=cmd_run, dtype="float32")


def _spec_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default="tiny")
    p.add_argument("--layers", type=int, help="keep only the first N decoder layers")
    p.add_argument("--dtype", choices=sorted(DTYPES))


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    try:
        sets = knobs(args.set)
    except ValueError as e:
        p.error(str(e))
    try:
        with overrides(**sets):
            args.fn(args)
    except (HyperloomError, OSError) as e:  # OSError: a path to read or write (it names it)
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
