"""Choosing the next token from logits: greedy, or temperature / top-k / top-p sampling from a
per-sequence seeded generator, so a sequence's tokens do not depend on what it was batched with.
Shared by the reference and the compiled engines."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from hyperloom.errors import InputError


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0  # 0: no top-k cut
    top_p: float = 1.0  # 1: no nucleus cut
    seed: int = 0
    max_new_tokens: int = 16
    stop: tuple[int, ...] = ()  # token ids that end the sequence (the stop token is kept)

    def __post_init__(self) -> None:
        bad = [f"{k}={v!r} (wants {want})" for k, v, ok, want in (
            ("temperature", self.temperature, self.temperature >= 0, ">= 0"),
            ("top_k", self.top_k, self.top_k >= 0, ">= 0"),
            ("top_p", self.top_p, 0 < self.top_p <= 1, "0 < top_p <= 1"),
            ("max_new_tokens", self.max_new_tokens, self.max_new_tokens >= 1, ">= 1")) if not ok]
        if bad:
            raise InputError(f"bad sampling parameters: {', '.join(bad)}")


@dataclass
class Sampler:
    params: Sampling
    generator: torch.Generator = field(init=False)

    def __post_init__(self) -> None:
        self.generator = torch.Generator().manual_seed(self.params.seed)

    def __call__(self, logits: torch.Tensor) -> int:
        """One token from a [vocab] row of fp32 logits."""
        p = self.params
        if p.temperature == 0:
            return int(logits.argmax())
        scores = logits.detach().float().cpu() / p.temperature
        if p.top_k:
            kth = scores.topk(min(p.top_k, scores.numel())).values[-1]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        probs = torch.softmax(scores, -1)
        if p.top_p < 1:
            sorted_p, order = probs.sort(descending=True)
            keep = sorted_p.cumsum(0) - sorted_p < p.top_p  # the smallest set reaching top_p
            probs = torch.zeros_like(probs).scatter_(0, order[keep], sorted_p[keep])
        return int(torch.multinomial(probs, 1, generator=self.generator))

    def done(self, tokens: list[int]) -> bool:
        return len(tokens) >= self.params.max_new_tokens or (
            bool(tokens) and tokens[-1] in self.params.stop)
