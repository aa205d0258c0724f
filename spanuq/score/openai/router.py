"""OpenAI-compatible endpoints of `spanuq serve`: ``GET /v1/models``, ``POST /v1/chat/completions``.

    from openai import OpenAI
    client = OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused")
    r = client.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": "Who was Marie Curie?"}])
    text, ext = r.choices[0].message.content, r.spanuq        # ext["spans"][k]["start"/"end"] index text

A completion is the standard ``chat.completion`` plus the object ``spanuq`` (`SpanUQExtension`),
also sent compact as the response header ``x-spanuq`` (what LangChain's ``ChatOpenAI(...,
include_response_headers=True)`` exposes as ``response_metadata["headers"]``).  With ``stream: true``
the ``chat.completion.chunk`` events carry the content as it is generated; a chunk that
carries a span update has ``spanuq`` (``done`` false: the spans of the scored prefix, ``content_chars``);
the chunk with ``finish_reason`` has the final ``spanuq`` (``done`` true), equal to ``POST /score``
on the same answer.  Errors are OpenAI's ``{"error": {...}}`` (mid-stream: an ``error`` event).

The answer is produced by the backbone or an upstream server (`engines`), the conversation
decides what is scored (`conversation`), and the service's one worker thread scores it
(`spanuq.score.service.ScoringWorker`): requests queue there like ``/score`` ones.
"""
from __future__ import annotations

import asyncio
import json
import logging
import threading
import time

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError

from ...llm.loading import count_tokens
from ..errors import GenerationError, HTTPError, InputError
from ..schema import ScoreRequest, ScoreResult
from ..status import AnsweredBy, StatusCheck, assess
from ..worker import QueueFull, StreamJob, loop_emitter
from .conversation import Conversation, conversation, visible
from .engines import Upstream, backbone_complete, backbone_text, greedy_only
from .records import (ChatRequest, OpenAIError, ProbeInfo, chunk, completion, completion_id, extension, model_card,
                      request_error, usage)

log = logging.getLogger(__name__)
HEADER = "x-spanuq"
HEADER_LIMIT = 8 * 1024  # bytes of the x-spanuq header; past it the spans are left out of the header (not the body)


def probe_info(uq, source: str | None = None) -> ProbeInfo:
    from ...pipeline.files import sha256_file
    from ..shipped import PROBES

    shipped = uq.checkpoint.resolve().parent == PROBES
    return ProbeInfo(id=source or (f"shipped:{uq.backbone_name}" if shipped else str(uq.checkpoint)),
                     sha256=sha256_file(uq.checkpoint / "model.safetensors"), backbone=uq.backbone_name,
                     description=uq.probe_source)


def header_value(ext: dict) -> str:
    """The extension as one header value (ASCII JSON); without the spans when it would pass the limit."""
    text = json.dumps(ext, separators=(",", ":"))
    if len(text) > HEADER_LIMIT:
        text = json.dumps({**ext, "spans": [], "spans_omitted": len(ext["spans"])}, separators=(",", ":"))
    return text


def with_upstream_status(uq, result: ScoreResult, answered_by: AnsweredBy | None) -> ScoreResult:
    """The result with the reasons only the upstream's reply shows (who wrote it), deduplicated by code."""
    if answered_by is None:
        return result
    extra = assess(StatusCheck(answer=result.answer, backbone=uq.backbone_name, n_tokens=result.n_tokens,
                               answered_by=answered_by))
    have = {r.code for r in result.status_reasons}
    new = [r for r in extra if r.code not in have]
    if not new:
        return result
    return result.model_copy(update={"status": "unverified", "status_reasons": result.status_reasons + new})


def _score_answer(uq, conv: Conversation, answer: str, source: str, states=None) -> ScoreResult:
    """``answer`` scored after the conversation, against its sources when it has any, with the
    calibration of who wrote it (``source``: ``generated`` for the backbone's own answer, ``given``
    for an upstream's)."""
    out = uq.score_many([ScoreRequest(prompt=conv.prompt, response=answer, answer_source=source, context=conv.context)],
                        progress=False, return_errors=True, chats=[conv.messages if conv.context else conv.chat],
                        states=[states] if states is not None else None)[0]
    if isinstance(out, Exception):
        raise out
    return out


