"""`SpanUQ`: which parts of an answer are likely wrong, for a prompt or a (prompt, answer) pair.

    from spanuq import SpanUQ
    uq = SpanUQ.load()                                   # data/<backbone>/probe of a finished `make repro`, else shipped
    uq = SpanUQ.load("shipped")                          # the probe shipped in spanuq/probes/<backbone>/
    uq.probe_source                                      # "shipped smollm2-135m probe of <date>, sha256 <12> (...)"
    uq = SpanUQ.load("models:/spanuq-smollm2-135m@champion")
    uq = SpanUQ.load("shipped", overrides={"generate.stop": []})  # a setting other than the probe's (reported)
    r = uq.score("Who was Marie Curie?")                 # the backbone answers, then the probe scores
    r = uq.score("Who was Marie Curie?", response="…")   # any answer, one teacher-forced pass
    r = uq.score("…", response="…", answer_source="generated")  # this backbone's answer, written elsewhere
    r = uq.score("When was it finished?", response="…", context=["The tower was finished in 1889.", …])
    rs = uq.score_many([{"prompt": …, "response": …}, …])

Which probe scores is `spanuq.score.source`; what it scores with (system prompt, decoding,
precision, window, languages) comes from its checkpoint, `spanuq.score.settings`.  The
checkpoint names its backbone (and fused layers); that backbone is loaded with it.

`score_many` runs three steps over a list of `Pending` items: (1) `_prepare`: check the input,
generate the answer when none is given, tokenise it once (token ids and character offsets);
(2) `_read_states`: one teacher-forced pass per answer whose states were not captured while
generating, batched (answers past the backbone's context in chunked passes); (3) `_probe`: the
probe over all answers (windows of its trained length for longer ones), through the one
post-processing step every consumer uses (`spanuq.model.postprocess`): û calibrated with the
checkpoint's temperature, the kept queries, spans grown to whole words as exact character
offsets of the original string.

With sources (``context``), step 1 renders them into the backbone's input (`spanuq.context.render`), in
windows when they pass the budget; steps 2 and 3 read the answer after each window, and the windows'
results are combined (`spanuq.score.grounded`: a span's û is its lowest over windows).  Step 2 reads such an
answer on the backbone's KV cache of its prompt (`spanuq.llm.prefix`, ``score.prefix_cache``): sources read for
an earlier answer are not read again.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import torch
from tqdm.auto import tqdm

from ..config import Config, load_config
from ..llm.chunked import extract_long
from ..llm.loading import count_tokens, token_ids, token_offsets
from ..llm.states import FeatureItem, extract_batch, generate_with_states
from ..model.checkpoint import Checkpoint, load_checkpoint
from . import grounded
from .answer_score import with_given_u_seq
from .facts import show_facts
from .generation import Generation
from ..model.postprocess import Answer, Prediction
from ..model.unknown import knowledge_entropy
from .errors import GenerationError, InputError, check_input
from .schema import ConformalDecision, ScoredSpan, ScoreRequest, ScoreResult, StreamUpdate, Timings
from .settings import ScoringSettings, resolve as resolve_settings
from .shipped import describe
from .source import choose_probe, resolve_checkpoint
from .views import probe_line
from .stream import score_stream
from .status import StatusCheck, assess, status_of
from .windows import plan_windows, predict_readable, readable

__all__ = ["SpanUQ", "InputError", "GenerationError", "resolve_checkpoint"]
log = logging.getLogger(__name__)
FALLBACK_CONTEXT = 4096  # the context when the backbone's config names none


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


class SpanUQ:
    """One probe + its frozen backbone.  Threads may share one: the backbone, the tokenizer and the probe are
    used under ``lock`` (held for model work only, never while the llama.cpp server generates), so the
    service's lanes (`spanuq.score.worker`) score given answers while another lane waits on a generation."""

    def __init__(self, ckpt: Checkpoint, cfg: Config, backbone, tokenizer, checkpoint: Path,
                 threshold: float | None = None, settings: ScoringSettings | None = None):
        self.probe, self.cfg = ckpt.probe, cfg
        self.model, self.tok = backbone, tokenizer
        self.checkpoint = checkpoint
        self.probe_source = describe(checkpoint)  # which probe this is, in one line (shipped or trained here)
        self.probe_note: str | None = None  # why the default did not take a probe trained here
        self.settings = settings
        self.backbone_name = cfg.backbone.name
        self.layers = list(cfg.backbone.layers)
        self.system_prompt = cfg.backbone.system_prompt if settings else ckpt.extra.get(
            "system_prompt", cfg.backbone.system_prompt)
        self.extra = dict(ckpt.extra)  # the checkpoint's facts (backbone, layers, dev metrics, ...)
        self.fitted = ckpt.calibration  # as fitted on dev, before any threshold given below
        # fitted on dev and carried by the checkpoint; a threshold given here or in score.validity_threshold wins
        self.calibration = ckpt.calibration.with_threshold(
            threshold if threshold is not None else cfg.score.validity_threshold)
        self.threshold = self.calibration.validity_threshold
        self.out_dtype = getattr(torch, cfg.extract.dtype)  # the precision the probe was trained on
        # the one context: the backbone's, which the managed llama.cpp server is started with too
        self.max_context = int(getattr(backbone.config, "max_position_embeddings", 0) or 0) or FALLBACK_CONTEXT
        # answers longer than the probe's trained length are read in windows (score/windows.py)
        self.window = cfg.score.window_tokens or int(self.extra.get("window_tokens") or cfg.generate.max_new_tokens)
        self.lock = threading.RLock()  # the backbone, tokenizer and probe: one thread at a time
        self.generation = Generation(cfg, self.backbone_name, self.max_context, self.lock)  # how it writes answers
        self.guarantee = None  # the conformal threshold of score.conformal_alpha (spanuq.score.guarantee)
        if cfg.score.conformal_alpha is not None:
            from . import guarantee as store

            s = cfg.score
            self.guarantee = store.load(checkpoint, s.conformal_guarantee, s.conformal_alpha, s.conformal_delta)
        self._prefix = None  # the KV caches of the last prompts with sources (`spanuq.llm.prefix`), made when needed

    @property
    def generator(self) -> str:
        """``score.generator`` (``auto`` until the first generation settles it: `Generation.resolve`)."""
        return self.generation.kind

    @generator.setter
    def generator(self, kind: str) -> None:
        self.generation.kind = kind

    # ---------------------------------------------------------------- loading
    @classmethod
    def load(cls, source: str | Path | None = None, *, cfg: Config | None = None,
             params: str | Path | None = "params.yaml", generator: str | None = None,
             threshold: float | None = None, device: str = "cpu", overrides: dict | None = None) -> "SpanUQ":
        """From a checkpoint folder, an MLflow model URI, ``"shipped"``, or (None) the probe a finished
        pipeline run trained here, else the shipped one (`spanuq.score.source`).  The probe's own scoring
        settings apply; ``overrides`` (dotted keys) and the explicit ``score:`` keys of ``cfg`` / ``params``
        win over them (`spanuq.score.settings`)."""
        from ..llm.loading import load_backbone
        from ..llm.presets import fused_layers, get_preset

        if cfg is None:
            cfg = load_config(params if params and Path(params).exists() else None)
        choice = choose_probe(source, cfg)
        ckpt = load_checkpoint(choice.path, device=device)
        facts = {k: v for k, v in (("backbone.name", ckpt.extra.get("backbone")),
                                   ("backbone.layers", ckpt.extra.get("layers"))) if v}
        asked = {**(overrides or {}), **({"score.generator": generator} if generator else {})}
        cfg, settings = resolve_settings(cfg, ckpt.extra, {**asked, **facts})
        cfg.backbone.layers = fused_layers(cfg)
        d = get_preset(cfg.backbone.name).d_model
        if ckpt.d_model != d:
            raise ValueError(f"{choice.path}: the probe reads d_model={ckpt.d_model} states, {cfg.backbone.name} has {d}")
        model, tok = load_backbone(cfg)
        uq = cls(ckpt, cfg, model, tok, choice.path, threshold, settings)
        uq.probe_source = describe(choice.path, source)
        uq.probe_note = choice.note
        log.info("SpanUQ loaded the %s; %s", uq.probe_source, settings.describe())
        return uq

    def probe_line(self) -> str:
        """Which probe scores and how to choose another, in one line (shown by every view)."""
        return probe_line(self.probe_source)

    def close(self) -> None:
        self.generation.close()

    def __enter__(self) -> "SpanUQ":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---------------------------------------------------------------- checks
    def check(self, prompt: str, response: str | None, context: list | None = None) -> None:
        """Raise `InputError` for what cannot be scored, before any model call."""
        check_input(prompt, response, self.cfg.score)
        if context is not None:
            grounded.checked_passages(context, self.cfg.score)

    def _chat(self, prompt: str) -> tuple[str, int]:
        from ..llm.loading import chat_prompt

        chat = chat_prompt(self.tok, prompt, self.system_prompt)
        return chat, count_tokens(self.tok, chat)

    def _check_context(self, n_prompt: int, n_response: int, what: str) -> None:
        """The prompt must leave room in the context (the backbone's, which the llama.cpp server shares):
        for the generated answer's budget, or (a given answer) for chunks of it."""
        if n_prompt + n_response > self.max_context:
            raise InputError(f"{what}: the prompt ({n_prompt:,} tokens) and {n_response:,} answer tokens exceed "
                             f"{self.backbone_name}'s context of {self.max_context:,} tokens; shorten the prompt", 422)

    # ---------------------------------------------------------------- generation
    def sample(self, texts: list[str], n: int, max_new_tokens: int, seed: int = 0) -> list[list[str]]:
        """``n`` sampled continuations of each raw text (a chat prompt, possibly with the start of an
        answer after it), at ``generate.temperature`` / ``top_p`` with its stop strings, by the backbone's
        generator (`Generation.resolve`); a failure raises `GenerationError` (nothing is kept)."""
        return self.generation.sample(texts, n, max_new_tokens, self.model, self.tok, seed)

    def refine(self, prompt: str, response: str | None = None, mode: str = "regenerate",
               threshold: float | None = None, answer_source: str | None = None, context: list | None = None):
        """Act on the spans whose û is above ``threshold`` (``score.refine_threshold``, else the answer's
        likely-wrong threshold): ``flag`` them, ``drop`` their sentences, or ``regenerate`` them
        (`spanuq.score.refine`, docs/refine.md); ``answer_source`` and ``context`` as in `score`."""
        from .refine import refine

        return refine(self, prompt, response, mode, threshold, answer_source, context)

    # ---------------------------------------------------------------- scoring
    def score(self, prompt: str, response: str | None = None, answer_source: str | None = None,
              context: list | None = None) -> ScoreResult:
        """Score ``response`` (any answer) or, without it, the backbone's own greedy answer.
        ``answer_source="generated"``: ``response`` is this backbone's own answer (generated elsewhere,
        e.g. by a server that serves it), calibrated as one; default ``given``.  ``context``: sources to
        read the answer against (passages: strings or ``{"text", "id"?, "title"?}``; docs/context.md)."""
        out = self.score_many([ScoreRequest(prompt=prompt, response=response, answer_source=answer_source,
                                            context=context)],
                              progress=False, return_errors=True)[0]
        if isinstance(out, Exception):
            raise out
        return out

    def score_many(self, items: Iterable[ScoreRequest | dict | str], progress: bool = True,
                   return_errors: bool = False, states: list[FeatureItem | None] | None = None,
                   chats: list[str | list[dict] | None] | None = None
                   ) -> list[ScoreResult | InputError | GenerationError]:
        """Score several items (prompt strings, ``{"prompt", "response"?}`` dicts or `ScoreRequest`s):
        answers are generated one by one, teacher-forced passes run in batches of
        ``score.batch_size``, the probe over all at once.  With ``return_errors`` an item
        that cannot be scored gives its `InputError` (or `GenerationError`) in its place;
        otherwise the first raises.
        A batch's pass time is shared evenly by its items in their timings.  ``states``: per item,
        its answer's states when already captured (`score_stream`), used when their tokens are
        the answer's canonical tokens, so no teacher-forced pass runs for it.  ``chats``: per item, the
        conversation the answer is read after (the OpenAI endpoint's multi-turn messages,
        `spanuq.score.openai.conversation`) instead of ``prompt`` under the system prompt: rendered (a string),
        or its messages, rendered here with the item's ``context`` (`spanuq.context.render`).
        An item with sources past the budget is read after each window of them and the results combined.
        An empty answer is not read at all: its result is ``unverified`` (`spanuq.score.status`)."""
        reqs = [ScoreRequest(prompt=x) if isinstance(x, str) else ScoreRequest.model_validate(x) for x in items]
        pending = [Pending(r, time.perf_counter(), chat_given=chats[i] if chats is not None else None)
                   for i, r in enumerate(reqs)]
        results: list = [None] * len(pending)
        bar = tqdm(total=len(pending), desc="score", unit="answer", disable=not progress)
        for i, item in enumerate(pending):  # 1. checks, answers, tokens
            try:
                self._prepare(item, states[i] if states is not None else None)
                if not item.ids:  # an empty answer: nothing to read, unverified
                    results[i] = self._result(item, None, [], 0.0)
                    bar.update(1)
            except (InputError, GenerationError) as e:
                results[i] = e
                bar.update(1)
        ready = [i for i, r in enumerate(results) if r is None]
        units = [(i, w) for i in ready for w in self._window_items(pending[i])]  # one per window of sources
        with self.lock:
            self._read_states([w for _, w in units if w.states is None])  # 2. teacher-forced passes
            self._read_names([w for _, w in units])  # with sources: full names read by the surname too
            if ready:  # 3. the probe
                preds, probe_s = self._probe([w for _, w in units])
                per: dict[int, list[ScoreResult]] = {}
                for (i, w), (pred, failed) in zip(units, preds):
                    per.setdefault(i, []).append(self._result(w, pred, failed, probe_s))
                for i in ready:
                    results[i] = per[i][0] if pending[i].passages is None else grounded.read_against(
                        *grounded.combine(per[i]))
                    bar.update(1)
        bar.close()
        if not return_errors:
            for r in results:
                if isinstance(r, Exception):
                    raise r
        return results

    def _prepare(self, item: Pending, captured: FeatureItem | None) -> None:
        """Step 1: check the input, generate the answer when none is given, tokenise it once; take
        ``captured`` states when they were read on exactly these tokens."""
        item.t_start = time.perf_counter()
        r = item.request
        self.check(r.prompt, r.response)  # the context is checked next
        with self.lock:  # the tokenizer: one thread at a time
            if r.context is not None:
                item.passages = grounded.checked_passages(r.context, self.cfg.score)
                if r.response is not None and r.response.strip():
                    item.ids, item.offsets = token_offsets(self.tok, r.response)
                self._windows(item, len(item.ids) + 1 if r.response is not None else self.cfg.score.max_new_tokens)
            elif isinstance(item.chat_given, str):
                item.chat, item.n_prompt = item.chat_given, count_tokens(self.tok, item.chat_given)
            elif item.chat_given is not None:
                from ..context.render import apply_template

                item.chat = apply_template(self.tok, item.chat_given)
                item.n_prompt = count_tokens(self.tok, item.chat)
            else:
                item.chat, item.n_prompt = self._chat(r.prompt)
        if r.response is None:
            if len(item.windows) > 1:
                raise InputError(f"the sources need {len(item.windows)} windows: the backbone answers with all of them "
                                 "in its input, so they must fit in one (score.context_tokens); give a response to "
                                 "score it against every window", 413)
            self._generate(item)
        else:
            self._check_context(item.n_prompt, 2 * self.window, "the response")  # room for chunks of it
            item.answer = r.response
            item.source = r.answer_source or "given"
        if not item.answer.strip():
            return  # nothing to tokenise or read: the result says the answer is empty
        if not item.ids:
            with self.lock:
                item.ids, item.offsets = token_offsets(self.tok, item.answer)
        if captured is not None and captured.token_ids.tolist() == item.ids:
            item.states = captured

    def _windows(self, item: Pending, answer_room: int) -> None:
        """The windows of the item's sources (`spanuq.context.render`) after its conversation."""
        messages = item.chat_given if isinstance(item.chat_given, list) else [
            {"role": "user", "content": item.request.prompt}]
        item.windows = grounded.windows_for(self.tok, messages, item.passages, self.system_prompt, self.max_context,
                                            answer_room, self.cfg.score)
        item.chat, item.n_prompt = item.windows[0].chat, item.windows[0].n_tokens

    @staticmethod
    def _window_items(item: Pending) -> list[Pending]:
        """The item read after each window of its sources (itself for the first; one item without sources)."""
        return [item] + [replace(item, chat=w.chat, n_prompt=w.n_tokens, states=None, window=k)
                         for k, w in enumerate(item.windows[1:], 1)]

    def _generate(self, item: Pending) -> None:
        """The backbone's greedy answer: llama.cpp, or transformers with its states captured as it goes."""
        budget = self.cfg.score.max_new_tokens
        self._check_context(item.n_prompt, budget, "generation")
        generator = self.generation.resolve()
        t0 = time.perf_counter()
        if generator == "hf":
            with self.lock:
                g = generate_with_states(self.model, self.tok, item.chat, self.layers, budget, self.out_dtype,
                                         stop=self.cfg.generate.stop)
            item.answer, item.truncated, item.states = g.text, g.truncated, g.item
        else:
            item.answer, item.truncated = self.generation.greedy(item.chat)
        item.generate_s, item.source, item.generator = time.perf_counter() - t0, "generated", generator

    def _read_states(self, todo: list[Pending]) -> None:
        """Step 2: the answers' states in teacher-forced passes, shortest first in batches of
        ``score.batch_size``; an answer longer than the probe's window alone, chunked past the context.
        An answer with sources is read on the KV cache of its prompt (``score.prefix_cache``): the sources
        an earlier answer was read after are not read again.  Where its with-sources mapping reads the heads'
        lookback ratios (`spanuq.llm.lookback`), the same pass keeps them (under eager attention)."""
        if self.cfg.score.prefix_cache:
            self._read_on_prefix([it for it in todo if it.passages is not None])
            todo = [it for it in todo if it.passages is None]
        looks = [it for it in todo if self._sources_of(it) is not None]
        if looks:
            self._read_looking_back(looks)
            todo = [it for it in todo if self._sources_of(it) is None]
        todo = sorted(todo, key=lambda it: len(it.ids))
        for item in [it for it in todo if len(it.ids) > self.window]:
            t0 = time.perf_counter()
            item.states = extract_long(self.model, self.tok, item.chat, item.ids, self.layers, self.out_dtype,
                                       self.max_context)
            item.backbone_s = time.perf_counter() - t0
        short = [it for it in todo if len(it.ids) <= self.window]
        bs = max(1, self.cfg.score.batch_size)
        for s in range(0, len(short), bs):
            batch = short[s: s + bs]
            t0 = time.perf_counter()
            feats = extract_batch(self.model, self.tok, [it.chat for it in batch], [it.ids for it in batch],
                                  self.layers, self.out_dtype)
            share = (time.perf_counter() - t0) / len(batch)
            for item, f in zip(batch, feats):
                item.states, item.backbone_s = f, share

    def surprisal_after(self, chat: str, text: str) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """(token surprisal, character offsets) of ``text`` read after the rendered ``chat`` (on the prefix cache
        when ``score.prefix_cache``: the sources of ``chat`` are not read again)."""
        ids, offsets = token_offsets(self.tok, text)
        prompt = token_ids(self.tok, chat)
        if self.cfg.score.prefix_cache:
            f = self._prefix_cache().read(prompt, ids)
        else:
            f = extract_batch(self.model, self.tok, [chat], [ids], self.layers, self.out_dtype)[0]
        return f.surprisal.float().numpy(), offsets

    def _read_names(self, todo: list[Pending]) -> None:
        """Answers read with sources whose mapping shows each fact on its own: each person named in full read by
        the surname too, the lower reading kept in the token surprisal (`spanuq.score.names`).  Without spaCy
        facts are not shown on their own (`spanuq.score.facts` says so once), and no name is read."""
        from ..label.units import load_spacy
        from .names import read_names

        todo = [it for it in todo if it.passages is not None and it.states is not None
                and it.states.surprisal is not None and self._answer(it) is not None
                and self.calibration.for_source(it.source, grounded=True).fact_spans]
        if not todo:
            return
        try:
            nlp = load_spacy(self.cfg.label.spacy_model)
        except (ImportError, RuntimeError):
            return
        for item in sorted(todo, key=lambda it: it.chat):  # as `_read_on_prefix` read them: each prompt once
            st, t0 = item.states, time.perf_counter()
            s = read_names(nlp, item.answer, item.offsets, st.surprisal.float().numpy(),
                           [p.text for p in item.passages], lambda piece: self.surprisal_after(item.chat, piece))
            item.states = replace(st, surprisal=torch.from_numpy(s).to(st.surprisal.dtype))
            item.backbone_s += time.perf_counter() - t0

    def _sources_of(self, item: Pending) -> list[int] | None:
        """The source tokens' positions in the item's input, where its mapping reads lookback ratios; else None."""
        if item.passages is None or not self.calibration.for_source(item.source, grounded=True).reads_lookback:
            return None
        from ..llm.lookback import source_positions

        return source_positions(self.tok, item.chat, item.windows[item.window].read)

    def _read_looking_back(self, todo: list[Pending]) -> None:
        """`_read_states` of answers whose lookback ratios are read, without the prefix cache: one pass each."""
        from ..llm.capture import StateCapture

        for item in todo:
            t0 = time.perf_counter()
            cap = StateCapture(self.model, token_ids(self.tok, item.chat), self.layers,
                               self.out_dtype, self._sources_of(item))
            cap.sync(item.ids)
            item.states, item.backbone_s = cap.item(), time.perf_counter() - t0

    def _prefix_cache(self):
        """The backbone's KV cache of the last ``score.prefix_cache`` prompts read (`spanuq.llm.prefix`)."""
        from ..llm.prefix import PrefixCache

        if self._prefix is None or self._prefix.entries != self.cfg.score.prefix_cache:
            self._prefix = PrefixCache(self.model, self.layers, self.out_dtype, self.cfg.score.prefix_cache)
        return self._prefix

    def _read_on_prefix(self, todo: list[Pending]) -> None:
        """`_read_states` of answers with sources, one by one on the cache of the last prompts read (items
        after the same window of sources one after another)."""
        cache = self._prefix_cache()
        for item in sorted(todo, key=lambda it: it.chat):
            t0 = time.perf_counter()
            item.states = cache.read(token_ids(self.tok, item.chat), item.ids,
                                 self._sources_of(item))
            item.backbone_s = time.perf_counter() - t0

    def _probe(self, items: list[Pending]) -> tuple[list[tuple[Prediction | None, list]], float]:
        """Step 3: the probe over every answer (windows of a long one; a window whose states are not
        finite is left out, `predict_readable`), each answer's û mapped by the calibration of its source
        (the backbone's own answer or a given one, `Calibration.for_source`; a given answer's û_seq from its
        spans, `spanuq.score.answer_score`); returns (prediction or
        None, the windows left out) per answer and each item's share of the time."""
        t0 = time.perf_counter()
        preds: list = [None] * len(items)
        for source, with_context in sorted({(it.source, it.passages is not None) for it in items}):
            idx = [k for k, it in enumerate(items) if (it.source, it.passages is not None) == (source, with_context)]
            cal = self.calibration.for_source(source, grounded=with_context)
            out = predict_readable(self.probe, [items[k].states for k in idx], cal,
                                   [self._answer(items[k]) for k in idx], window=self.window,
                                   batch_size=max(32, len(idx)), device=next(self.probe.parameters()).device)
            given = source == "given" and self.calibration.given is not None
            for k, (p, failed) in zip(idx, out):
                p = self._facts(items[k], p, cal)
                preds[k] = (with_given_u_seq(p) if given else p, failed)  # a given answer's score: its spans'

        return preds, (time.perf_counter() - t0) / len(items)

    def _facts(self, item: Pending, pred: Prediction | None, cal) -> Prediction | None:
        """``pred`` with each name, date and number of the answer shown as a span of its own, when the
        calibration of the answer's source says so (`spanuq.score.facts`: given answers)."""
        if pred is None or not cal.fact_spans:
            return pred
        st = item.states
        item.probe_spans = [(s.b, s.e) for s in pred.shown()]  # what the subject-unknown threshold was fitted on
        return show_facts(pred, self._answer(item), None if st.surprisal is None else st.surprisal.float().numpy(),
                          st.entropy.float().numpy(), cal, self.cfg.label.spacy_model,
                          None if st.lookback is None else st.lookback.float().numpy())

    def score_stream(self, prompt: str, *, every: int | None = None, at_clauses: bool | None = None,
                     generator: str | None = None, cancel=None, context: list | None = None) -> Iterator[StreamUpdate]:
        """Score the backbone's answer while it is generated: yields a `StreamUpdate` every ``every``
        tokens (default ``score.stream_every``) and at each clause end (``score.stream_at_clauses``),
        the last one (``done``) equal to ``score(prompt, response=answer, context=context)``.
        ``generator``: ``hf`` or ``llamacpp`` (default: as `score`); ``cancel``: a `threading.Event`
        that stops the generation (`spanuq.score.stream`); ``context``: sources, as in `score`."""
        every = self.cfg.score.stream_every if every is None else every
        at_clauses = self.cfg.score.stream_at_clauses if at_clauses is None else at_clauses
        return score_stream(self, prompt, every=every, at_clauses=at_clauses, generator=generator, cancel=cancel,
                            context=context)

    @staticmethod
    def _answer(item: Pending) -> Answer | None:
        """The answer's text and token offsets, when its states were computed on those tokens."""
        same = item.states.token_ids.tolist() == item.ids
        return Answer(item.answer, item.offsets) if same else None

    def _knowledge(self, item: Pending, spans: list[ScoredSpan]) -> dict:
        """What the ``subject_unknown`` rule reads of a given answer: the backbone's entropy before the
        spans the probe showed (before facts were split out of them, as the threshold was fitted) and
        the probe's threshold for it (`spanuq.model.unknown`); nothing for its own answers."""
        tau = (self.calibration.given or {}).get("unknown_entropy")
        if item.passages is not None:  # read with sources: the backbone need not know the subject
            return {"calibration": self.calibration.fitted_for(item.source, grounded=True)}
        if item.source != "given" or tau is None or item.states is None:
            return {}
        shown = item.probe_spans if item.probe_spans is not None else [(s.b, s.e) for s in spans]
        return {"knowledge_entropy": knowledge_entropy(item.states.entropy.float().numpy(), shown),
                "unknown_entropy": tau}

    def _result(self, item: Pending, pred: Prediction | None, failed: list[tuple[int, int]],
                probe_s: float) -> ScoreResult:
        """The record of one answer, with its status (`spanuq.score.status`) and, under a conformal
        threshold, what it keeps; ``pred`` None: no window could be read (or the answer is empty)."""
        answer = item.answer
        shown_by = self.calibration.for_source(item.source, item.passages is not None)  # its spans' cut, red line
        spans = [] if pred is None else [
            ScoredSpan(start=s.start, end=s.end, text=answer[s.start:s.end], b=s.b, e=s.e, u=s.u, u_raw=s.u_raw,
                       validity=s.validity, nu=s.nu) for s in pred.shown()]
        u_seq = None if pred is None else float(pred.u_seq)
        n_windows = len(plan_windows(len(item.ids), self.window)) if item.ids else 0
        unreadable = int((~readable(item.states.h, item.states.entropy)).sum()) if item.states is not None else 0
        reasons = assess(StatusCheck(
            answer=answer, backbone=self.backbone_name, probe_backbone=self.extra.get("backbone"),
            languages=self.cfg.score.languages, n_tokens=len(item.ids), unreadable_tokens=unreadable,
            failed_windows=[(item.offsets[s][0], item.offsets[e - 1][1]) for s, e in failed], n_windows=n_windows,
            prompt=item.request.prompt, u_seq=u_seq, spans=spans, extra=self._knowledge(item, spans)))
        conformal = None
        if self.guarantee is not None:
            from .guarantee import decide

            # the threshold was fitted on û of the backbone's own answers: a given answer's spans are
            # judged on that scale (the own-answer mapping of their raw û), not the given-answer one
            own = self.calibration.for_source("generated")
            u_fit = [s.u for s in spans] if item.source == "generated" else list(own.scores([s.u_raw for s in spans]))
            seq_fit = (u_seq if item.source == "generated" or pred is None or pred.u_seq_raw is None
                       else float(own.scores([pred.u_seq_raw])[0]))
            conformal = ConformalDecision(**decide(self.guarantee, u_fit, seq_fit, not reasons))
        return ScoreResult(prompt=item.request.prompt, answer=answer, answer_source=item.source,
                           backbone=self.backbone_name, probe=self.probe_source, generator=item.generator,
                           n_tokens=len(item.ids), truncated=item.truncated, u_seq=u_seq,
                           validity_threshold=shown_by.validity_threshold, spans=spans, flag_threshold=shown_by.flag,
                           status=status_of(reasons),
                           calibration_source=self.calibration.fitted_for(item.source, item.passages is not None),
                           **({} if item.passages is None else
                              grounded.context_fields(item.passages, item.windows[item.window], item.window)),
                           status_reasons=reasons, warnings=[r.message for r in reasons], conformal=conformal,
                           windows=n_windows,
                           timings=Timings(generate_s=None if item.generate_s is None else round(item.generate_s, 4),
                                           backbone_s=round(item.backbone_s, 4), probe_s=round(probe_s, 4),
                                           total_s=round(time.perf_counter() - item.t_start, 4)))
