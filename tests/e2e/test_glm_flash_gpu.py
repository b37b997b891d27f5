"""GLM-5.3-Flash's first 4 layers at real width on the H200 (three KDA layers with dense MLPs,
then DSA attention with 288 routed experts): transformers (fp32) against the reference
interpreter (fp32), and the compiled engine (bf16, captured decode) against the reference, on
one set of random weights. The prompt crosses many KDA chunks, index_topk (sparse selection,
with a pool tail) and a pool boundary while decoding.

The routed experts share one base weight plus 2% of their own: bf16 activations move the
router's 8th and 9th scores past each other on many rows (their gap is about 0.005 at 288
experts), and with independent experts each such swap moves the logits by several percent.
Near-shared experts keep a swap under 0.5%, while rows gathered, weighted or combined wrongly
still miss by the whole expert output. Routing itself is checked against transformers on the
CPU (tests/e2e/test_transformers.py) and at this size by the MoE bench's agreement check.
Rows are checked one by one under the real-width rule of tests.tolerances (assert_rows): one row
in a hundred may pass REL (rounding's tail), two in a thousand twice REL (a pool or expert choice
on a rounding tie), none TIE_REL."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import importlib.util
import shutil

import pytest
import torch

import hyperloom
from hyperloom.bench.scenarios import rel_err
from hyperloom.codegen.emitters.kda import CHUNKED_ROWS
from hyperloom.ir.types import DType
from hyperloom.models import family
from hyperloom.models.checkpoint import save_checkpoint
from hyperloom.models.family import truncate
from hyperloom.models.random_weights import random_weights
from tests.hf_models import hf_config
from tests.tolerances import assert_rows

pytestmark = pytest.mark.gpu
BF16, F32 = torch.bfloat16, torch.float32
LAYERS, PROMPT, DECODE, EXPERT_SPREAD = 4, 4501, 6, 0.02
MAX_LEN = 16384  # 4096 pools: the DSA indexer selects in segments (more than 2048)


@dataclasses.dataclass
class Flash:
    bf16: object  # the bf16 model (IR graphs)
    f32: object
    cfg: object
    weights: dict
    prompt: torch.Tensor


@pytest.fixture(scope="module")
def flash() -> Flash:
    fam = family("glm5next")
    cfg = dataclasses.replace(truncate(fam.configs["glm-5.3-flash"], LAYERS),
                              num_nextn_predict_layers=0)
    bf16, f32 = fam.build(cfg, DType.of(BF16)), fam.build(cfg, DType.of(F32))
    weights = random_weights(bf16, seed=11, device="cuda", expert_spread=EXPERT_SPREAD)
    prompt = torch.randint(0, cfg.vocab_size, (PROMPT,), generator=torch.Generator().manual_seed(5))
    assert PROMPT > 2 * cfg.index_topk and PROMPT % cfg.index_kpool != 0
    return Flash(bf16, f32, cfg, weights, prompt)


def _free() -> None:
    gc.collect()
    torch.cuda.empty_cache()


@pytest.fixture(scope="module")
def hf_run(flash, tmp_path_factory):
    """Transformers' logits: the prompt, then DECODE steps fed its own greedy tokens."""
    import transformers

    if importlib.util.find_spec("fla") is not None:  # transformers would take fla's kernels
        pytest.fail("fla-core is importable: transformers' glm5_next would run fla's KDA kernels, "
                    "not its fp32 torch path; run these tests without fla on the path")
    path = tmp_path_factory.mktemp("flash4")
    save_checkpoint(path, family("glm5next"), flash.bf16, flash.weights)
    hf_config("glm5next", flash.cfg)[0].save_pretrained(path)
    tf32 = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    try:
        with _weights_on_host(flash.weights):  # the fp32 model (36 GB) loads on an 80 GB card
            hf = transformers.Glm5NextForConditionalGeneration.from_pretrained(
                path, dtype=F32, device_map="cuda").eval()
            shutil.rmtree(path)  # 18 GB of checkpoint, read once
            torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
            logits, tokens = _hf_logits(hf, flash.prompt)
            del hf
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = tf32
    return logits, tokens


@contextlib.contextmanager
def _weights_on_host(weights: dict):
    """The bf16 weights (18 GB) on the host while the block runs, in place; on the GPU again
    after it, once what the block left there is freed."""
    for name in weights:
        weights[name] = weights[name].cpu()
    _free()
    try:
        yield
    finally:
        _free()
        for name in weights:
            weights[name] = weights[name].cuda()


def _hf_logits(hf, prompt: torch.Tensor) -> tuple[list[torch.Tensor], list[int]]:
    with torch.no_grad():
        out = hf(input_ids=prompt[None].cuda(), use_cache=True)
        logits, tokens = [out.logits[0].float()], []
        cache = getattr(out, "cache", None) or out.past_key_values
        for _ in range(DECODE):
            tokens.append(int(logits[-1][-1].argmax()))
            out = hf(input_ids=torch.tensor([[tokens[-1]]], device="cuda"),
                     cache=cache, use_cache=True)
            logits.append(out.logits[0].float())
            cache = getattr(out, "cache", None) or out.past_key_values
    return logits, tokens


