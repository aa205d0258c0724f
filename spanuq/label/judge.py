"""The LLM judge: structured JSON answers from any OpenAI-compatible chat endpoint.

One `Judge` wraps `OpenAIClient` (retries with back-off on timeouts, 429 and 5xx;
the API key read from the environment variable named in `JudgeConfig`, never
logged or written) and adds what a judge needs on top:

* every answer is parsed as JSON and validated against the template's pydantic
  schema; a malformed answer is sent back to the judge together with the
  validation error, up to ``max_format_retries`` times, and then recorded as a
  `JudgeFailure` (never an exception that loses the rest of the batch);
* an answer cut off by ``max_tokens`` (``finish_reason == "length"``) is asked
  again with twice the budget, up to ``max_tokens_cap``; still cut off, it is a
  ``truncated`` failure (the decomposer then splits the answer by sentence);
* an on-disk `ItemCache` keyed by (model, template name + version, input), so a
  re-run makes zero calls.  At temperature 0 a format failure is cached too (the
  judge would answer the same again); a *transient* failure — timeouts, 429 / 5xx
  or a non-JSON reply after every retry, an empty reply — never is: it raises a
  `JudgeFailure` with ``transient=True`` and the next run asks again;
* bounded concurrency (`ask_many`, a thread pool of ``concurrency`` workers);
* counters for the run report (`JudgeStats`).

`EndpointUnreachable` (nothing listening at ``base_url``) is not a per-item
failure: it propagates, so a stage stops with an error naming the server while
everything finished so far stays cached.
"""
from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from ..config import JudgeConfig
from ..llm.openai_client import EndpointError, EndpointUnreachable, OpenAIClient
from ..pipeline.cache import ItemCache, content_hash

log = logging.getLogger(__name__)

T = TypeVar("T", bound=BaseModel)


@dataclass(frozen=True)
class Template(Generic[T]):
    """A versioned judge prompt: bump `version` whenever the wording changes (it keys the cache)."""

    name: str
    version: int
    system: str
    user: str  # str.format template over the inputs
    schema: type[T]

    def messages(self, inputs: dict[str, Any]) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system},
                {"role": "user", "content": self.user.format(**inputs)}]


class JudgeFailure(Exception):
    """A judge request that gave no valid answer.

    ``kind``: ``format`` (no valid JSON after the format retries), ``truncated`` (cut
    off even at the largest budget), ``http`` (a non-retryable HTTP error),
    ``transient`` (retries ran out on timeouts / 429 / 5xx / non-JSON, or the reply
    was empty).  Only a transient failure may go away by itself."""

    def __init__(self, message: str, kind: str = "format"):
        super().__init__(message)
        self.kind = kind

    @property
    def transient(self) -> bool:
        return self.kind == "transient"


@dataclass
class JudgeStats:
    requests: int = 0  # logical questions asked (cache misses)
    calls: int = 0  # HTTP chat completions made, format retries included
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_hits: int = 0
    format_errors: int = 0  # answers that failed JSON/schema validation (each one)
    format_retries: int = 0  # re-asks with the validation error fed back
    format_failures: int = 0  # requests that never became valid
    http_failures: int = 0  # requests lost to non-retryable HTTP errors
    transient_failures: int = 0  # requests lost to exhausted retries or empty replies (not cached)
    truncated: int = 0  # replies cut off by max_tokens (each one)
    truncated_failures: int = 0  # requests still cut off at max_tokens_cap
    http_retries: int = 0  # back-off retries inside OpenAIClient

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


_RETRY_MESSAGE = (
    "Your previous reply was not valid: {error}\n"
    "Reply again with only one JSON object that matches this JSON schema, and nothing else:\n{schema}"
)


