"""The compiled engine (generated Triton kernels; Triton's interpreter on the CPU) against the
reference interpreter on the same weights: prefill + 16 decode steps, sub-chunked prefill,
recorded-step replay with padded buckets, and the structure of the plan."""

from __future__ import annotations

import dataclasses
import functools
import re

import pytest
import torch

import hyperloom
from hyperloom.config import CONFIG, overrides
from hyperloom.errors import InputError
from hyperloom.ir.ops import Op
from hyperloom.codegen.emitters import hc_pre as hc_pre_emitter
from hyperloom.passes import kernel_plan
from hyperloom.runtime import launch_matmul, launchers
from hyperloom.models.random_weights import random_weights
from tests.tolerances import assert_close

F32 = torch.float32
CASES = [("llama", "tiny"), ("llama", "tiny-hc"), ("glm5next", "tiny")]


@functools.cache
def spec_and_weights(model: str, config: str):
    spec = hyperloom.build(model, config, dtype=F32)
    return spec, random_weights(spec, seed=1)


def engines(model: str, config: str, **kw):
    spec, w = spec_and_weights(model, config)
    slots = kw.get("max_sequences", 8)
    ref = hyperloom.engine(spec, w, dtype=F32, backend="reference", max_seq_len=64,
                           max_sequences=slots)
    return ref, hyperloom.engine(spec, w, dtype=F32, backend="compiled", max_seq_len=64, **kw)


