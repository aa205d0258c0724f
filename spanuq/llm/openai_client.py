"""A small client for OpenAI-compatible endpoints (vLLM, llama.cpp server, providers).

Used by the server generation backend and by the label judge: one place for
retries with exponential back-off on timeouts, 429 and 5xx, and for the API key,
which is read from the environment variable named in params and never logged.
"""
from __future__ import annotations

import json
import logging
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx

log = logging.getLogger(__name__)

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class EndpointUnreachable(RuntimeError):
    """The server could not be reached at all (connection refused, DNS, ...)."""


class EndpointError(RuntimeError):
    """The server answered with a non-retryable error, or retries ran out.

    ``transient`` is True when the same request may well succeed later (timeouts,
    429 / 5xx or a reply that is not JSON, after every retry): such a failure must
    never be cached as a result.  ``status`` and ``body``: the HTTP status and body the server
    answered with, if it did."""

    def __init__(self, message: str, transient: bool = False, status: int | None = None, body: str | None = None):
        super().__init__(message)
        self.transient, self.status, self.body = transient, status, body


@dataclass
class CallStats:
    calls: int = 0
    retries: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add_usage(self, usage: dict | None) -> None:
        if usage:
            self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
            self.completion_tokens += int(usage.get("completion_tokens") or 0)


@dataclass
class OpenAIClient:
    base_url: str
    api_key_env: str | None = None
    timeout_s: float = 60.0
    max_retries: int = 4
    backoff_s: float = 1.0
    stats: CallStats = field(default_factory=CallStats)
    # called on every transport error, before a retry: raises if the server is known to be dead
    # (`LlamaCppServer.raise_if_dead`), so a crash is reported as a crash, not as "cannot reach"
    liveness: Callable[[], None] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.base_url = self.base_url.rstrip("/")
        headers = {"Content-Type": "application/json"}
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise EndpointError(f"environment variable {self.api_key_env} (the API key) is not set")
            headers["Authorization"] = f"Bearer {key}"
        self._http = httpx.Client(timeout=self.timeout_s, headers=headers)

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIClient(base_url={self.base_url!r}, api_key_env={self.api_key_env!r})"

    def close(self) -> None:
        self._http.close()

    def check(self) -> list[str]:
        """Ids of the served models; a clear error if the endpoint is down."""
        try:
            r = self._http.get(f"{self.base_url}/models", timeout=min(self.timeout_s, 10))
            r.raise_for_status()
        except httpx.TransportError as e:
            if self.liveness:
                self.liveness()
            raise EndpointUnreachable(
                f"cannot reach the OpenAI-compatible server at {self.base_url} ({type(e).__name__}); "
                "is it running? (e.g. `spanuq llama-server`, `vllm serve MODEL`)"
            ) from None
        except httpx.HTTPStatusError as e:
            raise EndpointError(f"{self.base_url}/models answered HTTP {e.response.status_code}") from None
        return [m.get("id", "") for m in r.json().get("data", [])]

    def post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        """POST with retries on transport errors, timeouts, 429 and 5xx."""
        url = f"{self.base_url}/{path.lstrip('/')}"
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                self.stats.retries += 1
                delay = self.backoff_s * (2 ** (attempt - 1)) * (0.5 + random.random())
                time.sleep(delay)
            self.stats.calls += 1
            try:
                r = self._http.post(url, json=payload)
            except httpx.TransportError as e:
                if self.liveness:
                    self.liveness()
                if not isinstance(e, httpx.ConnectError):  # timeouts, resets
                    last = f"{e.__class__.__name__}"
                    continue
                last = f"connection failed ({e.__class__.__name__})"
                if attempt == self.max_retries:
                    self.stats.failures += 1
                    raise EndpointUnreachable(f"cannot reach {url}: {last}") from None
                continue
            if r.status_code in RETRYABLE_STATUS:
                last = f"HTTP {r.status_code}"
                retry_after = r.headers.get("retry-after")
                if retry_after and retry_after.replace(".", "", 1).isdigit():
                    time.sleep(min(float(retry_after), 30.0))
                continue
            if r.status_code >= 400:
                self.stats.failures += 1
                raise EndpointError(f"{url} answered HTTP {r.status_code}: {r.text[:300]}", status=r.status_code,
                                    body=r.text)
            try:
                data = r.json()
            except ValueError:  # a proxy's HTML error page, a cut-off body: try again
                last = f"HTTP {r.status_code} with a body that is not JSON ({r.text[:80]!r})"
                continue
            if not isinstance(data, dict):
                last = f"HTTP {r.status_code} with JSON that is not an object"
                continue
            self.stats.add_usage(data.get("usage"))
            return data
        self.stats.failures += 1
        raise EndpointError(f"{url}: gave up after {self.max_retries + 1} attempts (last: {last})", transient=True,
                            status=r.status_code if last.startswith("HTTP") else None)

    def stream(self, path: str, payload: dict[str, Any]):
        """POST with ``"stream": true``: yields each Server-Sent Event's JSON object as it arrives,
        until ``data: [DONE]``.  No retries (tokens already yielded cannot be taken back); closing
        the generator closes the connection, which stops the server's generation."""
        url = f"{self.base_url}/{path.lstrip('/')}"
        self.stats.calls += 1
        try:
            with self._http.stream("POST", url, json={**payload, "stream": True}) as r:
                if r.status_code >= 400:
                    self.stats.failures += 1
                    body = r.read().decode("utf-8", "replace")
                    raise EndpointError(f"{url} answered HTTP {r.status_code}: {body[:300]!r}",
                                        transient=r.status_code in RETRYABLE_STATUS, status=r.status_code, body=body)
                for line in r.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    event = json.loads(data)
                    self.stats.add_usage(event.get("usage"))
                    yield event
        except httpx.TransportError as e:
            if self.liveness:
                self.liveness()
            self.stats.failures += 1
            raise EndpointUnreachable(f"{url}: the stream broke ({type(e).__name__})") from None
