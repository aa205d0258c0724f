"""Who writes the answer: the backbone (`spanuq serve`) or an upstream server (`spanuq serve --upstream URL`).

* **backbone**: the managed llama.cpp server completes the rendered conversation (``/v1/completions``
  on the chat string, as `SpanUQ.score(prompt)` generates), or transformers decodes greedily and
  the states are captured on the way (``score.generator=hf``).  An omitted ``temperature`` is
  greedy decoding — the answer ``score(prompt)`` gives; stop strings are ``generate.stop`` plus
  the request's; ``max_tokens`` defaults to ``score.max_new_tokens``.
* **upstream**: any OpenAI-compatible server, serving any model (``python -m llama_cpp.server``,
  ``spanuq llama-server``, ``vllm serve``, a hosted API) gets the request as the client sent it, with
  the probe's system prompt first when it has none (`conversation`; SpanUQ's ``context`` /
  ``documents`` fields are not sent on); its answer is then scored as a given answer, against the
  conversation's sources when it has any.  Its API key comes from the environment variable named by ``--upstream-api-key-env``.

Both give text as ``(text so far, finish_reason or None)`` pairs for streaming (`text_stream`) and
a `Completion` otherwise.  A failure of the backbone or the upstream raises `OpenAIError` (502 /
503 for the server's side, the upstream's own 4xx passed on): nothing is scored from it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterator

from ...llm.loading import count_tokens
from ...llm.openai_client import EndpointError, EndpointUnreachable, OpenAIClient
from .records import ChatRequest, OpenAIError


@dataclass
class Completion:
    text: str  # as the server returned it (the content is its stripped form)
    finish_reason: str
    completion_tokens: int | None
    prompt_tokens: int | None = None
    model: str | None = None
    id: str | None = None
    created: int | None = None
    item: object | None = None  # states captured during generation (hf), else None


# ------------------------------------------------------------------ backbone
def backbone_payload(uq, req: ChatRequest, chat: str) -> dict:
    """The ``/v1/completions`` body of the managed server for this request (see the module docstring)."""
    g = uq.cfg.generate
    p = {"prompt": chat, "max_tokens": req.budget() or uq.cfg.score.max_new_tokens,
         "temperature": 0.0 if req.temperature is None else req.temperature, "n": 1,
         "seed": g.seed if req.seed is None else req.seed, "stop": list(g.stop or []) + list(req.stop or [])}
    for key in ("top_p", "frequency_penalty", "presence_penalty"):
        if getattr(req, key) is not None:
            p[key] = getattr(req, key)
    return p


def greedy_only(req: ChatRequest) -> None:
    """transformers decodes greedily here: a request for anything else gets a 400, not another answer."""
    for key, neutral in (("temperature", 0.0), ("top_p", 1.0), ("frequency_penalty", 0.0), ("presence_penalty", 0.0)):
        v = getattr(req, key)
        if v is not None and v != neutral:
            raise OpenAIError(400, f"{key}={v}: this server's backbone decodes greedily (score.generator=hf); leave "
                                   f"{key} out or use the llama.cpp generator", "unsupported_value", key)


def _check_context(uq, chat: str, budget: int, limit: int | None) -> int:
    """The conversation's tokens; a 400 when it and the answer's budget pass the context (the backbone's,
    which the managed llama.cpp server is started with)."""
    n_prompt = count_tokens(uq.tok, chat)
    for ctx in (uq.max_context, limit):
        if ctx and n_prompt + budget > ctx:
            raise OpenAIError(400, f"the conversation has {n_prompt:,} tokens; with max_tokens={budget} that exceeds "
                                   f"the context of {ctx:,} tokens", "context_length_exceeded", "messages")
    return n_prompt


def _server(uq):
    """The managed llama.cpp server's client, (re)started when needed; a crash becomes a 503."""
    try:
        return uq.generation.client()
    except (RuntimeError, TimeoutError, OSError) as e:  # ServerCrashed is a RuntimeError
        raise OpenAIError(503, f"the backbone's llama.cpp server could not start: {e}", "backbone_unavailable") from e


def _backbone_failed(uq, e: Exception) -> OpenAIError:
    return OpenAIError(503, f"generation failed: {uq.generation.crash_report() or e}", "backbone_unavailable")


def backbone_complete(uq, req: ChatRequest, chat: str) -> Completion:
    """The backbone's answer (runs on the service's generation lane; the backbone under `SpanUQ.lock`)."""
    from ...llm.states import generate_with_states

    budget = req.budget() or uq.cfg.score.max_new_tokens
    if uq.generation.resolve() == "hf":
        greedy_only(req)
        n_prompt = _check_context(uq, chat, budget, None)
        stops = list(uq.cfg.generate.stop or []) + list(req.stop or [])
        with uq.lock:  # transformers decodes on the backbone (`SpanUQ.lock`)
            g = generate_with_states(uq.model, uq.tok, chat, uq.layers, budget, uq.out_dtype, stop=stops)
        return Completion(g.text, "length" if g.truncated else "stop", len(g.token_ids), n_prompt, item=g.item)
    n_prompt = _check_context(uq, chat, budget, None)
    client = _server(uq)
    try:
        data = client.client.post("completions", {"model": client.model, **backbone_payload(uq, req, chat)})
        c = data["choices"][0]
        usage = data.get("usage") or {}
    except (EndpointError, EndpointUnreachable, KeyError, IndexError, TypeError) as e:
        raise _backbone_failed(uq, e) from e
    return Completion(c.get("text") or "", c.get("finish_reason") or "stop", usage.get("completion_tokens"), n_prompt)


