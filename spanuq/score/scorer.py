"""`SpanUQ`: which parts of an answer are likely wrong, for a prompt or a (prompt, answer) pair.

    from spanuq import SpanUQ
    uq = SpanUQ.load()                                   # data/<backbone>/probe after `make repro`, else the shipped probe
    uq = SpanUQ.load("shipped")                          # the probe shipped in spanuq/probes/<backbone>/
    uq.probe_source                                      # "shipped smollm2-135m probe of <date>, sha256 <12> (...)"
    uq = SpanUQ.load("models:/spanuq-smollm2-135m@champion")
    r = uq.score("Who was Marie Curie?")                 # the backbone answers, then the probe scores
    r = uq.score("Who was Marie Curie?", response="…")   # any answer, one teacher-forced pass
    rs = uq.score_many([{"prompt": …, "response": …}, …])

The checkpoint names its backbone (and fused layers) in ``config.json``'s ``extra``; that
backbone is loaded with it.  The answer is tokenised once (its token ids and character
offsets); the probe's outputs go through the one post-processing step every consumer uses
(`spanuq.model.postprocess`): û calibrated with the checkpoint's temperature, u_raw, ν,
validity, û_seq, the kept queries (validity ≥ the checkpoint's threshold, duplicates
suppressed) and spans grown to whole words, as exact character offsets of the original string.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Iterable, Iterator

import torch
from tqdm.auto import tqdm

from ..config import Config, load_config
from ..data.language import language_warnings
from ..llm.chunked import extract_long
from ..llm.loading import token_offsets
from ..llm.states import FeatureItem, extract_batch, generate_with_states
from ..model.checkpoint import Checkpoint, load_checkpoint
from ..model.postprocess import Answer, Prediction
from .errors import GenerationError, InputError
from .schema import ScoredSpan, ScoreRequest, ScoreResult, StreamUpdate, Timings
from .shipped import SHIPPED, describe, shipped_dir
from .stream import score_stream
from .windows import plan_windows, predict_windows, window_length

log = logging.getLogger(__name__)
LLAMACPP_CTX = 4096  # the managed llama.cpp server's context (prompt + generated tokens)


def resolve_checkpoint(source: str | Path | None, cfg: Config) -> Path:
    """A probe folder from a path, an MLflow model URI (``models:/spanuq-<backbone>@champion``,
    ``runs:/<id>/probe``), ``"shipped"`` (the probe shipped for the configured backbone) or,
    with None, the pipeline's ``data/<backbone>/probe`` when one was trained here, else the
    shipped probe."""
    if source is None:
        from ..pipeline.paths import StagePaths

        path = StagePaths.from_config(cfg).probe
        return path if (path / "config.json").exists() else shipped_dir(cfg.backbone.name)
    text = str(source)
    if text == SHIPPED:
        return shipped_dir(cfg.backbone.name)
    if text.startswith(("models:/", "runs:/")) or "://" in text:
        import mlflow
        import yaml

        from ..pipeline.tracking import tracking_uri

        mlflow.set_tracking_uri(tracking_uri(cfg))
        mlflow.set_registry_uri(tracking_uri(cfg))
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=text))
        mlmodel = yaml.safe_load((local / "MLmodel").read_text())
        art = mlmodel["flavors"]["python_function"].get("artifacts", {}).get("checkpoint")
        if not art:
            raise ValueError(f"{text}: not a SpanUQ model (no `checkpoint` artifact)")
        return local / art["path"]
    path = Path(text)
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"{path}: not a probe checkpoint (no config.json)")
    return path


class SpanUQ:
    """One probe + its frozen backbone.  Not thread-safe: the service queues requests onto one."""

    def __init__(self, ckpt: Checkpoint, cfg: Config, backbone, tokenizer, checkpoint: Path,
                 threshold: float | None = None):
        self.probe, self.cfg = ckpt.probe, cfg
        self.model, self.tok = backbone, tokenizer
        self.checkpoint = checkpoint
        self.probe_source = describe(checkpoint)  # which probe this is, in one line (shipped or trained here)
        self.backbone_name = cfg.backbone.name
        self.layers = list(cfg.backbone.layers)
        self.system_prompt = ckpt.extra.get("system_prompt", cfg.backbone.system_prompt)
        self.extra = dict(ckpt.extra)  # the checkpoint's facts (backbone, layers, dev metrics, ...)
        self.fitted = ckpt.calibration  # as fitted on dev, before any threshold given below
        # fitted on dev and carried by the checkpoint; a threshold given here or in score.validity_threshold wins
        self.calibration = ckpt.calibration.with_threshold(
            threshold if threshold is not None else cfg.score.validity_threshold)
        self.threshold = self.calibration.validity_threshold
        self.out_dtype = getattr(torch, cfg.extract.dtype)  # the precision the probe was trained on
        self.max_context = int(getattr(backbone.config, "max_position_embeddings", 0) or 0) or None
        # answers longer than the probe's trained length are read in windows (score/windows.py)
        self.window = window_length(self.extra, cfg.generate.max_new_tokens, cfg.score.window_tokens)
        self.generator = cfg.score.generator
        self._server = None
        self._client = None

    # ---------------------------------------------------------------- loading
    @classmethod
    def load(cls, source: str | Path | None = None, *, cfg: Config | None = None,
             params: str | Path | None = "params.yaml", generator: str | None = None,
             threshold: float | None = None, device: str = "cpu") -> "SpanUQ":
        """From a checkpoint folder, an MLflow model URI, ``"shipped"``, or (None) the pipeline's
        probe when one was trained here, else the shipped one (`resolve_checkpoint`)."""
        from ..llm.loading import load_backbone
        from ..llm.presets import fused_layers, get_preset

        if cfg is None:
            cfg = load_config(params if params and Path(params).exists() else None)
        path = resolve_checkpoint(source, cfg)
        ckpt = load_checkpoint(path, device=device)
        bb = cfg.backbone.model_copy(update={k: v for k, v in (("name", ckpt.extra.get("backbone")),
                                                                ("layers", ckpt.extra.get("layers"))) if v})
        score = cfg.score if generator is None else cfg.score.model_copy(update={"generator": generator})
        cfg = cfg.model_copy(update={"backbone": bb, "score": score})
        cfg.backbone.layers = fused_layers(cfg)
        d = get_preset(bb.name).d_model
        if ckpt.d_model != d:
            raise ValueError(f"{path}: the probe reads d_model={ckpt.d_model} states, {bb.name} has {d}")
        model, tok = load_backbone(cfg)
        uq = cls(ckpt, cfg, model, tok, path, threshold)
        uq.probe_source = describe(path, source)
        log.info("SpanUQ loaded the %s", uq.probe_source)
        return uq

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> "SpanUQ":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---------------------------------------------------------------- checks
    def check(self, prompt: str, response: str | None) -> None:
        """Raise `InputError` for what cannot be scored, before any model call."""
        s = self.cfg.score
        if not isinstance(prompt, str) or not prompt.strip():
            raise InputError("the prompt is empty")
        if len(prompt) > s.max_prompt_chars:
            raise InputError(f"the prompt has {len(prompt):,} characters; the limit is {s.max_prompt_chars:,} "
                             "(score.max_prompt_chars)", 413)
        if response is not None:
            if not isinstance(response, str) or not response.strip():
                raise InputError("the response is empty (leave it out to let the backbone answer)")
            if len(response) > s.max_response_chars:
                raise InputError(f"the response has {len(response):,} characters; the limit is "
                                 f"{s.max_response_chars:,} (score.max_response_chars)", 413)

    def _chat(self, prompt: str) -> tuple[str, int]:
        from ..llm.loading import chat_prompt

        chat = chat_prompt(self.tok, prompt, self.system_prompt)
        return chat, len(self.tok(chat, add_special_tokens=False)["input_ids"])

    def _check_context(self, n_prompt: int, n_response: int, what: str) -> None:
        """The prompt must leave room in the backbone's context: for the generated answer's budget,
        or (a given answer) for chunks of it — a longer answer is read in chunked passes."""
        if self.max_context and n_prompt + n_response > self.max_context:
            raise InputError(f"{what}: the prompt ({n_prompt:,} tokens) and {n_response:,} answer tokens exceed "
                             f"{self.backbone_name}'s context of {self.max_context:,} tokens; shorten the prompt", 422)

    # ---------------------------------------------------------------- generation
    def _generate_llamacpp(self, chat: str) -> tuple[str, bool]:
        from ..llm.llamacpp import ServerCrashed

        if self._server is not None and not self._server.alive():
            log.warning("%s; starting a new one", self._server.crash_report() or "the llama.cpp server stopped")
            self.close()
        try:
            if self._server is None:
                self._start_server()
            c = self._client.greedy([chat])[0]
        except ServerCrashed as e:
            self.close()
            raise GenerationError(f"generation failed: {e}") from e
        except Exception as e:  # noqa: BLE001 - this item fails, the others are scored
            if self._server is not None and not self._server.alive():
                report = self._server.crash_report()
                self.close()
                raise GenerationError(f"generation failed: {report}") from e
            raise GenerationError(f"generation failed: {type(e).__name__}: {e}") from e
        return c.text, c.finish_reason == "length"

    def _resolve_generator(self) -> str:
        """``auto`` → ``llamacpp`` once its server has proved itself here, else ``hf`` (one warning)."""
        if self.generator != "auto":
            return self.generator
        from ..llm.presets import get_preset

        if not get_preset(self.backbone_name).gguf_package:
            self.generator = "hf"
            return self.generator
        try:
            self._start_server()
            self.generator = "llamacpp"
        except (RuntimeError, TimeoutError, OSError) as e:  # ServerCrashed is a RuntimeError
            log.warning("score.generator=auto: the llama.cpp server cannot run on this machine (%s); "
                        "generating with transformers (hf) instead", str(e).splitlines()[0])
            self.close()
            self.generator = "hf"
        return self.generator

    def _start_server(self) -> None:
        """Start the managed llama.cpp server (it proves itself on a real prompt) and its client."""
        from ..generate.server import ServerGenerator
        from ..llm.llamacpp import LlamaCppServer
        from ..llm.loading import gguf_path
        from ..llm.presets import get_preset

        self._server = LlamaCppServer(gguf_path(get_preset(self.backbone_name)), n_ctx=LLAMACPP_CTX,
                                      n_threads=self.cfg.score.server_threads).start()
        g = self.cfg.generate.model_copy(update={"backend": "server", "server_url": self._server.base_url,
                                                 "max_new_tokens": self.cfg.score.max_new_tokens,
                                                 "api_key_env": None, "server_model": None})
        self._client = ServerGenerator(self.cfg.model_copy(update={"generate": g}), server=self._server)

    def sample(self, texts: list[str], n: int, max_new_tokens: int, seed: int = 0) -> list[list[str]]:
        """``n`` sampled continuations of each raw text (a chat prompt, possibly with the start of an
        answer after it), at ``generate.temperature`` / ``top_p`` with its stop strings, by the backbone's
        generator (`_resolve_generator`); a failure raises `GenerationError` (nothing is kept)."""
        from ..generate.hf import HFGenerator
        from ..generate.server import ServerGenerator

        g = self.cfg.generate.model_copy(update={"max_new_tokens": max_new_tokens,
                                                 "sample_max_new_tokens": max_new_tokens})
        seeds = [seed + 1_000 * i for i in range(len(texts))]
        try:
            if self._resolve_generator() == "llamacpp":
                if self._server is None or not self._server.alive():
                    self.close()
                    self._start_server()
                g = g.model_copy(update={"backend": "server", "server_url": self._server.base_url,
                                         "api_key_env": None, "server_model": None})
                gen = ServerGenerator(self.cfg.model_copy(update={"generate": g}), server=self._server)
            else:
                side = self.tok.padding_side
                gen = HFGenerator(self.cfg.model_copy(update={"generate": g}), self.model, self.tok)
            try:
                out = gen.sample(texts, n, seeds)
            finally:
                gen.close()
                if self.generator == "hf":
                    self.tok.padding_side = side
        except Exception as e:  # noqa: BLE001 - reported as the backbone's failure, nothing kept
            if self._server is not None and not self._server.alive():
                report = self._server.crash_report()
                self.close()
                raise GenerationError(f"generation failed: {report}") from e
            raise GenerationError(f"generation failed: {type(e).__name__}: {e}") from e
        return [[c.text for c in row] for row in out]

    def refine(self, prompt: str, response: str | None = None, mode: str = "regenerate",
               threshold: float | None = None):
        """Act on the spans whose û is above ``threshold`` (``score.refine_threshold``): ``flag`` them,
        ``drop`` their sentences, or ``regenerate`` them (`spanuq.score.refine`, docs/refine.md)."""
        from .refine import refine

        return refine(self, prompt, response, mode, threshold)

    # ---------------------------------------------------------------- scoring
    def score(self, prompt: str, response: str | None = None) -> ScoreResult:
        """Score ``response`` (any answer) or, without it, the backbone's own greedy answer."""
        out = self.score_many([ScoreRequest(prompt=prompt, response=response)], progress=False, return_errors=True)[0]
        if isinstance(out, Exception):
            raise out
        return out

    def score_many(self, items: Iterable[ScoreRequest | dict | str], progress: bool = True,
                   return_errors: bool = False, states: list[FeatureItem | None] | None = None
                   ) -> list[ScoreResult | InputError | GenerationError]:
        """Score several items (prompt strings, ``{"prompt", "response"?}`` dicts or `ScoreRequest`s):
        answers are generated one by one, teacher-forced passes run in batches of
        ``score.batch_size``, the probe over all at once.  With ``return_errors`` an item
        that cannot be scored gives its `InputError` (or `GenerationError`) in its place;
        otherwise the first raises.
        A batch's pass time is shared evenly by its items in their timings.  ``states``: per item,
        its answer's states when already captured (`score_stream`), used when their tokens are
        the answer's canonical tokens, so no teacher-forced pass runs for it."""
        reqs = [ScoreRequest(prompt=x) if isinstance(x, str) else ScoreRequest.model_validate(x) for x in items]
        n = len(reqs)
        results: list = [None] * n
        t_start = [time.perf_counter()] * n
        state: dict[int, dict] = {}
        bar = tqdm(total=n, desc="score", unit="answer", disable=not progress)
        for i, r in enumerate(reqs):  # 1. checks and answers
            t_start[i] = time.perf_counter()
            try:
                self.check(r.prompt, r.response)
                chat, n_prompt = self._chat(r.prompt)
                st = {"chat": chat, "gen_s": None, "bb_s": 0.0, "truncated": False, "item": None,
                      "source": "given", "generator": None}
                if r.response is None:
                    self._check_context(n_prompt, self.cfg.score.max_new_tokens, "generation")
                    generator = self._resolve_generator()
                    if generator == "llamacpp" and n_prompt + self.cfg.score.max_new_tokens > LLAMACPP_CTX:
                        raise InputError(f"the prompt has {n_prompt:,} tokens; with {self.cfg.score.max_new_tokens} "
                                         f"new tokens that exceeds the llama.cpp context of {LLAMACPP_CTX:,}")
                    t0 = time.perf_counter()
                    if generator == "hf":
                        g = generate_with_states(self.model, self.tok, chat, self.layers, self.cfg.score.max_new_tokens,
                                                 self.out_dtype, stop=self.cfg.generate.stop)
                        answer, st["truncated"], st["item"] = g.text, g.truncated, g.item
                    else:
                        answer, st["truncated"] = self._generate_llamacpp(chat)
                    st.update(gen_s=time.perf_counter() - t0, source="generated", generator=generator)
                    if not answer.strip():
                        raise InputError(f"{self.backbone_name} gave an empty answer; nothing to score", 422)
                else:
                    self._check_context(n_prompt, 2 * self.window, "the response")  # room for chunks of it
                    answer = r.response
                ids, offsets = token_offsets(self.tok, answer)  # the answer's one tokenisation
                if states is not None and states[i] is not None and states[i].token_ids.tolist() == ids:
                    st["item"] = states[i]
                st.update(answer=answer, ids=ids, offsets=offsets, n_prompt=n_prompt)
                state[i] = st
            except (InputError, GenerationError) as e:
                results[i] = e
                bar.update(1)
        todo = sorted((i for i in state if state[i]["item"] is None), key=lambda i: len(state[i]["ids"]))
        short = lambda i: len(state[i]["ids"]) <= self.window  # noqa: E731 - batched; longer ones one at a time
        for i in [i for i in todo if not short(i)]:  # 2a. one pass each, chunked past the context (llm/chunked.py)
            t0 = time.perf_counter()
            state[i].update(item=extract_long(self.model, self.tok, state[i]["chat"], state[i]["ids"], self.layers,
                                              self.out_dtype, self.max_context), bb_s=time.perf_counter() - t0)
        todo = [i for i in todo if short(i)]
        bs = max(1, self.cfg.score.batch_size)
        for s in range(0, len(todo), bs):  # 2. teacher-forced passes
            batch = todo[s: s + bs]
            t0 = time.perf_counter()
            feats = extract_batch(self.model, self.tok, [state[i]["chat"] for i in batch],
                                  [state[i]["ids"] for i in batch], self.layers, self.out_dtype)
            share = (time.perf_counter() - t0) / len(batch)
            for i, f in zip(batch, feats):
                state[i].update(item=f, bb_s=share)
        done = sorted(state)
        if done:  # 3. the probe
            t0 = time.perf_counter()
            preds = predict_windows(self.probe, [state[i]["item"] for i in done], self.calibration,
                                    [self._answer(state[i]) for i in done], window=self.window,
                                    batch_size=max(32, len(done)),  # answers, or windows of a long one
                                    device=next(self.probe.parameters()).device)
            share = (time.perf_counter() - t0) / len(done)
            for i, pred in zip(done, preds):
                results[i] = self._result(reqs[i], state[i], pred, share, time.perf_counter() - t_start[i])
                bar.update(1)
        bar.close()
        if not return_errors:
            for r in results:
                if isinstance(r, Exception):
                    raise r
        return results

    def score_stream(self, prompt: str, *, every: int | None = None, at_clauses: bool | None = None,
                     generator: str | None = None, cancel=None) -> Iterator[StreamUpdate]:
        """Score the backbone's answer while it is generated: yields a `StreamUpdate` every ``every``
        tokens (default ``score.stream_every``) and at each clause end (``score.stream_at_clauses``),
        the last one (``done``) equal to ``score(prompt, response=answer)``.
        ``generator``: ``hf`` or ``llamacpp`` (default: as `score`); ``cancel``: a `threading.Event`
        that stops the generation (`spanuq.score.stream`)."""
        every = self.cfg.score.stream_every if every is None else every
        at_clauses = self.cfg.score.stream_at_clauses if at_clauses is None else at_clauses
        return score_stream(self, prompt, every=every, at_clauses=at_clauses, generator=generator, cancel=cancel)

    @staticmethod
    def _answer(st: dict) -> Answer | None:
        """The answer's text and token offsets, when its states were computed on those tokens."""
        same = st["item"].token_ids.tolist() == st["ids"]
        return Answer(st["answer"], st["offsets"]) if same else None

    def _result(self, req: ScoreRequest, st: dict, pred: Prediction, probe_s: float, total_s: float) -> ScoreResult:
        answer = st["answer"]
        spans = [ScoredSpan(start=s.start, end=s.end, text=answer[s.start:s.end], b=s.b, e=s.e, u=s.u, u_raw=s.u_raw,
                            validity=s.validity, nu=s.nu) for s in pred.shown()]
        return ScoreResult(prompt=req.prompt, answer=answer, answer_source=st["source"], backbone=self.backbone_name,
                           generator=st["generator"], n_tokens=len(st["ids"]), truncated=st["truncated"],
                           u_seq=float(pred.u_seq), validity_threshold=self.threshold, spans=spans,
                           warnings=language_warnings(answer, self.cfg.score.languages),
                           windows=len(plan_windows(len(st["ids"]), self.window)),
                           timings=Timings(generate_s=None if st["gen_s"] is None else round(st["gen_s"], 4),
                                           backbone_s=round(st["bb_s"], 4), probe_s=round(probe_s, 4),
                                           total_s=round(total_s, 4)))