def prompt(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("model, config", CASES)
def test_prefill_and_16_decode_steps_match_the_reference(model, config):
    match_the_reference(model, config, 16)


VARIANT_STEPS = 4  # a knob's other form: decode steps after the prefill (each is seconds here)


def match_the_reference(model: str, config: str, steps: int) -> None:
    """A 19-token prefill in steps of 8, then `steps` greedy decode steps, all replays."""
    ref, comp = engines(model, config, prefill_chunk=8)
    a, b = ref.new_sequence(), comp.new_sequence()
    ids = prompt(19, seed=3)
    want, got = ref.prefill(a, ids), comp.prefill(b, ids)
    assert_close(got, want, F32, f"{model} {config} prefill")
    ref_tokens, our_tokens = [], []
    tok_a = tok_b = int(want[-1].argmax())
    for step in range(steps):
        want, got = ref.decode([a], [tok_a]), comp.decode([b], [tok_b])
        assert_close(got, want, F32, f"{model} {config} decode {step}")
        tok_a, tok_b = int(want[0].argmax()), int(got[0].argmax())
        ref_tokens.append(tok_a)
        our_tokens.append(tok_b)
    assert our_tokens == ref_tokens
    assert comp.runners["main"].replays == steps  # every decode step was a replay


@pytest.mark.parametrize("model, config", [("llama", "tiny-hc"), ("glm5next", "tiny")])
def test_folded_and_plain_sites_match_the_reference(model, config):
    # fold_sites: a one-row step finishes each mHC site in the GEMM that wrote its streams
    # (projection partials, ticket, Sinkhorn and y in the last program); wider steps do not
    with overrides(fold_sites=True):
        comp = _plan(model, config)
        folded = [k for k in comp.plan.kernels if k.folded]
        assert folded and all(k.finishes for k in comp.plan.kernels if k.finishes)
        with overrides(fold_sites=False):
            plain = _plan(model, config).plan
        embedded = sum(k.emitter == "hc_pre" and k.carried_rows > 0 for k in comp.plan.kernels)
        assert comp.plan.launches(1) == plain.launches(1) - len(folded) - embedded
        assert comp.plan.launches(65) == plain.launches(65)
    with overrides(fold_sites=False):  # the default folds: the plain form is checked here
        match_the_reference(model, config, VARIANT_STEPS)


@pytest.mark.parametrize("model, config", [("llama", "tiny-hc"), ("glm5next", "tiny")])
def test_formed_sites(model, config):
    # form_sites: the GEMV after a folded site whose y only it reads forms y at one row from
    # the streams' parts; the GEMM before writes partials only; launches are unchanged
    comp = _plan(model, config)
    kernels = comp.plan.kernels
    formed = [i for i, k in enumerate(kernels) if k.formed]
    assert formed
    for i in formed:
        site, before, gemv = kernels[i], kernels[i - 1], kernels[i + 1]
        assert gemv.forms == site and "forms" in gemv.line()
        assert gemv.node.args[0] == site.node.outs[0] and gemv.emitter == "matmul"
        if site.folded:
            assert before.finishes == site and "partials" in before.line()
        else:  # a site of its own: the embedding's launch writes its parts at one row
            assert before.carries == site and site.carried_rows == 1
            assert "runs" in before.line() and site.launches_at(1) == 0
    assert not kernels[formed[0]].folded  # the first site (after the embedding)
    if model == "llama":  # every site of llama is formed
        assert len(formed) == sum(k.emitter == "hc_pre" for k in kernels)
    with overrides(embed_site=False):  # the site's own parts kernel at one row
        own = _plan(model, config).plan.kernels
        site = own[formed[0]]
        assert "writes its parts" in site.line() and site.launches_at(1) == 1
        assert not site.carried_rows and not own[formed[0] - 1].carries
        match_the_reference(model, config, VARIANT_STEPS)
    with overrides(form_sites=False):
        plain = _plan(model, config).plan
        assert not any(k.formed or k.forms for k in plain.kernels)
        assert plain.launches(1) == comp.plan.launches(1) + 1  # the embedded first site
        # the default forms: the finishing fold is checked here
        match_the_reference(model, config, VARIANT_STEPS)
    if model == "llama":
        with overrides(site_lo_parts=False):  # the hi parts alone (exact in fp32: lo is 0)
            match_the_reference(model, config, VARIANT_STEPS)


def test_the_last_gemm_stores_the_stream_mean_for_the_lm_head():
    # head_mean: the hc_post GEMM before the LM head stores the streams' mean and up to
    # MEAN_ROWS rows the head norms it in its K loop, one launch fewer; wider steps unchanged
    # (GLM-5.3's stream mean is a value of its own, read by the MTP layer too: not paired)
    model, config = "llama", "tiny-hc"
    plan = _plan(model, config).plan
    kernels = plan.kernels
    head = next(i for i, k in enumerate(kernels) if k.meaned)
    down, lm = kernels[head - 1], kernels[head]
    assert down.means == lm and lm.node.args[0] == down.node.outs[0]
    assert "stream mean" in down.line() and "stream mean" in lm.line()
    assert sum(k.meaned for k in kernels) == 1 and sum(bool(k.means) for k in kernels) == 1
    mean_rows = kernel_plan.MEAN_ROWS
    assert lm.launches_at(mean_rows) == 1 and lm.launches_at(mean_rows + 1) == 2
    with overrides(head_mean=False):
        plain = _plan(model, config).plan
        assert not any(k.means or k.meaned for k in plain.kernels)
        for rows in (1, mean_rows, mean_rows + 1, 65):
            assert plain.launches(rows) == plan.launches(rows) + (rows <= mean_rows)
        # the default stores the mean: the head's norm kernel is checked here
        match_the_reference(model, config, VARIANT_STEPS)


def test_a_site_read_by_two_is_not_formed():
    # y read by another entry too cannot be formed inside one GEMV
    comp = _plan("llama", "tiny-hc")
    kernels = list(comp.plan.kernels)
    i = next(i for i, k in enumerate(kernels) if k.formed)
    unformed = [dataclasses.replace(k, formed=False, forms=None) for k in kernels]
    types = comp.graph.value_types()
    assert kernel_plan._form_sites(unformed, types)[i].formed
    reader = kernels[i + 2]  # attention or the down GEMV: made to read y as well
    node = dataclasses.replace(reader.node, args=reader.node.args + (kernels[i].node.outs[0],))
    unformed[i + 2] = dataclasses.replace(unformed[i + 2], node=node)
    assert not kernel_plan._form_sites(unformed, types)[i].formed


def test_kda_conv_carries_the_gate_up_to_16_rows():
    # conv_gate: each KDA conv runs the f_b GEMM + decay gate right after it as programs of its
    # own launch in steps of at most 16 rows; the gate's entry launches from 17 rows on; the
    # engine matches the reference either way (GLM tiny's decode: the carried form)
    with overrides(conv_gate=True):
        kernels = _plan("glm5next", "tiny").plan.kernels
        convs = [i for i, k in enumerate(kernels) if k.emitter == "kda_conv"]
        assert convs
        for i in convs:
            conv, gate = kernels[i], kernels[i + 1]
            assert conv.carries == gate and gate.carried_rows == 16
            assert gate.node.op.value == "linear_kda_gate"
            assert [gate.launches_at(r) for r in (1, 16, 17, 64)] == [0, 0, 1, 1]
            assert gate.launches_at(16, decode=True) == 0
            assert "runs k" in conv.line()
        with overrides(conv_gate=False):
            plain = _plan("glm5next", "tiny").plan
        assert not any(k.carries or k.carried_rows for k in plain.kernels
                       if k.emitter == "kda_conv" or k.node.op.value == "linear_kda_gate")
        assert _plan("glm5next", "tiny").plan.launches(1) == plain.launches(1) - len(convs)
    with overrides(conv_gate=False):  # the default carries: the plain form is checked here
        match_the_reference("glm5next", "tiny", VARIANT_STEPS)


def test_a_gate_sharing_bytes_with_the_conv_is_not_carried():
    # the carried gate writes g inside the conv's launch: were g placed over one of the conv's
    # operands, it would be overwritten (or overwrite it) mid-launch, so that pair is refused
    import dataclasses

    with overrides(conv_gate=False):
        comp = _plan("glm5next", "tiny", 1)
    kernels = list(comp.plan.kernels)
    conv = next(k for k in kernels if k.emitter == "kda_conv")
    gate = kernels[kernels.index(conv) + 1]
    with overrides(conv_gate=True):
        assert kernel_plan._carry(kernels, comp.arena)[kernels.index(conv)].carries
        values = dict(comp.arena.values)
        values[gate.node.outs[0]] = values[conv.node.outs[2]]  # g over the conv's v output
        arena = dataclasses.replace(comp.arena, values=values)
        assert not kernel_plan._carry(kernels, arena)[kernels.index(conv)].carries


def test_kda_recurrence_carries_the_gated_norm():
    # kda_norm_rows: the KDA recurrence runs g_b's GEMM + gated norm (the entry right after
    # it) in its launch up to that many rows; the norm's entry launches above; h placed over
    # one of the recurrence's operands refuses the pair; the engine matches the reference with
    # the norm carried up to one row (b1 decode carried, wider steps not) and never
    import dataclasses

    with overrides(kda_norm_rows=16):
        comp = _plan("glm5next", "tiny", 1)
        kernels = list(comp.plan.kernels)
        i = next(i for i, k in enumerate(kernels) if k.emitter == "kda")
        rec, norm = kernels[i], kernels[i + 1]
        assert norm.node.op.value == "linear_gated_norm" and rec.carries == norm
        assert [norm.launches_at(r) for r in (1, 16, 17, 64)] == [0, 0, 1, 1]
        assert norm.launches_at(64, decode=True) == 1  # 64 sequences: 64 rows, the entry's
        assert "runs k" in rec.line() and "up to 16 rows" in rec.line()
        values = dict(comp.arena.values)
        values[norm.node.outs[0]] = values[rec.node.args[2]]  # h over the recurrence's v
        arena = dataclasses.replace(comp.arena, values=values)
        plain = [dataclasses.replace(k, carries=None, carried_rows=0) for k in kernels]
        assert not kernel_plan._carry(plain, arena)[i].carries
        with overrides(kda_norm_rows=0):
            assert _plan("glm5next", "tiny", 1).plan.launches(1) == comp.plan.launches(1) + 1
    # at GLM-5.3-Flash's size too: the arena places a carried result apart from the operands
    # of the node whose launch writes it (arena.CARRIED_AFTER)
    flash = _plan("glm5next", "glm-5.3-flash", 4).plan.kernels
    kdas = [k for k in flash if k.emitter in ("kda", "kda_conv")]
    assert len(kdas) == 6 and all(k.carries for k in kdas)
    # never carried here; carried at one row (the default) is the run of
    # test_prefill_and_16_decode_steps_match_the_reference
    assert CONFIG.kda_norm_rows == 1
    with overrides(kda_norm_rows=0):
        match_the_reference("glm5next", "tiny", VARIANT_STEPS)


def test_plan_counts_the_chunked_kda_launches():
    from hyperloom.codegen.emitters import kda, kda_chunk

    entries = [k for k in _plan("glm5next", "tiny").plan.kernels if k.emitter == "kda"]
    assert entries
    chunked = len(kda_chunk.kernel_names("x"))
    for k in entries:
        assert k.launches_at(1) == k.launches_at(kda.CHUNKED_ROWS - 1) == 1
        assert k.launches_at(kda.CHUNKED_ROWS) == chunked == 6
        assert k.launches_at(64, decode=True) == 1  # one row a sequence: the recurrent kernel


def test_kda_output_norm_is_g_b_s_epilogue():
    # the gated norm runs in g_b's GEMM (one launch at every width), right before o_proj, which
    # then has no prologue (one launch; hc_post apart above 64 rows)
    kernels = _plan("glm5next", "tiny").plan.kernels
    assert not any(k.node.op.value == "gated_rmsnorm" for k in kernels)
    at = [i for i, k in enumerate(kernels) if k.node.op.value == "linear_gated_norm"]
    assert len(at) == sum(k.emitter == "kda" for k in kernels) > 0
    for i in at:  # (the KDA recurrence runs it up to kda_norm_rows rows)
        most = kernels[i].carried_rows
        assert [kernels[i].launches_at(r) for r in (1, 16, 17, 64, 65)] == \
            [int(r > most) for r in (1, 16, 17, 64, 65)]
        o_proj = kernels[i + 1]
        assert o_proj.node.op.value == "linear_hc_post" and not o_proj.node.attrs.group
        assert o_proj.node.args[0] == kernels[i].node.outs[0]
        assert [o_proj.launches_at(r) for r in (1, 64, 65)] == [1, 1, 2]


def test_plan_counts_hc_pre_launches():
    # one row: the one launch (or none: folded, or its parts written by the embedding); then
    # projection + finish; above HC_WIDE_ROWS projection + gates + apply
    wide = kernel_plan.HC_WIDE_ROWS
    sites = [k for k in _plan("llama", "tiny-hc").plan.kernels if k.emitter == "hc_pre"]
    assert sites
    for k in sites:
        if wide >= 2:  # a GPU's rule; the interpreter takes gates + apply from two rows
            assert k.launches_at(2) == k.launches_at(wide) == 2
        assert k.launches_at(wide + 1) == k.launches_at(wide + 64) == 3
        assert k.launches_at(1) == (0 if k.folded or k.carried_rows else 1)


@pytest.mark.parametrize("model, config", [("llama", "tiny-hc"), ("glm5next", "tiny")])
def test_sub_chunked_prefill_equals_token_at_a_time(model, config):
    ids = prompt(11, seed=5)
    outs = {}
    for chunk in (1, 4, 64):
        _, comp = engines(model, config, prefill_chunk=chunk)
        outs[chunk] = comp.prefill(comp.new_sequence(), ids)
    assert_close(outs[4], outs[1], F32, "chunks of 4 vs token at a time")
    assert_close(outs[64], outs[1], F32, "one chunk vs token at a time")


def test_glm_chunked_kda_prefill_equals_the_reference_and_the_recurrent_form():
    """A 38-token prompt: one step takes the chunked KDA kernels (a run of >= CHUNKED_ROWS
    rows), steps of 16 the recurrent one, 33 + 5 both in turn; then decode continues."""
    from hyperloom.codegen.emitters.kda import CHUNKED_ROWS

    ids = prompt(38, seed=8)
    assert 33 >= CHUNKED_ROWS > 16
    ref, _ = engines("glm5next", "tiny", prefill_chunk=64)
    a = ref.new_sequence()
    want = ref.prefill(a, ids)
    for chunk in (64, 16, 33):
        _, comp = engines("glm5next", "tiny", prefill_chunk=chunk)
        b = comp.new_sequence()
        assert_close(comp.prefill(b, ids), want, F32, f"prefill in steps of {chunk}")
        if chunk == 33:  # the state the chunked form left carries on in decode
            for step, tok in enumerate((5, 77)):
                assert_close(comp.decode([b], [tok])[0], ref.decode([a], [tok])[0], F32,
                             f"decode {step} after a chunked prefill")


def test_replayed_padded_bucket_equals_each_sequence_alone():
    """3 sequences decode in bucket 4: the padding row must write no state, and the replay
    must read this step's inputs (not the ones it was recorded with)."""
    _, comp = engines("llama", "tiny-hc", prefill_chunk=16)
    seqs = [comp.new_sequence() for _ in range(3)]
    prompts = [prompt(5 + i, seed=10 + i) for i in range(3)]
    for s, p in zip(seqs, prompts):
        comp.prefill(s, p)
    steps = [[7, 8, 9], [10, 11, 12]]
    batched = [comp.decode(seqs, toks) for toks in steps]
    assert comp.runners["main"].replays == 2 and 4 in comp.runners["main"].recorded
    for i, p in enumerate(prompts):
        _, alone = engines("llama", "tiny-hc", prefill_chunk=16)
        s = alone.new_sequence()
        alone.prefill(s, p)
        for step, toks in enumerate(steps):
            assert_close(batched[step][i], alone.decode([s], [toks[i]])[0], F32,
                         f"sequence {i} step {step}")


def test_replay_equals_eager_launches():
    """The same decode step through a recorded bucket and through a fresh eager launch list."""
    ref, comp = engines("llama", "tiny", prefill_chunk=16)
    s = comp.new_sequence()
    comp.prefill(s, prompt(6, seed=2))
    snap = comp.snapshot(s)
    replayed = comp.decode([s], [42])
    comp.rollback(s, snap)
    prog, runner = comp.programs["main"], comp.runners["main"]
    prog.inputs["%ids"][0], prog.inputs["%pos"][0], prog.inputs["%slot"][0] = 42, s.length, s.slot
    for f in prog.record(1, 1):
        f()
    assert_close(prog.outputs(1)["logits"], replayed, F32, "eager vs replayed")
    assert runner.replays == 1


def test_capture_warm_up_writes_no_state():
    """A CUDA capture first runs its launches once outside the capture. That run must treat
    every row as padding: KDA's recurrence and conv windows advance on every run, so a warm-up
    on the live rows applied the step twice (H200: relative error 0.77 at the first replayed
    GLM decode). The step then runs once and matches the reference."""
    ref, comp = engines("glm5next", "tiny", prefill_chunk=16)
    a, s = ref.new_sequence(), comp.new_sequence()
    p = prompt(9, seed=4)
    ref.prefill(a, p)
    comp.prefill(s, p)
    prog, runner = comp.programs["main"], comp.runners["main"]
    prog.inputs["%ids"][0], prog.inputs["%pos"][0], prog.inputs["%slot"][0] = 42, s.length, s.slot
    before = {n: t.clone() for n, t in comp.state.tensors.items()}
    launches = prog.record(1, 1)
    runner.warm_up(launches, 1)
    for n, t in comp.state.tensors.items():
        assert torch.equal(t, before[n]) or (t.isnan() == before[n].isnan()).all() and \
            torch.equal(t.nan_to_num(), before[n].nan_to_num()), f"warm-up wrote state {n}"
    assert int(prog.inputs["%slot"][0]) == s.slot, "warm-up must restore the live slots"
    for f in launches:
        f()
    assert_close(prog.outputs(1)["logits"][0], ref.decode([a], [42])[0], F32, "step after warm-up")


def test_glm_draft_matches_the_reference():
    """The MTP graph (concat, cast, add and residual_add on elementwise kernels) drafts as the
    reference does from the main graph's hidden rows; 20 draft rows run in steps of 8."""
    ref, comp = engines("glm5next", "tiny", prefill_chunk=8, max_sequences=2)
    a, b = ref.new_sequence(), comp.new_sequence()
    ids, nxt = prompt(20, seed=5), prompt(20, seed=6)
    want, got = ref.hidden(a, ids), comp.hidden(b, ids)
    assert_close(got["logits"], want["logits"], F32, "main logits")
    assert_close(comp.draft(b, nxt, got["hidden"]), ref.draft(a, nxt, want["hidden"]), F32,
                 "draft logits")


# -- structure ---------------------------------------------------------------------------
def _plan(model: str, config: str, layers: int | None = None):
    return _plan_of(hyperloom.build(model, config, layers).main)


def _plan_of(graph):
    from hyperloom.codegen.compilation import compile_graph

    return compile_graph(graph, 64)


@pytest.mark.parametrize("config", ["tiny-hc", "bench"])
def test_decode_kernels_per_mhc_layer(config):
    comp = _plan("llama", config)
    layers = comp.graph.name.split("_")[1]
    per_layer: dict[str, int] = {}
    for k in comp.plan.kernels:
        layer = re.search(r"layers\.(\d+)\.", " ".join(k.node.args + (k.node.state or "",)))
        if layer:
            per_layer[layer[1]] = per_layer.get(layer[1], 0) + k.launches_at(1)
    assert per_layer and max(per_layer.values()) <= 7, per_layer  # RoPE inside attention
    assert not comp.plan.fallbacks, layers


def test_bench_plan_fuses_what_the_issue_names():
    comp = _plan("llama", "bench")
    ops = [k.node.op for k in comp.plan.kernels]
    n = comp.graph.name
    assert Op.RMSNORM not in ops and Op.LINEAR not in ops, n  # every norm folded, no bare GEMM
    assert ops.count(Op.HC_PRE) == 2 * 4  # one hc_pre + Sinkhorn kernel per site
    assert ops.count(Op.LINEAR_HC_POST) == 2 * 4  # hc_post fused into o_proj and down_proj
    fused = {k.name: k.node.sources for k in comp.plan.kernels}
    qkv = next(v for k, v in fused.items() if "q_k_v" in k)
    assert [s.split()[1] for s in qkv] == ["linear", "linear", "linear"]
    # the site norm (weight folded into the projections) is computed where y is made
    pre = next(v for k, v in fused.items() if "hc_pre_l0_hc_attn" in k)
    assert [s.split()[1] for s in pre] == ["hc_pre", "rmsnorm"]
    gate_up = next(k for k in comp.plan.kernels if "gate_up" in k.name)
    assert gate_up.node.attrs.eps is None and "rmsnorm" not in " ".join(gate_up.node.sources)
    head = next(v for k, v in fused.items() if "lm_head" in k)
    assert [s.split()[1] for s in head] == ["hc_head_mean", "rmsnorm", "lm_head"]


def test_glm_moe_site_writes_its_normed_rows():
    """A MoE block's site: its y is read only by post_attention_layernorm (the router, the
    experts and the shared expert read the normed rows), so hc_pre takes that norm and its
    weight, and no norm kernel is left in GLM-5.3-Flash's MoE layers. (GLM tiny's engine tests
    run it folded at decode and finished apart in prefill steps; test_hc_pre every form.)"""
    comp = _plan("glm5next", "glm-5.3-flash", 4)
    sites = [k for k in comp.plan.kernels if k.node.op is Op.HC_PRE and len(k.node.args) == 5]
    assert [k.node.args[4] for k in sites] == ["@layers.3.post_attention_layernorm.weight"]
    assert [s.split()[1] for s in sites[0].node.sources] == ["hc_pre", "rmsnorm"]
    norms = [k for k in comp.plan.kernels if k.node.op is Op.RMSNORM]
    assert all("post_attention_layernorm" not in " ".join(k.node.args) for k in norms), norms
    assert sites[0].folded  # the GEMM before it finishes it at one row, weight and all


def test_independent_norms_share_a_launch():
    """A DSA layer's latent norm and indexer-key norm (and the MTP drafter's enorm and hnorm):
    the first runs the second as more programs of its launch at every width; a norm that
    reads the first's output is not carried; the second's entry launches nothing and has no
    source of its own. (GLM tiny's engine tests run the pair at decode and prefill.)"""
    import dataclasses

    comp = _plan("glm5next", "tiny")
    kernels = list(comp.plan.kernels)
    i = next(i for i, k in enumerate(kernels) if k.carries and k.emitter == "norm")
    first, second = kernels[i], kernels[i + 1]
    assert [k.node.op for k in (first, second)] == [Op.RMSNORM, Op.LAYERNORM]
    assert first.carries == second and "in its launch" in first.line()
    assert [second.launches_at(r) for r in (1, 16, 65, 4096)] == [0] * 4
    assert first.launches_at(4096) == 1 and second.name not in comp.sources
    reads_it = dataclasses.replace(second.node, args=(first.node.outs[0],) + second.node.args[1:])
    plain = [dataclasses.replace(k, carries=None, carried_rows=0) for k in kernels]
    plain[i + 1] = dataclasses.replace(plain[i + 1], node=reads_it)
    assert not kernel_plan._carry(plain, comp.arena)[i].carries
    mtp = _plan_of(hyperloom.build("glm5next", "tiny").mtp).plan.kernels
    assert [k.node.op for k in mtp if k.emitter == "norm" and k.carries] == [Op.RMSNORM] * 2


def test_glm_moe_sum_rides_in_the_shared_down_epilogue():
    """Each MoE block's routed + shared sum is added in the epilogue of the shared expert's
    down projection, with hc_post (main graph) or the residual add (the MTP drafter's)."""
    from hyperloom.codegen.compilation import compile_graph

    spec = hyperloom.build("glm5next", "tiny")
    for graph, op, arity in ((spec.main, Op.LINEAR_HC_POST, 6), (spec.mtp, Op.LINEAR_RESIDUAL, 4)):
        kernels = compile_graph(graph, 64).plan.kernels
        moe = sum(k.node.op is Op.MOE_EXPERTS for k in kernels)
        summed = [k for k in kernels if k.node.op is op and len(k.node.args) == arity]
        assert moe and len(summed) == moe, graph.name
        assert all(" add" in " ".join(k.node.sources) for k in summed)
        assert not any(k.node.op in (Op.ADD, Op.HC_POST, Op.RESIDUAL_ADD) for k in kernels)


@pytest.mark.parametrize("model, config", CASES + [("llama", "bench")])
def test_arena_is_smaller_than_the_naive_sum(model, config):
    arena = _plan(model, config).arena
    assert 0 < arena.total_bytes < arena.naive_bytes
    live = sorted(arena.buffers, key=lambda b: b.offset)
    for a in live:  # buffers alive at the same time never share bytes
        for b in live:
            if a is not b and a.first <= b.last and b.first <= a.last:
                assert a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset


def test_glm_plans_run_no_op_on_the_interpreter():
    """Every GLM node has a kernel (main graph and MTP head), so decode can be captured."""
    comp = _plan("glm5next", "tiny")
    assert not comp.plan.fallbacks, [k.name for k in comp.plan.fallbacks]
    emitters = {k.emitter for k in comp.plan.kernels}
    assert {"moe_router", "moe_experts", "kda", "kda_conv", "norm", "dsa", "mla",
            "elementwise"} <= emitters
    ops_run = [k.node.op for k in comp.plan.kernels]  # KDA's gate rides in f_b's GEMM
    assert Op.KDA_GATE not in ops_run and Op.LINEAR_KDA_GATE in ops_run
    # the MoE blocks' adds ride in their shared down GEMMs; the head's stream mean is a kernel
    means = [k for k in comp.plan.kernels if k.node.op in (Op.ADD, Op.HC_HEAD_MEAN)]
    assert [(k.node.op, k.emitter) for k in means] == [(Op.HC_HEAD_MEAN, "elementwise")]
    assert "0 on the interpreter" in comp.plan.text()
    from hyperloom.codegen.compilation import compile_graph

    mtp = compile_graph(hyperloom.build("glm5next", "tiny").mtp, 64).plan
    assert not mtp.fallbacks, [k.name for k in mtp.fallbacks]
    # its residual adds (one with the MoE sum) ride in GEMM epilogues
    assert {Op.CONCAT, Op.CAST} == {k.node.op for k in mtp.kernels if k.emitter == "elementwise"}


def test_highway_values_own_their_bytes_and_a_clash_is_caught():
    import dataclasses

    from hyperloom.errors import IRError
    from hyperloom.passes.highway import plan_highway

    comp = _plan("llama", "tiny-hc")
    hw = comp.highway
    assert hw.row_bytes == 4 * 4 * 64 and len(hw.values) == 1 + 2 * 2  # expand + 2 sites x 2
    # force the first two highway buffers onto the same bytes while both are live
    bufs = {b.name: b for b in comp.arena.buffers}
    a, b = (bufs[comp.arena.values[v].buffer] for v in hw.values[:2])
    clash = dataclasses.replace(b, offset=a.offset, first=a.first)
    arena = dataclasses.replace(comp.arena, buffers=tuple(clash if x is b else x
                                                          for x in comp.arena.buffers))
    with pytest.raises(IRError, match="share arena bytes"):
        plan_highway(comp.graph, arena)


def test_padding_row_leaves_the_last_slot_alone_in_glm_kernels():
    """A padded decode bucket (slot -1 rows) must not touch any slot's state (-1 would index
    the last) in GLM's stateful kernels (KDA, DSA, MLA) nor in its MoE."""
    ref, comp = engines("glm5next", "tiny", prefill_chunk=8, max_sequences=4)
    prompts = [prompt(5 + i, seed=30 + i) for i in range(4)]
    ours, theirs = [comp.new_sequence() for _ in prompts], [ref.new_sequence() for _ in prompts]
    for a, b, p in zip(ours, theirs, prompts):
        comp.prefill(a, p)
        ref.prefill(b, p)
    assert_close(comp.decode(ours[:3], [1, 2, 3]), ref.decode(theirs[:3], [1, 2, 3]), F32,
                 "3 rows in bucket 4")
    assert comp.runners["main"].bucket(3) == 4
    assert_close(comp.decode(ours[3:], [4]), ref.decode(theirs[3:], [4]), F32, "the last slot")


class _Counting:
    """A loaded kernel that logs each launch (`kernel[grid](...)`) before running it."""

    def __init__(self, kernel, log: list) -> None:
        self.kernel, self.log = kernel, log

    def __getitem__(self, grid):
        run = self.kernel[grid]

        def launch(*args, **kw):
            self.log.append(grid)
            return run(*args, **kw)
        return launch


@pytest.mark.parametrize("model, config", [("llama", "tiny-hc"), ("glm5next", "tiny")])
@pytest.mark.parametrize("rows, seqs", [(1, 1), (3, 3), (6, 2), (40, 1), (70, 1)])
def test_a_step_launches_what_the_plan_counts(model, config, rows, seqs, monkeypatch):
    # the plan's launch counts (the bench's kernels per step) against the kernels one step of
    # the engine actually launches: decode of one and of three sequences, verify-like runs of
    # three rows, chunked KDA (40 rows), hc_post apart (70); hc_pre's wide form lowered to 32
    # rows so both wide steps take it
    log: list = []
    real = launchers.load
    for module in (launchers, launch_matmul):  # every module that loads kernels for a launch
        monkeypatch.setattr(module, "load", lambda *a, **kw: _Counting(real(*a, **kw), log))
    monkeypatch.setattr(kernel_plan, "HC_WIDE_ROWS", 32)
    monkeypatch.setattr(hc_pre_emitter, "WIDE_ROWS", 32)
    _, comp = engines(model, config, prefill_chunk=72)
    n = rows // seqs
    comp._run("main", {"ids": prompt(rows, seed=rows), "pos": torch.arange(n).repeat(seqs),
                       "slot": torch.arange(seqs).repeat_interleave(n)})
    assert len(log) == comp.programs["main"].plan.launches(rows, decode=n == 1)


def _arena_head_rows(prog) -> list[int]:
    """The row counts of the arena's LM-head launches from now on (the launch wrapped)."""
    heads, launch = [], prog.launches[prog._head_at]
    prog.launches[prog._head_at] = lambda rows, seq_rows: (heads.append(rows),
                                                           launch(rows, seq_rows))
    return heads


@pytest.mark.parametrize("model, config", [("llama", "tiny"), ("glm5next", "tiny")])
def test_prefill_of_the_last_logits_runs_the_head_on_that_row_only(model, config):
    """prefill(logits="last"): a 19-row prompt in sub-chunks of 8 gives the last row's logits of
    a full prefill, without a launch of the arena's LM head (one on the copied last row), and
    decode goes on alike; a 1-row prompt (a replayed shape) too; the reference agrees; any other
    `logits` is refused, naming it, with the sequence untouched."""
    ref, comp = engines(model, config, prefill_chunk=8)
    prog = comp.programs["main"]
    heads = _arena_head_rows(prog)
    for n in (19, 1):
        ids = prompt(n, seed=n)
        full, seqs = ref.prefill(ref.new_sequence(), ids), []
        for eng in (ref, comp):
            seqs.append(eng.new_sequence())
            last = eng.prefill(seqs[-1], ids, logits="last")
            assert_close(last, full[-1:], F32, f"{model} {eng.__class__.__name__} {n} rows")
        assert heads == ([] if n > 1 else [1])  # 1 row: the decode-shaped replay, every row
        assert prog._heads.x.shape[0] == 1
        want = ref.decode([seqs[0]], [7])
        assert_close(comp.decode([seqs[1]], [7]), want, F32, f"{model} decode after {n} rows")
        heads.clear()
    comp.prefill(comp.new_sequence(), prompt(3, seed=2))
    assert heads == [3]
    seq = comp.new_sequence()
    with pytest.raises(InputError, match="logits='first'"):
        comp.prefill(seq, prompt(5, seed=1), logits="first")
    assert seq.length == 0


def test_a_mixed_step_of_the_last_logits_runs_the_head_on_the_rows_it_needs():
    """step(batch, logits="last") with a prompt chunk first and decode rows after it: each
    entry's last row equals step(batch)'s, the arena's LM head never launches (the kept rows
    run on buffers of their own), and the sequences go on alike."""
    _, comp = engines("glm5next", "tiny", prefill_chunk=8)
    prog = comp.programs["main"]
    heads = _arena_head_rows(prog)
    runs = []
    for logits in ("all", "last"):
        old = [comp.new_sequence() for _ in range(2)]
        for i, s in enumerate(old):
            comp.prefill(s, prompt(6 + i, seed=i))
        heads.clear()
        batch = [(comp.new_sequence(), prompt(5, seed=9))] + [(s, [3 + i])
                                                              for i, s in enumerate(old)]
        runs.append(comp.step(batch, logits=logits))
        assert heads == ([7] if logits == "all" else [])  # "last": 3 kept rows, no arena head
        runs.append(comp.decode([s for s, _ in batch], [4, 5, 6]))
    (every, after_all), (last, after_last) = runs[:2], runs[2:]
    assert [tuple(x.shape) for x in last] == [(1, 256)] * 3
    for i, (a, b) in enumerate(zip(every, last)):
        assert_close(b, a[-1:], F32, f"entry {i}")
    assert_close(after_last, after_all, F32, "decode after the step")
