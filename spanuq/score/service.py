"""`spanuq serve`: the HTTP service (FastAPI + uvicorn) and its web page.

    POST /score          {"prompt": ..., "response"?: ...}  -> ScoreResult (docs/score.schema.json)
    POST /score/batch    {"items": [...]}                    -> {"results": [ScoreResult | {"status", "error"}]}
    POST /score/stream   {"prompt": ...}                     -> Server-Sent Events: `update` (StreamUpdate) ..., or `error`
    POST /refine         {"prompt", "response"?, "mode"?, "threshold"?} -> RefineResult (spanuq.score.refine)
    POST /render         ScoreResult                         -> {"html": ...} (spanuq.score.views, for the page)
    GET  /v1/models, POST /v1/chat/completions                 -> OpenAI-compatible, with the `spanuq` extension
                                                                  (spanuq.score.openai, docs/openai.md)
    GET  /health, GET / (the web page, its icon /favicon.svg, also at /favicon.ico), GET /docs (OpenAPI)

One model instance, two lanes (`spanuq.score.worker`): given answers go to the answer lane,
everything that generates (a prompt alone, streams, ``/v1``, ``/refine``) to the generation lane;
each lane's thread scores its waiting requests together, and the model is locked for model work
only, so a given answer does not wait behind a generation.  Bodies are read and parsed
here, so a body too large (413), not UTF-8 or not JSON (400), of the wrong shape or past a
limit (422 / 413), or one that does not arrive within ``score.body_timeout_s`` (408) gets a
clear error and never reaches the model; a full queue answers 503.  Nothing a client
sends can stop the worker: an unexpected failure answers 500 for that batch only.
A stream is one job of the generation lane (`SpanUQ.score_stream`, spanuq/score/stream.py); when
its client disconnects, the job's cancel event is set and the generation stops at the next
token, so a dead client never holds the worker.
"""
from __future__ import annotations

import asyncio
import json
import logging
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from pydantic import ValidationError
from starlette.requests import ClientDisconnect

from ..config import ScoreConfig
from .refine import RefineRequest, RefineResult, check_refine
from .schema import BatchRequest, BatchResponse, ItemError, ScoreRequest, ScoreResult
from .errors import GenerationError, HTTPError, InputError
from .scorer import SpanUQ
from .views import HOW_TO_CHOOSE
from .worker import QueueFull, ScoringWorker, StreamJob, loop_emitter

__all__ = ["create_app", "serve", "ScoringWorker", "StreamJob"]
log = logging.getLogger(__name__)
WEB = Path(__file__).with_name("web")
ERRORS = {400: {}, 408: {}, 413: {}, 422: {}, 503: {}}  # the OpenAPI responses of a POST route


class ClientGone(Exception):
    """The client disconnected before its request body arrived: nobody is left to answer."""


async def _read_body(request: Request, limit: int) -> bytes:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise HTTPError(413, f"request body larger than {limit:,} bytes (score.max_body_bytes)")
    return body


