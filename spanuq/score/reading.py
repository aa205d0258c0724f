"""Step 2 of `SpanUQ.score_many`: the backbone's states of each answer, read after its prompt.

`Pending` is one item on its way through the steps (`spanuq.score.scorer`); `StateReader` reads the states of
the items whose states were not captured while generating:

* answers without sources: teacher-forced passes, shortest first in batches of ``score.batch_size``; an answer
  longer than the probe's window alone, in chunked passes past the backbone's context (`spanuq.llm.chunked`);
* answers with sources: on the backbone's KV cache of the last prompts read (`spanuq.llm.prefix`,
  ``score.prefix_cache``), so sources read for an earlier answer are not read again; where the with-sources
  mapping reads the heads' lookback ratios (`spanuq.llm.lookback`), the same pass keeps them;
* names: an answer read with sources whose mapping shows each fact on its own has each person named in full
  read by the surname too, the lower reading kept in its token surprisal (`spanuq.score.names`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from ..llm.chunked import extract_long
from ..llm.loading import token_ids, token_offsets
from ..llm.states import FeatureItem, extract_batch
from ..model.postprocess import Answer
from .schema import ScoreRequest


@dataclass
class Pending:
    """One item of `score_many` on its way through the steps."""

    request: ScoreRequest
    t_start: float
    chat: str = ""
    n_prompt: int = 0
    answer: str = ""
    ids: list[int] = field(default_factory=list)  # the answer's one tokenisation
    offsets: list[tuple[int, int]] = field(default_factory=list)
    source: str = "given"  # or "generated"
    generator: str | None = None
    truncated: bool = False
    states: FeatureItem | None = None
    generate_s: float | None = None
    backbone_s: float = 0.0
    chat_given: str | None = None  # the rendered conversation to read the answer after (`score_many`'s chats)
    probe_spans: list[tuple[int, int]] | None = None  # the probe's shown token spans, before facts were split out
    passages: list | None = None  # the sources (`spanuq.context.passages.Passage`), None: scored without
    windows: list = field(default_factory=list)  # the sources' windows (`RenderedChat`), the first one's chat is `chat`
    window: int = 0  # which of them this item reads the answer after

    def readable_answer(self) -> Answer | None:
        """The answer's text and token offsets, when its states were computed on those tokens."""
        same = self.states.token_ids.tolist() == self.ids
        return Answer(self.answer, self.offsets) if same else None


