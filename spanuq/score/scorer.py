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

`score_many` runs three steps over a list of `Pending` items (`spanuq.score.reading`): (1) `_prepare`
(here): check the input, generate the answer when none is given, tokenise it once (token ids and character
offsets); (2) `StateReader.read` (`spanuq.score.reading`): one teacher-forced pass per answer whose states
were not captured while generating, batched (answers past the backbone's context in chunked passes);
(3) `predict_all` (`spanuq.score.results`): the probe over all answers (windows of its trained length for
longer ones), through the one post-processing step every consumer uses (`spanuq.model.postprocess`): û
calibrated with the checkpoint's temperature, the kept queries, spans grown to whole words as exact character
offsets of the original string; then `assemble` makes each answer's `ScoreResult` (status, conformal).

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
from dataclasses import replace
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import torch
from tqdm.auto import tqdm

from ..config import Config, load_config
from ..llm.loading import count_tokens, token_offsets
from ..llm.states import FeatureItem, generate_with_states
from ..model.checkpoint import Checkpoint, load_checkpoint
from ..reader.backbone import Backbone
from ..reader.read import Reader
from . import grounded
from .errors import GenerationError, InputError, check_input
from .generation import Generation
from .reading import Pending, StateReader
from .results import assemble, predict_all
from .schema import ScoreRequest, ScoreResult, StreamUpdate
from .settings import ScoringSettings, resolve as resolve_settings
from .shipped import describe
from .source import choose_probe, resolve_checkpoint
from .sourced import read_with_sources, reader_folder
from .stream import score_stream
from .views import probe_line

__all__ = ["SpanUQ", "InputError", "GenerationError", "resolve_checkpoint"]
log = logging.getLogger(__name__)
FALLBACK_CONTEXT = 4096  # the context when the backbone's config names none


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
        # answers with sources are read by the reader beside the probe when there is one (`spanuq.score.sourced`):
        # its calibrations, fitted on real dev items, are the with-sources ones
        folder = reader_folder(checkpoint)
        self.reader = None if folder is None else Reader.load(folder)
        if self.reader is not None:  # a reader trained with the backbone's readings takes them from this backbone
            self.reader.backbone = Backbone(backbone, tokenizer, self.system_prompt)
        fitted = ckpt.calibration if self.reader is None else replace(ckpt.calibration,
                                                                        grounded=self.reader.calibration or None)
        self.fitted = fitted  # as fitted on dev, before any threshold given below
        # fitted on dev and carried by the checkpoint; a threshold given here or in score.validity_threshold wins
        self.calibration = fitted.with_threshold(threshold if threshold is not None else cfg.score.validity_threshold)
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
        self.reading = StateReader(self)  # step 2, with its prefix cache (`spanuq.score.reading`)

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
                    results[i] = assemble(self, item, None, [], 0.0)
                    bar.update(1)
            except (InputError, GenerationError) as e:
                results[i] = e
                bar.update(1)
        ready = [i for i, r in enumerate(results) if r is None]
        if self.reader is not None:  # answers with sources: read by the reader (`spanuq.score.sourced`)
            for i in [i for i in ready if pending[i].passages is not None]:
                with self.lock:
                    results[i] = read_with_sources(self, pending[i])
                bar.update(1)
            ready = [i for i in ready if results[i] is None]
        units = [(i, w) for i in ready for w in self._window_items(pending[i])]  # one per window of sources
        with self.lock:
            self.reading.read([w for _, w in units if w.states is None])  # 2. teacher-forced passes
            self.reading.read_names([w for _, w in units])  # with sources: full names read by the surname too
            if ready:  # 3. the probe
                preds, probe_s = predict_all(self, [w for _, w in units])
                per: dict[int, list[ScoreResult]] = {}
                for (i, w), (pred, failed) in zip(units, preds):
                    per.setdefault(i, []).append(assemble(self, w, pred, failed, probe_s))
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
                if r.response is None or self.reader is None:  # the backbone answers after, or reads, the sources
                    self._windows(item, len(item.ids) + 1 if r.response is not None else self.cfg.score.max_new_tokens)
                else:  # the reader reads every passage (`spanuq.score.sourced`); the backbone reads none of them
                    item.chat, item.n_prompt = self._chat(r.prompt)
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

    def surprisal_after(self, chat: str, text: str) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """(token surprisal, character offsets) of ``text`` read after the rendered ``chat`` (on the prefix cache
        when ``score.prefix_cache``: the sources of ``chat`` are not read again; `StateReader.surprisal_after`)."""
        return self.reading.surprisal_after(chat, text)

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