async def _json_body(request: Request, limit: int, timeout_s: float):
    """The request's JSON body, read within ``timeout_s`` (408 after it) and at most ``limit`` bytes."""
    if "content-length" in request.headers and "chunked" in request.headers.get("transfer-encoding", "").lower():
        raise HTTPError(400, "the request has both Content-Length and Transfer-Encoding: chunked; send one")
    try:
        declared = int(request.headers.get("content-length") or 0)
    except ValueError:
        raise HTTPError(400, "the Content-Length header is not a number") from None
    if declared > limit:
        raise HTTPError(413, f"request body larger than {limit:,} bytes (score.max_body_bytes)")
    try:
        body = await asyncio.wait_for(_read_body(request, limit), timeout_s)
    except ClientDisconnect:
        raise ClientGone() from None
    except asyncio.TimeoutError:
        raise HTTPError(408, f"the request body did not arrive within {timeout_s:g} s "
                             "(score.body_timeout_s)") from None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HTTPError(400, f"the request body is not UTF-8 (byte {e.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise HTTPError(400, f"the request body is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise HTTPError(400, "the request body nests JSON too deeply") from None


def _validate(model, data):
    try:
        return model.model_validate(data)
    except RecursionError:
        raise HTTPError(400, "the request body nests JSON too deeply") from None
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(map(str, err["loc"])) or "body"
        raise HTTPError(422, f"{where}: {err['msg']}") from None


def _error(e: BaseException) -> tuple[int, str]:
    if isinstance(e, (InputError, GenerationError)):
        return e.status, str(e)
    return 500, f"internal error: {type(e).__name__}: {e}"


def _openapi(model) -> dict:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": model.model_json_schema()}}}}


def create_app(uq: SpanUQ, scfg: ScoreConfig | None = None, upstream=None) -> FastAPI:
    """The FastAPI app around a loaded `SpanUQ`; the worker starts with it and stops on shutdown.
    The OpenAI-compatible ``/v1`` routes answer with the backbone, or with ``upstream`` (an
    `spanuq.score.openai.engines.Upstream`: `spanuq serve --upstream URL`) writing the answers."""
    from .openai.router import install
    scfg = scfg or uq.cfg.score
    worker = ScoringWorker(uq, scfg.micro_batch, scfg.max_queue)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        worker.close()

    app = FastAPI(title="SpanUQ", version="1", lifespan=lifespan,
                  description="Which parts of an LLM's answer are likely wrong: spans with calibrated "
                              "uncertainty û from one forward pass of the frozen backbone.")
    app.state.worker = worker
    _error_handlers(app)
    _score_routes(app, uq, worker, scfg)
    _stream_route(app, uq, worker, scfg)
    _refine_and_render_routes(app, uq, worker, scfg)
    _info_routes(app, uq, worker, scfg, upstream)
    install(app, uq, worker, scfg, upstream, json_body=_json_body)
    return app


def _error_handlers(app: FastAPI) -> None:
    @app.exception_handler(HTTPError)
    async def _http_error(request: Request, e: HTTPError):
        close = {"Connection": "close"} if e.status in (400, 408, 413) else None  # the body may be unread
        return JSONResponse({"detail": e.message}, status_code=e.status, headers=close)

    @app.exception_handler(QueueFull)
    async def _queue_full(request: Request, e: QueueFull):
        return JSONResponse({"detail": str(e)}, status_code=503)

    @app.exception_handler(ClientGone)
    async def _client_gone(request: Request, e: ClientGone):
        client = f"{request.client.host}:{request.client.port}" if request.client else "a client"
        log.info("%s disconnected before its request body arrived (%s %s)", client, request.method, request.url.path)
        return Response(status_code=499)  # nobody reads it (nginx's "client closed request")


async def _run(fut) -> object:
    """The worker's result for one job; its failure as the HTTP error it means."""
    try:
        return await asyncio.wrap_future(fut)
    except Exception as e:  # noqa: BLE001
        status, msg = _error(e)
        raise HTTPError(status, msg) from None


def _score_routes(app: FastAPI, uq: SpanUQ, worker: ScoringWorker, scfg: ScoreConfig) -> None:
    async def body(request: Request, model):
        return _validate(model, await _json_body(request, scfg.max_body_bytes, scfg.body_timeout_s))

    @app.post("/score", response_model=ScoreResult, openapi_extra=_openapi(ScoreRequest), responses=ERRORS)
    async def score(request: Request):
        req = await body(request, ScoreRequest)
        try:
            uq.check(req.prompt, req.response, req.context)  # cheap limits here, before the queue (the worker checks again)
        except InputError as e:
            raise HTTPError(e.status, str(e)) from None
        out = (await _run(worker.submit([req])))[0]
        if isinstance(out, Exception):
            raise HTTPError(*_error(out))
        return JSONResponse(out.model_dump(mode="json"))

    @app.post("/score/batch", response_model=BatchResponse, openapi_extra=_openapi(BatchRequest), responses=ERRORS)
    async def score_batch(request: Request):
        batch = await body(request, BatchRequest)
        if not batch.items:
            raise HTTPError(422, "items is empty")
        if len(batch.items) > scfg.max_batch_items:
            raise HTTPError(413, f"{len(batch.items)} items; the limit is {scfg.max_batch_items} (score.max_batch_items)")
        outs = await _run(worker.submit(batch.items))
        results = [ItemError(status=_error(o)[0], error=_error(o)[1]) if isinstance(o, Exception) else o for o in outs]
        return JSONResponse(BatchResponse(results=results).model_dump(mode="json"))


def _stream_route(app: FastAPI, uq: SpanUQ, worker: ScoringWorker, scfg: ScoreConfig) -> None:
    @app.post("/score/stream", openapi_extra=_openapi(ScoreRequest), responses=ERRORS)
    async def score_stream(request: Request, html: bool = False):
        """The backbone's answer to ``prompt`` as Server-Sent Events while it is generated: ``event: update``
        with a `StreamUpdate` (``{"update", "html"}`` with ``?html=1``), the last with ``done`` true;
        ``event: error`` with ``{"status", "detail"}`` if generation fails.  Bad input is a 4xx before any event."""
        req = _validate(ScoreRequest, await _json_body(request, scfg.max_body_bytes, scfg.body_timeout_s))
        if req.response is not None:
            raise HTTPError(422, "a stream scores the backbone's own answer as it is generated; "
                                 "POST /score scores a given response")
        try:
            uq.check(req.prompt, None, req.context)
            uq._check_context(uq._chat(req.prompt)[1], uq.cfg.score.max_new_tokens, "generation")
        except InputError as e:
            raise HTTPError(e.status, str(e)) from None
        loop, events = asyncio.get_running_loop(), asyncio.Queue()
        emit = loop_emitter(loop, events, lambda: job.cancel.set())

        job = StreamJob(req.prompt, emit, context=req.context)
        worker.submit_stream(job)
        return StreamingResponse(_sse(events, job, html), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _sse(events: asyncio.Queue, job: StreamJob, html: bool):
    """The stream's events as Server-Sent Events; when it ends or its client leaves, the generation stops."""
    from .views import fragment

    try:
        while (item := await events.get()) is not None:
            if isinstance(item, Exception):
                status, msg = _error(item)
                yield f"event: error\ndata: {json.dumps({'status': status, 'detail': msg})}\n\n"
                continue
            data = item.model_dump_json()
            if html:
                data = f'{{"update": {data}, "html": {json.dumps(fragment(item.result))}}}'
            yield f"event: update\ndata: {data}\n\n"
    finally:
        job.cancel.set()


def _refine_and_render_routes(app: FastAPI, uq: SpanUQ, worker: ScoringWorker, scfg: ScoreConfig) -> None:
    @app.post("/refine", response_model=RefineResult, openapi_extra=_openapi(RefineRequest), responses=ERRORS)
    async def refine(request: Request):
        req = _validate(RefineRequest, await _json_body(request, scfg.max_body_bytes, scfg.body_timeout_s))
        try:
            check_refine(req.mode, uq.cfg.score.refine_threshold if req.threshold is None else req.threshold)
            uq.check(req.prompt, req.response, req.context)
        except InputError as e:
            raise HTTPError(e.status, str(e)) from None
        out = await _run(worker.call(lambda m: m.refine(req.prompt, req.response, mode=req.mode,
                                                        threshold=req.threshold, context=req.context)))
        return JSONResponse(out.model_dump(mode="json"))

    @app.post("/render", openapi_extra=_openapi(ScoreResult), responses={400: {}, 408: {}, 413: {}, 422: {}})
    async def render(request: Request):
        from .views import fragment

        result = _validate(ScoreResult, await _json_body(request, 4 * scfg.max_body_bytes, scfg.body_timeout_s))
        return {"html": fragment(result)}


def _info_routes(app: FastAPI, uq: SpanUQ, worker: ScoringWorker, scfg: ScoreConfig, upstream=None) -> None:
    @app.get("/health")
    def health():
        """What serves: the backbone, the probe (and how to choose another), the settings it scores with,
        the queue, and the limits (``context_tokens``: the one context, the backbone's and llama.cpp's)."""
        return {"status": "ok", "backbone": uq.backbone_name, "probe": uq.probe_source, "checkpoint": str(uq.checkpoint),
                "choose_probe": HOW_TO_CHOOSE, "probe_note": uq.probe_note,
                "settings": uq.settings.describe() if uq.settings else None,
                "generator": uq.generator, "queued": sum(worker.queued().values()), "lanes": worker.queued(),
                "batches": worker.batches,
                "streams": worker.streams, "validity_threshold": uq.threshold,
                "openai": {"base_url": "/v1", "answers": f"upstream {upstream.url}" if upstream else "the backbone"},
                "conformal": uq.guarantee.statement() if uq.guarantee else None, "limits": {
                    "max_body_bytes": scfg.max_body_bytes, "body_timeout_s": scfg.body_timeout_s,
                    "max_prompt_chars": uq.cfg.score.max_prompt_chars,
                    "max_response_chars": uq.cfg.score.max_response_chars, "max_batch_items": scfg.max_batch_items,
                    "max_context_chars": uq.cfg.score.max_context_chars,
                    "max_context_windows": uq.cfg.score.max_context_windows,
                    "context_tokens": uq.max_context}}

    @app.get("/", response_class=HTMLResponse)
    def page():
        return (WEB / "index.html").read_text(encoding="utf-8")

    @app.get("/favicon.svg", include_in_schema=False)
    @app.get("/favicon.ico", include_in_schema=False)  # where a browser looks without the page's link
    def icon():
        return Response((WEB / "favicon.svg").read_bytes(), media_type="image/svg+xml",
                        headers={"Cache-Control": "max-age=86400"})


def serve(uq: SpanUQ, host: str = "127.0.0.1", port: int = 8000, upstream=None) -> None:
    """Run the service in the foreground (`spanuq serve [--upstream URL]`)."""
    import uvicorn

    log.info("serving the %s", uq.probe_source)
    uvicorn.run(create_app(uq, upstream=upstream), host=host, port=port, log_level="info", workers=1)
