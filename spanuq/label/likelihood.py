"""Likelihood votes: the backbone's own probability of a claim, counted as pseudo-samples.

Self-consistency estimates *would the model say this claim again?* from S sampled
answers: a vote of 0 or 1 each, so u* moves in steps of 1/S (five samples: six values).
The same backbone gives, in one teacher-forced pass over the greedy answer y, the
probability of the claim's own tokens where it said them:

    p̄_k = exp( (1/|A_k|) Σ_{t ∈ A_k} log p(y_t | x, y_<t) )      A_k: the tokens of claim k's anchor

(a geometric mean, so a long anchor is not penalised for its length).  p̄_k is the expected
vote of one more answer that went the greedy way up to the claim; the offline teacher counts
it as w pseudo-samples beside the S real ones (`records.soft_label`):

    u*_k = 1 − (Σ_s support_s(k) + w · p̄_k) / (S + w)

It refines the coarse vote where the samples tie, and weighs a claim the model was unsure of
when it said it.  Measured with the label-truth check (`truth.py`; README "Labels"): on the
cpu-full run's answer slots the held-out AUROC rises with w up to a plateau; w = 0 is the
paper's Eq. 11.  The pass is the one the extract stage makes (same chat prompt, same canonical
tokens), run here only for answers not yet in the label cache.
"""
from __future__ import annotations

import numpy as np

from ..config import Config
from ..pipeline.records import Generation


class AnchorLikelihood:
    """``probs(gen, spans) -> [p̄_k]`` for character spans of ``gen.greedy.text`` (the backbone loads on first use)."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self._model = self._tok = None

    def _load(self) -> None:
        if self._model is None:
            from ..llm.loading import load_backbone

            self._model, self._tok = load_backbone(self.cfg)

    def token_logprobs(self, gen: Generation) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """log p(y_t | x, y_<t) of each canonical token of the greedy answer, and its character offsets."""
        from ..llm.loading import token_offsets
        from ..llm.states import token_logprobs

        self._load()
        ids, offsets = token_offsets(self._tok, gen.greedy.text)
        if not ids:
            return np.zeros(0), []
        prompt_ids = self._tok(gen.chat_prompt, add_special_tokens=False)["input_ids"]
        return token_logprobs(self._model, prompt_ids, ids), offsets

    def probs(self, gen: Generation, spans: list[tuple[int, int]]) -> list[float | None]:
        """p̄ of each (start, end) character span; None for a span that covers no token."""
        if not spans:
            return []
        logp, offsets = self.token_logprobs(gen)
        out: list[float | None] = []
        for start, end in spans:
            toks = [t for t, (s, e) in enumerate(offsets) if e > start and s < end]
            out.append(float(np.exp(logp[toks].mean())) if toks else None)
        return out