def _openai_error(e: BaseException) -> OpenAIError:
    if isinstance(e, OpenAIError):
        return e
    if isinstance(e, InputError):
        code = "context_length_exceeded" if "context" in str(e) else "invalid_request"
        return OpenAIError(413 if e.status == 413 else 400, str(e), code)
    if isinstance(e, GenerationError):
        return OpenAIError(503, str(e), "backbone_unavailable")
    if isinstance(e, QueueFull):
        return OpenAIError(503, str(e), "service_busy")
    return OpenAIError(500, f"internal error: {type(e).__name__}: {e}", "internal_error")


class ChatStreamJob(StreamJob):
    """One streamed completion, run by the worker thread (in its turn, alone, as every stream):
    chunks (dicts), then None, go to ``emit``; ``cancel`` (set when the client leaves) stops it."""

    def __init__(self, req: ChatRequest, body: dict, conv: Conversation, upstream: Upstream | None, probe: ProbeInfo,
                 served_model: str, emit, cancel: threading.Event | None = None):
        self.req, self.body, self.conv, self.upstream, self.probe = req, body, conv, upstream, probe
        self.emit, self.cancel = emit, cancel or threading.Event()
        self.id, self.created, self.model = completion_id(), int(time.time()), served_model
        self.sent = ""  # the content streamed so far

    def _chunk(self, delta: dict, **kw) -> dict:
        return chunk(id=self.id, model=self.model, created=self.created, delta=delta, **kw)

    def _content(self, text: str) -> dict:
        """The delta that brings the streamed content to ``text`` (a longer version of it), else none."""
        if len(text) > len(self.sent) and text.startswith(self.sent):
            delta, self.sent = text[len(self.sent):], text
            return {"content": delta}
        return {}

    def run(self, uq) -> str:
        from ..stream import hf_text, score_stream

        outcome = "cancelled"
        try:
            if self.cancel.is_set():
                return outcome
            self.emit(self._chunk({"role": "assistant", "content": ""}))
            meta: dict = {}
            budget = self.req.budget()
            if self.upstream is not None:  # text from a server, re-read on the cache (the llamacpp path)
                stops, source_kind, gen = [], "given", "llamacpp"
                budget = budget or 1  # the upstream decides the length; the conversation must fit the context
                text = lambda cap: self.upstream.text(self.body, self.conv.forwarded, meta)  # noqa: E731
            else:
                stops, source_kind = list(uq.cfg.generate.stop or []) + list(self.req.stop or []), "generated"
                budget = budget or uq.cfg.score.max_new_tokens
                gen = uq.generation.resolve()
                if gen == "hf":
                    greedy_only(self.req)
                    text = lambda cap: _until(hf_text(uq, cap, budget), self.req.stop or [])  # noqa: E731
                else:
                    text = lambda cap: backbone_text(uq, self.req, self.conv.chat)  # noqa: E731

            def teed(cap):
                for t, finish in text(cap):
                    delta = self._content(visible(t, stops))
                    if delta:
                        self.emit(self._chunk(delta))
                    yield t, finish

            last = None
            for update in score_stream(uq, self.conv.prompt, every=uq.cfg.score.stream_every, generator=gen,
                                       at_clauses=uq.cfg.score.stream_at_clauses, cancel=self.cancel,
                                       chat=self.conv.chat, text=teed, stop=stops, max_new_tokens=budget,
                                       answer_source=source_kind, context=self.conv.context,
                                       messages=self.conv.messages):
                last = update
                if self.cancel.is_set():
                    break
                if update.done:
                    break
                result = update.result
                delta = self._content(result.answer)
                if len(result.answer) <= len(self.sent):
                    self.emit(self._chunk(delta, ext=extension(result, self.probe, False)))
            if last is None or not last.done or self.cancel.is_set():
                return outcome
            answered = None
            if self.upstream is not None:
                self.model = meta.get("model") or self.model
                answered = AnsweredBy(self.model, self.upstream.declared,
                                      (meta.get("usage") or {}).get("completion_tokens"))
            result = with_upstream_status(uq, last.result, answered)
            if not result.answer.startswith(self.sent):
                raise OpenAIError(500, "the streamed content and the scored answer diverged", "internal_error")
            n_prompt = count_tokens(uq.tok, self.conv.chat)
            use = meta.get("usage") or usage(n_prompt, last.n_generated)
            finish = "length" if result.truncated else "stop"
            self.emit(self._chunk(self._content(result.answer), finish_reason=finish,
                                  ext=extension(result, self.probe, True)))
            if self.req.stream_options and self.req.stream_options.include_usage:
                self.emit(self._chunk({}, usage=use, choices=False))
            outcome = "done"
        except Exception as e:  # noqa: BLE001 - the stream ends with its error, the worker lives on
            err = _openai_error(e)
            if err.status >= 500 and not isinstance(e, (OpenAIError, GenerationError)):
                log.exception("streaming a chat completion failed")
            self.emit(err.body())
            outcome = "failed"
        finally:
            self.emit(None)
        return outcome