class StateReader:
    """The states step of one `SpanUQ` (module docstring); it owns the scorer's prefix cache.  Everything else
    (backbone, tokenizer, settings, calibration) is read from the scorer when a step runs."""

    def __init__(self, uq):
        self.uq = uq
        self.prefix = None  # the KV caches of the last prompts with sources (`spanuq.llm.prefix`), made when needed

    def read(self, todo: list[Pending]) -> None:
        """The answers' states in teacher-forced passes, shortest first in batches of ``score.batch_size``; an
        answer longer than the probe's window alone, chunked past the context.  An answer with sources is read on
        the KV cache of its prompt (``score.prefix_cache``): the sources an earlier answer was read after are not
        read again.  Where its with-sources mapping reads the heads' lookback ratios (`spanuq.llm.lookback`), the
        same pass keeps them (under eager attention)."""
        uq = self.uq
        if uq.cfg.score.prefix_cache:
            self._read_on_prefix([it for it in todo if it.passages is not None])
            todo = [it for it in todo if it.passages is None]
        looks = [it for it in todo if self.sources_of(it) is not None]
        if looks:
            self._read_looking_back(looks)
            todo = [it for it in todo if self.sources_of(it) is None]
        todo = sorted(todo, key=lambda it: len(it.ids))
        for item in [it for it in todo if len(it.ids) > uq.window]:
            t0 = time.perf_counter()
            item.states = extract_long(uq.model, uq.tok, item.chat, item.ids, uq.layers, uq.out_dtype, uq.max_context)
            item.backbone_s = time.perf_counter() - t0
        short = [it for it in todo if len(it.ids) <= uq.window]
        bs = max(1, uq.cfg.score.batch_size)
        for s in range(0, len(short), bs):
            batch = short[s: s + bs]
            t0 = time.perf_counter()
            feats = extract_batch(uq.model, uq.tok, [it.chat for it in batch], [it.ids for it in batch],
                                  uq.layers, uq.out_dtype)
            share = (time.perf_counter() - t0) / len(batch)
            for item, f in zip(batch, feats):
                item.states, item.backbone_s = f, share

    def surprisal_after(self, chat: str, text: str) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """(token surprisal, character offsets) of ``text`` read after the rendered ``chat`` (on the prefix cache
        when ``score.prefix_cache``: the sources of ``chat`` are not read again)."""
        uq = self.uq
        ids, offsets = token_offsets(uq.tok, text)
        prompt = token_ids(uq.tok, chat)
        if uq.cfg.score.prefix_cache:
            f = self.prefix_cache().read(prompt, ids)
        else:
            f = extract_batch(uq.model, uq.tok, [chat], [ids], uq.layers, uq.out_dtype)[0]
        return f.surprisal.float().numpy(), offsets

    def read_names(self, todo: list[Pending]) -> None:
        """Answers read with sources whose mapping shows each fact on its own: each person named in full read by
        the surname too, the lower reading kept in the token surprisal (`spanuq.score.names`).  Without spaCy
        facts are not shown on their own (`spanuq.score.facts` says so once), and no name is read."""
        from ..label.units import load_spacy
        from .names import read_names

        uq = self.uq
        todo = [it for it in todo if it.passages is not None and it.states is not None
                and it.states.surprisal is not None and it.readable_answer() is not None
                and uq.calibration.for_source(it.source, grounded=True).fact_spans]
        if not todo:
            return
        try:
            nlp = load_spacy(uq.cfg.label.spacy_model)
        except (ImportError, RuntimeError):
            return
        for item in sorted(todo, key=lambda it: it.chat):  # as `_read_on_prefix` read them: each prompt once
            st, t0 = item.states, time.perf_counter()
            s = read_names(nlp, item.answer, item.offsets, st.surprisal.float().numpy(),
                           [p.text for p in item.passages], lambda piece: self.surprisal_after(item.chat, piece))
            item.states = replace(st, surprisal=torch.from_numpy(s).to(st.surprisal.dtype))
            item.backbone_s += time.perf_counter() - t0

    def sources_of(self, item: Pending) -> list[int] | None:
        """The source tokens' positions in the item's input, where its mapping reads lookback ratios; else None."""
        uq = self.uq
        if item.passages is None or not uq.calibration.for_source(item.source, grounded=True).reads_lookback:
            return None
        from ..llm.lookback import source_positions

        return source_positions(uq.tok, item.chat, item.windows[item.window].read)

    def _read_looking_back(self, todo: list[Pending]) -> None:
        """`read` of answers whose lookback ratios are read, without the prefix cache: one pass each."""
        from ..llm.capture import StateCapture

        uq = self.uq
        for item in todo:
            t0 = time.perf_counter()
            cap = StateCapture(uq.model, token_ids(uq.tok, item.chat), uq.layers, uq.out_dtype, self.sources_of(item))
            cap.sync(item.ids)
            item.states, item.backbone_s = cap.item(), time.perf_counter() - t0

    def prefix_cache(self):
        """The backbone's KV cache of the last ``score.prefix_cache`` prompts read (`spanuq.llm.prefix`)."""
        from ..llm.prefix import PrefixCache

        uq = self.uq
        if self.prefix is None or self.prefix.entries != uq.cfg.score.prefix_cache:
            self.prefix = PrefixCache(uq.model, uq.layers, uq.out_dtype, uq.cfg.score.prefix_cache)
        return self.prefix

    def _read_on_prefix(self, todo: list[Pending]) -> None:
        """`read` of answers with sources, one by one on the cache of the last prompts read (items after the same
        window of sources one after another)."""
        cache = self.prefix_cache()
        for item in sorted(todo, key=lambda it: it.chat):
            t0 = time.perf_counter()
            item.states = cache.read(token_ids(self.uq.tok, item.chat), item.ids, self.sources_of(item))
            item.backbone_s = time.perf_counter() - t0