def _run(eng, prompt: torch.Tensor, tokens: list[int]) -> list[torch.Tensor]:
    seq = eng.new_sequence()
    out = [eng.prefill(seq, prompt)]
    for tok in tokens:
        out.append(eng.decode([seq], [tok]))
    eng.free(seq)
    return out


@pytest.fixture(scope="module")
def ref_run(flash, hf_run):
    with _weights_on_host(flash.weights):  # its fp32 copy and MLA scores fit an 80 GB card
        ref = hyperloom.engine(flash.f32, flash.weights, device="cuda", dtype=F32,
                               backend="reference", max_seq_len=MAX_LEN)
        out = _run(ref, flash.prompt, hf_run[1])
        del ref
    return out


@pytest.fixture(scope="module")
def compiled(flash):
    return hyperloom.compile(flash.bf16, flash.weights, device="cuda", dtype=BF16,
                             max_seq_len=MAX_LEN)


def _rows(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    """Row by row under tests.tolerances' real-width rule (bulk, rounding's tail, ties)."""
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    assert_rows(_row_errs(got, want), dtype, what)


def _row_errs(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """Each row's relative error."""
    return torch.tensor([rel_err(g, w) for g, w in zip(got, want)])


def _worst(got: torch.Tensor, want: torch.Tensor) -> str:
    """The worst row and its relative error, as text."""
    errs = _row_errs(got, want)
    return f"{int(errs.argmax())} {float(errs.max()):.3g}"


def _compare(got: list[torch.Tensor], want: list[torch.Tensor], dtype: torch.dtype,
             what: str) -> None:
    _rows(got[0], want[0], dtype, f"{what} prefill")
    for step, (g, w) in enumerate(zip(got[1:], want[1:])):
        _rows(g, w[-1:], dtype, f"{what} decode {step}")


def test_reference_matches_transformers(ref_run, hf_run):
    _compare(ref_run, hf_run[0], F32, "reference vs transformers")


def test_compiled_matches_reference(flash, compiled, ref_run, hf_run):
    got = _run(compiled, flash.prompt, hf_run[1])
    _compare(got, ref_run, BF16, "compiled bf16 vs reference")
    assert compiled.runners["main"].replays == DECODE


def test_prefill_in_calls_of_both_forms_equals_one_call(flash, compiled):
    """One call, against calls of the recurrent form (fewer than CHUNKED_ROWS rows) and the
    chunked form at odd offsets, their rows together under the tie rule (as one call's rows
    are: a call of 31 rows would otherwise allow no tie at all); decode carries on from
    either state."""
    one, split = compiled.new_sequence(), compiled.new_sequence()
    try:
        want = compiled.prefill(one, flash.prompt)
        cuts = [0, 5, 5 + CHUNKED_ROWS - 1, 700, 703, 2900, PROMPT]
        got = [compiled.prefill(split, flash.prompt[a:b]) for a, b in zip(cuts, cuts[1:])]
        for (a, b), g in zip(zip(cuts, cuts[1:]), got):
            print(f"prefill call of rows {a}..{b}: worst row {_worst(g, want[a:b])}")
        _rows(torch.cat(got), want, BF16, "prefill in calls vs one call")
        for tok in (17, 4242):
            got, ref = compiled.decode([split], [tok]), compiled.decode([one], [tok])
            _rows(got, ref, BF16, f"decode of token {tok} after split calls")
    finally:
        compiled.free(one)
        compiled.free(split)


def test_batched_decode_equals_each_sequence_alone(flash, compiled):
    lengths = (300, 1100, 2100, 3333)  # 2100 and 3333 select sparsely
    seqs = [compiled.new_sequence() for _ in lengths]
    alone = [compiled.new_sequence() for _ in lengths]
    try:
        _batched_vs_alone(flash, compiled, lengths, seqs, alone)
    finally:
        for s in seqs + alone:
            compiled.free(s)


def _batched_vs_alone(flash, compiled, lengths, seqs, alone) -> None:
    for s, a, n in zip(seqs, alone, lengths):
        compiled.prefill(s, flash.prompt[-n:])
        compiled.prefill(a, flash.prompt[-n:])
    for step in range(3):
        toks = [100 * step + i for i in range(len(lengths))]
        batch = compiled.decode(seqs, toks)
        for i, (a, tok) in enumerate(zip(alone, toks)):
            _rows(batch[i:i + 1], compiled.decode([a], [tok]), BF16,
                  f"step {step} sequence {i} (length {lengths[i]}) batched vs alone")
