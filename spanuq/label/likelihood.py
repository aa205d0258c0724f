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
when it said it.  A large w lifts the label-truth check (`truth.py`), but then the labels are
mostly the one-pass cue itself and a probe trained on them did no better on human labels
(docs/labels.md "Likelihood votes", figures in docs/results.md), so the default is w = 0 (the
paper's Eq. 11).  The pass is the extract stage's (same chat prompt, same canonical tokens), batched, run
only for the answers not yet in the label cache (`prefetch`).
"""
from __future__ import annotations

import numpy as np
from tqdm.auto import tqdm

from ..config import Config
from ..pipeline.records import Generation


class AnchorLikelihood:
    """``probs(gen, spans) -> [p̄_k]`` for character spans of ``gen.greedy.text`` (the backbone loads on first use)."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self._model = self._tok = None
        self._memo: dict[tuple[str, str], tuple[np.ndarray, list[tuple[int, int]]]] = {}

    def _load(self) -> None:
        if self._model is None:
            from ..llm.loading import load_backbone

            self._model, self._tok = load_backbone(self.cfg)

    def prefetch(self, gens: list[Generation], progress: bool = True) -> None:
        """Run the pass for ``gens`` in batches of ``extract.batch_size`` (kept for `probs`: ~50 floats an answer)."""
        from ..llm.loading import token_offsets
        from ..llm.states import token_logprobs

        todo = [g for g in gens if g.greedy.text.strip() and self._key(g) not in self._memo]
        if not todo:
            return
        self._load()
        todo.sort(key=lambda g: len(g.greedy.token_ids))  # less padding per batch
        bs = max(1, self.cfg.extract.batch_size)
        for s in tqdm(range(0, len(todo), bs), desc="likelihood", unit="batch", disable=not progress):
            batch = todo[s: s + bs]
            enc = [token_offsets(self._tok, g.greedy.text) for g in batch]
            prompts = [self._tok(g.chat_prompt, add_special_tokens=False)["input_ids"] for g in batch]
            logps = token_logprobs(self._model, prompts, [ids for ids, _ in enc], self._tok.pad_token_id or 0)
            for g, (_, offsets), logp in zip(batch, enc, logps):
                self._memo[self._key(g)] = (logp, offsets)

    def probs(self, gen: Generation, spans: list[tuple[int, int]]) -> list[float | None]:
        """p̄ of each (start, end) character span; None for a span that covers no token."""
        if not spans:
            return []
        self.prefetch([gen], progress=False)
        logp, offsets = self._memo.get(self._key(gen), (np.zeros(0), []))
        out: list[float | None] = []
        for start, end in spans:
            toks = [t for t, (s, e) in enumerate(offsets) if e > start and s < end]
            out.append(float(np.exp(logp[toks].mean())) if toks else None)
        return out

    @staticmethod
    def _key(gen: Generation) -> tuple[str, str]:
        return gen.chat_prompt, gen.greedy.text