def _parse(text: str, schema: type[T]) -> T:
    """JSON (optionally inside a ``` fence) validated against `schema`; raises ValueError."""
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`")
        body = body[body.find("{"):] if "{" in body else body
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end < start:
        raise ValueError("the reply contains no JSON object")
    try:
        data = json.loads(body[start:end + 1])
    except json.JSONDecodeError as e:
        raise ValueError(f"the reply is not valid JSON ({e.msg} at char {e.pos})") from None
    try:
        return schema.model_validate(data)
    except ValidationError as e:
        errs = "; ".join(f"{'.'.join(map(str, x['loc'])) or '<root>'}: {x['msg']}" for x in e.errors()[:5])
        raise ValueError(f"the JSON does not match the schema ({errs})") from None


class Judge:
    """Ask versioned templates, get validated pydantic objects back (or `JudgeFailure`)."""

    def __init__(self, cfg: JudgeConfig, cache_dir: str | Path | None = None,
                 client: OpenAIClient | None = None):
        self.cfg = cfg
        self.client = client or OpenAIClient(cfg.base_url, cfg.api_key_env, cfg.timeout_s,
                                             cfg.max_retries, cfg.backoff_s)
        self.cache = ItemCache(cache_dir) if cache_dir is not None else None
        self.stats = JudgeStats()
        self._lock = threading.Lock()
        self._checked = False

    @property
    def base_url(self) -> str:
        return self.client.base_url

    def close(self) -> None:
        self.client.close()

    def check(self) -> None:
        """Fail fast with `EndpointUnreachable` (naming the URL) when nothing listens there."""
        if self._checked:
            return
        try:
            self.client.check()
        except EndpointError as e:  # some providers have no /models; the first call will tell
            log.warning("judge endpoint check: %s", e)
        self._checked = True

    def key(self, template: Template, inputs: dict[str, Any]) -> str:
        c = self.cfg
        return content_hash({"model": c.model, "template": template.name, "version": template.version,
                             "inputs": inputs, "temperature": c.temperature, "max_tokens": c.max_tokens,
                             "response_format": c.response_format})

    def _response_format(self, schema: type[BaseModel]) -> dict | None:
        kind = self.cfg.response_format
        if kind == "json_object":
            return {"type": "json_object"}
        if kind == "json_object+schema":  # llama.cpp server / Anyscale: grammar-constrained
            return {"type": "json_object", "schema": schema.model_json_schema()}
        if kind == "json_schema":  # OpenAI / vLLM structured outputs
            return {"type": "json_schema",
                    "json_schema": {"name": schema.__name__, "schema": schema.model_json_schema()}}
        return None

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for k, v in deltas.items():
                setattr(self.stats, k, getattr(self.stats, k) + v)

    def _chat(self, messages: list[dict], schema: type[BaseModel], max_tokens: int) -> tuple[str, str]:
        """(content, finish_reason) of one chat completion."""
        payload: dict[str, Any] = {"model": self.cfg.model, "messages": messages,
                                   "temperature": self.cfg.temperature, "max_tokens": max_tokens}
        fmt = self._response_format(schema)
        if fmt is not None:
            payload["response_format"] = fmt
        retries_before = self.client.stats.retries
        try:
            data = self.client.post("chat/completions", payload)
        finally:
            self._count(http_retries=self.client.stats.retries - retries_before)
        usage = data.get("usage") or {}
        self._count(calls=1, prompt_tokens=int(usage.get("prompt_tokens") or 0),
                    completion_tokens=int(usage.get("completion_tokens") or 0))
        try:
            choice = data["choices"][0]
            return choice["message"]["content"] or "", str(choice.get("finish_reason") or "stop")
        except (KeyError, IndexError, TypeError):
            return "", "stop"

    def ask(self, template: Template[T], **inputs: Any) -> T:
        """The validated answer; `JudgeFailure` when none; `EndpointUnreachable` propagates."""
        key = self.key(template, inputs)
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                self._count(cache_hits=1)
                if "failure" in hit:
                    raise JudgeFailure(hit["failure"])
                return template.schema.model_validate(hit["answer"])
        self.check()
        self._count(requests=1)
        schema_text = json.dumps(template.schema.model_json_schema(), separators=(",", ":"))
        messages = template.messages(inputs)
        error = ""
        budget = self.cfg.max_tokens
        attempt = 0
        while attempt <= self.cfg.max_format_retries:
            try:
                text, finish = self._chat(messages, template.schema, budget)
            except EndpointUnreachable:
                raise
            except EndpointError as e:
                kind = "transient" if e.transient else "http"
                self._count(**{f"{kind}_failures": 1})
                raise JudgeFailure(f"{template.name}: {e}", kind) from None
            if finish == "length":
                self._count(truncated=1)
                if budget < self.cfg.max_tokens_cap:
                    budget = min(2 * budget, self.cfg.max_tokens_cap)
                    continue  # the same question with a larger budget; not a format retry
                self._count(truncated_failures=1)
                raise JudgeFailure(f"{template.name}: the reply was cut off at max_tokens={budget}", "truncated")
            if not text.strip():
                self._count(transient_failures=1)
                raise JudgeFailure(f"{template.name}: the judge returned an empty reply", "transient")
            try:
                answer = _parse(text, template.schema)
            except ValueError as e:
                self._count(format_errors=1)
                error = str(e)
                messages = messages + [{"role": "assistant", "content": text[:2000]},
                                       {"role": "user", "content": _RETRY_MESSAGE.format(error=error, schema=schema_text)}]
                attempt += 1
                if attempt <= self.cfg.max_format_retries:
                    self._count(format_retries=1)
                continue
            if self.cache is not None:
                self.cache.put(key, {"answer": answer.model_dump(mode="json")})
            return answer
        self._count(format_failures=1)
        message = (f"{template.name}: no valid answer after {self.cfg.max_format_retries + 1} attempts "
                   f"(last error: {error})")
        if self.cache is not None and self.cfg.temperature == 0:
            self.cache.put(key, {"failure": message})
        raise JudgeFailure(message, "format")

    def ask_many(self, template: Template[T], inputs: list[dict[str, Any]]) -> list[T | JudgeFailure]:
        """`ask` over many inputs with at most ``concurrency`` requests in flight, order kept.

        Per-input failures come back in place as `JudgeFailure` values;
        `EndpointUnreachable` is raised (after the in-flight requests finish).
        """
        def one(x: dict[str, Any]) -> T | JudgeFailure:
            try:
                return self.ask(template, **x)
            except JudgeFailure as e:
                return e

        if len(inputs) <= 1 or self.cfg.concurrency <= 1:
            return [one(x) for x in inputs]
        with ThreadPoolExecutor(max_workers=self.cfg.concurrency) as pool:
            return list(pool.map(one, inputs))
