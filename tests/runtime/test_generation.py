"""Sampling and the continuous-batching generation loop, on both backends: greedy batches equal
each prompt alone, seeded sampling does not depend on the batch, stop tokens, streaming, and
clear errors for bad requests."""

from __future__ import annotations

import functools

import pytest
import torch

import hyperloom
from hyperloom.errors import CapacityError, InputError
from hyperloom.ir.sampling import Sampler, Sampling
from hyperloom.models.random_weights import random_weights

PROMPTS = [[5, 9, 33], [7, 1, 2, 3, 4, 200, 6], [250], [10, 11, 12, 13], [99, 98]]


@functools.cache
def spec_weights():
    spec = hyperloom.build("llama", "tiny-hc", dtype=torch.float32)
    return spec, random_weights(spec, seed=3)


def engine(backend: str, slots: int = 2):
    spec, w = spec_weights()
    return hyperloom.engine(spec, w, backend=backend, max_seq_len=32, max_sequences=slots,
                            prefill_chunk=4)


@pytest.mark.parametrize("backend", ["reference", "compiled"])
def test_batched_greedy_equals_each_prompt_alone(backend):
    eng = engine(backend, slots=2)  # 5 prompts through 2 slots: sequences join and leave
    together = eng.generate(PROMPTS, max_new_tokens=4)
    ref = engine("reference", slots=1)
    assert together == [ref.generate(p, 4) for p in PROMPTS]
    assert eng._free and len(eng._free) == 2  # every slot came back


def test_seeded_sampling_does_not_depend_on_the_batch():
    eng = engine("reference", slots=3)
    params = [Sampling(temperature=1.2, top_k=40, top_p=0.9, seed=s) for s in range(3)]
    together = eng.generate(PROMPTS[:3], max_new_tokens=6, sampling=params)
    alone = [eng.generate(p, 6, sampling=params[i]) for i, p in enumerate(PROMPTS[:3])]
    assert together == alone
    again = eng.generate(PROMPTS[:3], max_new_tokens=6, sampling=params)
    assert again == together
    other = eng.generate(PROMPTS[:3], max_new_tokens=6,
                         sampling=[Sampling(temperature=1.2, seed=s + 10) for s in range(3)])
    assert other != together


def test_stop_tokens_end_a_sequence_and_tokens_stream():
    eng = engine("reference")
    greedy = eng.generate(PROMPTS[1], 6)
    stop = greedy[2]
    streamed: list[tuple[int, int]] = []
    out = eng.generate([PROMPTS[1], PROMPTS[0]], max_new_tokens=6, sampling=Sampling(stop=(stop,)),
                       on_token=lambda i, t: streamed.append((i, t)))
    assert out[0] == greedy[: greedy.index(stop) + 1]
    assert [t for i, t in streamed if i == 0] == out[0]
    assert [t for i, t in streamed if i == 1] == out[1]


def test_sampler_follows_the_distribution():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, -30.0])
    draws = [Sampler(Sampling(temperature=1.0, seed=s))(logits) for s in range(2000)]
    freq = torch.bincount(torch.tensor(draws), minlength=5).float() / len(draws)
    assert torch.allclose(freq, torch.softmax(logits, 0), atol=0.03), freq
    top2 = {Sampler(Sampling(temperature=1.0, top_k=2, seed=s))(logits) for s in range(200)}
    assert top2 == {0, 1}
    nucleus = {Sampler(Sampling(temperature=1.0, top_p=0.5, seed=s))(logits) for s in range(200)}
    assert nucleus == {0}  # p(0) = 0.64 >= 0.5: the nucleus is one token
    assert Sampler(Sampling())(logits) == 0


def test_bad_requests_are_refused_up_front():
    eng = engine("reference")
    with pytest.raises(CapacityError, match="prompt 1: 30 tokens \\+ 8 new exceed the capacity"):
        eng.generate([[1, 2], list(range(30))], max_new_tokens=8)
    with pytest.raises(InputError, match="prompt 1: token id 256 at position 1"):
        eng.generate([[1, 2], [3, 256]], max_new_tokens=2)
    with pytest.raises(InputError, match="prompt 1: token ids must be integers, got torch.float32"):
        eng.generate([[1, 2], [3, 2.5]], max_new_tokens=2)
    seq = eng.new_sequence()
    with pytest.raises(InputError, match="integers, got torch.bool"):
        eng.prefill(seq, torch.tensor([True, False]))
    with pytest.raises(InputError, match=r"one row, got shape \[2, 3\]"):
        eng.prefill(seq, torch.arange(6).view(2, 3))  # not six tokens of one sequence
    with pytest.raises(InputError, match="step got no"):
        eng.step([])
    assert seq.length == 0 and eng.prefill(seq, torch.arange(3)[None]).shape[0] == 3  # [1, n]
    eng.free(seq)
    with pytest.raises(InputError, match=r"top_p=0 \(wants 0 < top_p <= 1\)"):
        Sampling(top_p=0)
    assert len(eng._free) == 2 and eng.generate(PROMPTS[0], 2)  # nothing leaked