def backbone_text(uq, req: ChatRequest, chat: str) -> Iterator[tuple[str, str | None]]:
    """The managed server's answer as it is generated (llama.cpp generator only; hf streams via `score_stream`)."""
    _check_context(uq, chat, req.budget() or uq.cfg.score.max_new_tokens, None)
    client = _server(uq)
    payload = {"model": client.model, **backbone_payload(uq, req, chat)}
    try:
        yield from _accumulate(client.client.stream("completions", payload), chat_api=False)
    except (EndpointError, EndpointUnreachable, ValueError) as e:
        raise _backbone_failed(uq, e) from e


def _accumulate(events, chat_api: bool) -> Iterator[tuple[str, str | None]]:
    text = ""
    for event in events:
        for c in (event.get("choices") or [])[:1]:
            text += ((c.get("delta") or {}).get("content") or "") if chat_api else (c.get("text") or "")
            finish = c.get("finish_reason")
            yield text, finish
            if finish:
                return
    yield text, "stop"


# ------------------------------------------------------------------ upstream
class Upstream:
    """An OpenAI-compatible server that answers; SpanUQ scores what it returns."""

    def __init__(self, url: str, api_key_env: str | None = None, model: str | None = None, timeout_s: float = 300.0,
                 max_retries: int = 2):
        self.url = url.rstrip("/")
        if not self.url.endswith("/v1"):
            self.url += "/v1"
        self.client = OpenAIClient(self.url, api_key_env, timeout_s, max_retries)
        self.declared = model  # the model id that serves the probe's backbone (--upstream-model)
        self.models: list[str] = []

    def check(self) -> list[str]:
        """The upstream's model ids (``GET /v1/models``); a clear error when it cannot be reached."""
        self.models = self.client.check()
        if self.declared is not None and self.declared not in self.models:
            raise ValueError(f"--upstream-model {self.declared!r}: {self.url} serves {', '.join(self.models) or 'no model'}")
        return self.models

    def list_models(self) -> dict:
        try:
            r = self.client._http.get(f"{self.url}/models", timeout=10)
            r.raise_for_status()
            return r.json()
        except Exception as e:  # noqa: BLE001 - any failure of the upstream is a 502 here
            raise OpenAIError(502, f"the upstream {self.url} did not list its models: {type(e).__name__}: {e}",
                              "upstream_error") from None

    def payload(self, body: dict, messages: list[dict]) -> dict:
        """The client's request as it sent it, with the conversation SpanUQ scores (its system prompt)."""
        out = {k: v for k, v in body.items() if k not in ("stream", "stream_options", "context", "documents")}
        out["messages"] = messages
        return out

    def complete(self, body: dict, messages: list[dict]) -> Completion:
        try:
            data = self.client.post("chat/completions", self.payload(body, messages))
        except (EndpointError, EndpointUnreachable) as e:
            raise upstream_error(e) from None
        return parse_completion(data)

    def text(self, body: dict, messages: list[dict], meta: dict) -> Iterator[tuple[str, str | None]]:
        """The upstream's streamed answer; ``meta`` gets its id, model and usage as they arrive."""
        payload = {**self.payload(body, messages), "stream_options": {"include_usage": True}}

        def events():
            for event in self.client.stream("chat/completions", payload):
                if isinstance(event, dict) and event.get("error"):
                    raise OpenAIError(502, f"the upstream failed mid-stream: {_message(event)}", "upstream_error")
                for key in ("id", "model", "created"):
                    meta.setdefault(key, event.get(key))
                if event.get("usage"):
                    meta["usage"] = event["usage"]
                yield event

        try:
            yield from _accumulate(events(), chat_api=True)
        except (EndpointError, EndpointUnreachable) as e:
            raise upstream_error(e) from None
        except ValueError as e:
            raise OpenAIError(502, f"the upstream's stream is not JSON server-sent events: {e}", "upstream_error") from None

    def close(self) -> None:
        self.client.close()


def _message(data) -> str:
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict):
        return str(err.get("message") or err)
    return str(err or data)[:300]


def upstream_error(e: Exception) -> OpenAIError:
    """The upstream's failure as this server's answer: its own 4xx passed on (the request was
    wrong), everything else a 502 (the upstream is down, failing, or answered garbage)."""
    status, body = getattr(e, "status", None), getattr(e, "body", None)
    if status is not None and 400 <= status < 500 and status not in (408, 429):
        try:
            data = json.loads(body)
            msg = _message(data)
            err = data.get("error") if isinstance(data, dict) else None
            code = (err.get("code") if isinstance(err, dict) else None) or "upstream_error"
        except (TypeError, ValueError, AttributeError):
            msg, code = (body or str(e))[:300], "upstream_error"
        return OpenAIError(status, f"the upstream refused the request: {msg}", code)
    return OpenAIError(502, f"the upstream failed: {e}", "upstream_error")


def parse_completion(data: dict) -> Completion:
    """A ``chat.completion`` from the upstream, checked: one choice with text content."""
    try:
        c = data["choices"][0]
        msg = c["message"]
        content = msg.get("content")
    except (KeyError, IndexError, TypeError, AttributeError):
        raise OpenAIError(502, f"the upstream's reply is not a chat.completion: {str(data)[:200]}",
                          "upstream_error") from None
    if content is None and msg.get("tool_calls"):
        raise OpenAIError(502, "the upstream answered with tool calls; SpanUQ scores text answers", "upstream_error")
    if content is not None and not isinstance(content, str):
        raise OpenAIError(502, f"the upstream's message content is a {type(content).__name__}, not text",
                          "upstream_error")
    usage = data.get("usage") or {}
    return Completion(content or "", c.get("finish_reason") or "stop", usage.get("completion_tokens"),
                      usage.get("prompt_tokens"), data.get("model"), data.get("id"), data.get("created"))