def _until(source, stops: list[str]):
    """``source``'s (text, finish) pairs, finished at the first of ``stops`` (closing the source stops it)."""
    try:
        for text, finish in source:
            if any(s in text for s in stops):
                yield text, "stop"
                return
            yield text, finish
    finally:
        source.close()


def install(app: FastAPI, uq, worker, scfg, upstream: Upstream | None = None, probe_source: str | None = None,
            json_body=None) -> None:
    """Add the ``/v1`` routes to ``app`` (the service of `create_app`)."""
    probe = probe_info(uq, probe_source)
    served = uq.backbone_name

    @app.exception_handler(OpenAIError)
    async def _openai_error_handler(request: Request, e: OpenAIError):
        return JSONResponse(e.body(), status_code=e.status)

    router = APIRouter(prefix="/v1", tags=["OpenAI-compatible"])

    async def read(request: Request) -> tuple[ChatRequest, dict]:
        try:
            body = await json_body(request, scfg.max_body_bytes, scfg.body_timeout_s)
        except HTTPError as e:
            raise OpenAIError(e.status, e.message, "invalid_body") from None
        if not isinstance(body, dict):
            raise OpenAIError(400, "the request body must be a JSON object", "invalid_body")
        try:
            req = ChatRequest.model_validate(body)
        except RecursionError:
            raise OpenAIError(400, "the request body nests JSON too deeply", "invalid_body") from None
        except ValidationError as e:
            where, message = request_error(e)
            raise OpenAIError(400, message, "invalid_value", where) from None
        req.refuse_unsupported()
        if upstream is None and req.model != served:
            raise OpenAIError(404, f"The model `{req.model}` does not exist; this server serves `{served}` "
                                   "(GET /v1/models)", "model_not_found", "model")
        return req, body

    def conv_of(req: ChatRequest) -> Conversation:
        conv = rendered_sources(req, conversation(req, uq.tok, uq.system_prompt))
        n = sum(len(m["content"]) for m in conv.messages)
        if n > uq.cfg.score.max_prompt_chars:
            raise OpenAIError(400, f"the conversation has {n:,} characters; the limit is "
                                   f"{uq.cfg.score.max_prompt_chars:,} (score.max_prompt_chars)",
                              "context_length_exceeded", "messages")
        if not conv.prompt.strip():
            raise OpenAIError(400, "the last user message is empty", "invalid_messages", "messages")
        return conv

    def rendered_sources(req: ChatRequest, conv: Conversation) -> Conversation:
        """``conv`` with its sources rendered into ``chat`` (`spanuq.context.render`): the backbone answers in
        one window of them; an upstream's answer may be read in several (`spanuq.score.grounded`)."""
        if conv.context is None:
            return conv
        from dataclasses import replace

        from .. import grounded

        try:
            passages = grounded.checked_passages(conv.context, uq.cfg.score)
            windows = grounded.windows_for(uq.tok, conv.messages, passages, uq.system_prompt, uq.max_context,
                                           req.budget() or uq.cfg.score.max_new_tokens, uq.cfg.score)
        except InputError as e:
            raise OpenAIError(413 if e.status == 413 else 400, str(e), "invalid_context", "messages") from None
        if upstream is None and len(windows) > 1:
            raise OpenAIError(413, f"the sources need {len(windows)} windows: the backbone answers with all of them in "
                                   "its input, so they must fit in one (score.context_tokens)", "context_length_exceeded",
                              "messages")
        return replace(conv, chat=windows[0].chat)

    @router.get("/models")
    async def models():
        if upstream is not None:
            return await asyncio.to_thread(upstream.list_models)
        return {"object": "list", "data": [model_card(served)]}

    @router.get("/models/{model_id:path}")
    async def model(model_id: str):
        data = (await models())["data"]
        for m in data:
            if m.get("id") == model_id:
                return m
        raise OpenAIError(404, f"The model `{model_id}` does not exist", "model_not_found", "model")

    @router.post("/chat/completions")
    async def chat_completions(request: Request):
        req, body = await read(request)
        conv = conv_of(req)
        if req.stream:
            return _stream(req, body, conv)
        t0 = time.perf_counter()
        try:
            if upstream is not None:
                comp = await asyncio.to_thread(upstream.complete, body, conv.forwarded)
                answer = comp.text.strip()
                result = await asyncio.wrap_future(worker.call(lambda m: _score_answer(m, conv, answer, "given")))
                result = with_upstream_status(uq, result, AnsweredBy(comp.model or req.model, upstream.declared,
                                                                     comp.completion_tokens))
                model_id, cid, created = comp.model or req.model, comp.id or completion_id(), comp.created
                n_prompt, n_completion = comp.prompt_tokens, comp.completion_tokens
            else:
                def job(m):
                    t_gen = time.perf_counter()
                    c = backbone_complete(m, req, conv.chat)
                    gen_s = round(time.perf_counter() - t_gen, 4)
                    r = _score_answer(m, conv, c.text.strip(), "generated", c.item)
                    return c, r.model_copy(update={"generator": m.generator,
                                                   "truncated": c.finish_reason == "length",
                                                   "timings": r.timings.model_copy(update={"generate_s": gen_s})})

                comp, result = await asyncio.wrap_future(worker.call(job))
                model_id, cid, created = served, completion_id(), None
                n_prompt, n_completion = comp.prompt_tokens, comp.completion_tokens
        except Exception as e:  # noqa: BLE001
            err = _openai_error(e)
            if err.status >= 500 and not isinstance(e, (OpenAIError, GenerationError)):
                log.exception("a chat completion failed")
            raise err from None
        timings = result.timings.model_copy(update={"total_s": round(time.perf_counter() - t0, 4)})
        result = result.model_copy(update={"timings": timings})
        ext = extension(result, probe, True)
        n_prompt = n_prompt if n_prompt is not None else count_tokens(uq.tok, conv.chat)
        out = completion(id=cid, model=model_id, content=result.answer, created=created,
                         finish_reason="length" if comp.finish_reason == "length" else comp.finish_reason or "stop",
                         usage=usage(n_prompt, n_completion if n_completion is not None else result.n_tokens), ext=ext)
        return JSONResponse(out, headers={HEADER: header_value(out["spanuq"])})

    def _stream(req: ChatRequest, body: dict, conv: Conversation) -> StreamingResponse:
        loop, events = asyncio.get_running_loop(), asyncio.Queue()
        emit = loop_emitter(loop, events, lambda: job.cancel.set())

        job = ChatStreamJob(req, body, conv, upstream, probe, served if upstream is None else req.model, emit)
        try:
            worker.submit_stream(job)
        except QueueFull as e:
            raise OpenAIError(503, str(e), "service_busy") from None

        async def sse():
            try:
                while (item := await events.get()) is not None:
                    yield f"data: {json.dumps(item)}\n\n"
                yield "data: [DONE]\n\n"
            finally:  # the stream ended, or its client left: stop the generation
                job.cancel.set()

        return StreamingResponse(sse(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @router.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"], include_in_schema=False)
    async def unknown(path: str):
        raise OpenAIError(404, f"/v1/{path} is not served here: SpanUQ serves GET /v1/models and "
                               "POST /v1/chat/completions", "unknown_url")

    app.include_router(router)
    app.state.openai = {"probe": probe, "upstream": upstream}
