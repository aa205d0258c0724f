"""The backbone's KV cache of the last long prompts read, so that another answer after the same sources
reads only what is new.

An answer scored against sources is read after a long prompt: ~2,000 tokens of sources cost the
backbone ten times the pass over a short question and its answer.  The sources sit at the start of
the prompt (the system message, `spanuq.context.render`), so two answers to the same question, or
two questions about the same sources, share most of it.  `PrefixCache` keeps the KV caches of the
last ``entries`` prompts (`spanuq.llm.capture.StateCapture`, one per prompt) and reads an answer on
the one that shares the longest start with its prompt: only the rest of the prompt and the answer's
tokens are fed (of an answer after the very same prompt, only the tokens after the first one that
differs from the last answer read there).

The states are those of one teacher-forced pass over [prompt; answer] (`extract_batch`), computed
in one to three pieces on the cache (a prompt no cache shares is read with its answer in one pass):
they agree to float rounding (tests/test_prefix_cache.py).
Memory: one cache holds 2 × layers × KV heads × head size floats per token (SmolLM2-135M:
46 KB a token, 92 MB for 2,000 tokens); ``entries`` bounds it.
"""
from __future__ import annotations

from typing import Sequence

import torch

from .capture import StateCapture
from .states import FeatureItem

MIN_SHARED = 64  # prompt tokens a cache must share with a new prompt to be reused (else a new one is made)


class PrefixCache:
    """``cache = PrefixCache(model, layers, out_dtype, entries=1)``; ``cache.read(prompt_ids, ids)`` is the
    `FeatureItem` of answer ``ids`` after ``prompt_ids``; ``cache.fed`` counts the tokens it fed."""

    def __init__(self, model, layers: Sequence[int], out_dtype: torch.dtype = torch.float16, entries: int = 1):
        if entries < 1:
            raise ValueError(f"a PrefixCache keeps at least one prompt, not {entries}")
        self.model, self.layers, self.out_dtype, self.entries = model, list(layers), out_dtype, entries
        self._caps: list[StateCapture] = []  # most recently used last
        self.fed = 0

    @staticmethod
    def _shared(a: Sequence[int], b: Sequence[int]) -> int:
        n = 0
        for x, y in zip(a, b):
            if x != y:
                break
            n += 1
        return n

    def read(self, prompt_ids: Sequence[int], ids: Sequence[int], sources: Sequence[int] | None = None) -> FeatureItem:
        """The probe input of answer ``ids`` after ``prompt_ids`` (module docstring); with ``sources`` (the
        source tokens' positions in the prompt) its lookback ratios too (`spanuq.llm.lookback`)."""
        prompt_ids, ids = list(prompt_ids), list(ids)
        if not ids:
            raise ValueError("PrefixCache.read needs an answer of at least one token")
        shared = [self._shared(c.prompt, prompt_ids) for c in self._caps]
        best = max(range(len(shared)), key=shared.__getitem__, default=None)
        if best is not None and shared[best] >= min(MIN_SHARED, len(prompt_ids) - 1):
            cap = self._caps.pop(best)
            if cap.prompt != prompt_ids:
                self.fed += cap.reprompt(prompt_ids, sources, ids)
            else:
                cap.look_at(sources)
        else:
            cap = StateCapture(self.model, prompt_ids, self.layers, self.out_dtype, sources, ids)
            self.fed += len(prompt_ids) + len(cap.ids)
            if len(self._caps) >= self.entries:
                self._caps.pop(0)  # the least recently used
        self._caps.append(cap)
        self.fed += cap.sync(ids)
        return cap.item()

    def clear(self) -> None:
        self._caps.clear()
