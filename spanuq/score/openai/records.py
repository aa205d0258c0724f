"""The OpenAI Chat Completions records `spanuq serve` reads and writes, and its one extension.

Requests follow ``POST /v1/chat/completions`` (openai-python's ``completion_create_params``):
``model``, ``messages`` (``system`` / ``developer`` / ``user`` / ``assistant``, content a string
or text parts), ``max_tokens`` (or ``max_completion_tokens``), ``temperature``, ``top_p``,
``seed``, ``stop``, ``stream`` (+ ``stream_options.include_usage``), ``frequency_penalty``,
``presence_penalty``; ``n`` must be 1; ``tool`` messages and assistant ``tool_calls`` are read as
sources (`spanuq.score.openai.conversation`).  What SpanUQ cannot honour is refused with a clear 400
(tool definitions, images or audio, logprobs, JSON response formats, n > 1), never silently ignored.

Responses are the standard ``chat.completion`` / ``chat.completion.chunk`` objects plus one
top-level object ``spanuq`` (`SpanUQExtension`); errors are OpenAI's
``{"error": {"message", "type", "param", "code"}}``.
"""
from __future__ import annotations

import time
import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..schema import ContextPassage, ScoredSpan, ScoreResult, SourceRead, Timings
from ..status import StatusReason


class OpenAIError(Exception):
    """An error answered in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``."""

    TYPES = {400: "invalid_request_error", 404: "invalid_request_error", 408: "invalid_request_error",
             413: "invalid_request_error", 422: "invalid_request_error", 429: "rate_limit_error"}

    def __init__(self, status: int, message: str, code: str | None = None, param: str | None = None,
                 type: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.type = type or self.TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def request_error(e) -> tuple[str | None, str]:
    """(param, message) of a request pydantic refused, in the request's own terms: the field as a client writes it
    (``messages[2].content``, not pydantic's ``messages.2.content.str``) and what it must be."""
    err = e.errors()[0]
    loc = list(err["loc"])
    while loc and isinstance(loc[-1], str) and (loc[-1][:1].islower() and "[" in loc[-1] or loc[-1] in _TYPE_TAGS):
        loc.pop()  # the union member pydantic tried (``str``, ``list[TextPart]``), not a field
    where = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in loc).lstrip(".") or None
    if len(loc) == 3 and loc[0] == "messages" and loc[2] == "content":
        got = e.errors()[0].get("input")
        return where, (f"{where} must be a string or a list of text parts "
                       f"([{{\"type\": \"text\", \"text\": ...}}]), not {type(got).__name__}")
    return where, f"{where or 'body'}: {err['msg']}"


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none", "literal_error"}


# ------------------------------------------------------------------ requests
class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        """The message's text; parts other than text are refused."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        out = []
        for p in self.content:
            if p.type != "text" or p.text is None:
                raise OpenAIError(400, f"a {self.role} message has a content part of type {p.type!r}; SpanUQ reads "
                                       "text only", "unsupported_content", "messages")
            out.append(p.text)
        return "".join(out)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool | None = None


class ChatRequest(BaseModel):
    """``POST /v1/chat/completions`` (the fields SpanUQ reads; other standard fields are accepted)."""

    model_config = ConfigDict(extra="allow")
    model: str
    messages: list[Message] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int | None = None
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)

    @field_validator("stop")
    @classmethod
    def _stops(cls, v):
        stops = [v] if isinstance(v, str) else list(v or [])
        if len(stops) > 4:
            raise ValueError("at most 4 stop sequences")
        if any(not s for s in stops):
            raise ValueError("a stop sequence is empty")
        return stops

    def budget(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def refuse_unsupported(self) -> None:
        """A clear 400 for what SpanUQ cannot honour (it never ignores a parameter that changes the answer)."""
        extra = self.model_extra or {}
        if self.n not in (None, 1):
            raise OpenAIError(400, f"n={self.n}: SpanUQ returns and scores one choice; send n=1", "unsupported_value",
                              "n")
        for key in ("tools", "functions"):
            if extra.get(key):
                raise OpenAIError(400, f"`{key}` is not supported: SpanUQ scores text answers, not tool calls",
                                  "unsupported_parameter", key)
        if extra.get("logprobs"):
            raise OpenAIError(400, "`logprobs` is not supported by this server", "unsupported_parameter", "logprobs")
        fmt = extra.get("response_format")
        if isinstance(fmt, dict) and fmt.get("type") not in (None, "text"):
            raise OpenAIError(400, f"response_format {fmt.get('type')!r} is not supported (text only)",
                              "unsupported_parameter", "response_format")
        modalities = extra.get("modalities")
        if modalities and any(m != "text" for m in modalities):
            raise OpenAIError(400, "only the text modality is supported", "unsupported_parameter", "modalities")
        for m in self.messages:
            m.text()  # refuses non-text parts (tool messages and calls are sources: conversation.py)


# ------------------------------------------------------------------ the extension
class ProbeInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(description="how the probe was named when loaded: `shipped`, a folder or an MLflow URI")
    sha256: str = Field(description="sha256 of the probe's weights (model.safetensors)")
    backbone: str
    description: str


class SpanUQExtension(BaseModel):
    """The ``spanuq`` object of a completion (and of a streamed chunk that carries a span update)."""

    model_config = ConfigDict(extra="forbid")
    object: Literal["spanuq.score"] = "spanuq.score"
    done: bool = Field(description="scores of the whole answer (true), or of the content streamed so far")
    status: Literal["scored", "unverified"]
    status_reasons: list[StatusReason]
    content_chars: int = Field(description="the characters of message.content these scores cover, content[:content_chars]: "
                                           "the whole content (done), or (streamed) the scored prefix, which may end "
                                           "before the content streamed so far (the rest is not scored yet)")
    spans: list[ScoredSpan] = Field(description="start/end are character (code point) offsets into message.content")
    u_seq: float | None = Field(description="û_seq, the answer-level score; null when unverified without one")
    n_tokens: int
    windows: int
    truncated: bool
    validity_threshold: float
    answer_source: Literal["generated", "given"] = Field(
        description="generated: the backbone answered; given: an upstream server answered and SpanUQ scored it")
    conformal: dict | None = None
    flag_threshold: float = Field(default=0.5, description="a span with û at or above this is shown as likely wrong")
    calibration_source: str = Field(default="generated", description="which calibration mapped û (`+context`: fitted "
                                    "with sources)")
    context: list[ContextPassage] | None = Field(default=None, description="the sources read (docs/openai.md): "
                                                 "documents, tool results, `context`; null without")
    context_read: list[SourceRead] = Field(default_factory=list, description="which characters of which passage "
                                           "each window read")
    context_windows: int = 0
    probe: ProbeInfo
    timings: Timings


def extension(result: ScoreResult, probe: ProbeInfo, done: bool) -> SpanUQExtension:
    data = result.model_dump()
    return SpanUQExtension(done=done, content_chars=len(result.answer), probe=probe,
                           **{k: data[k] for k in SpanUQExtension.model_fields
                              if k in data and k not in ("done", "probe")})


# ------------------------------------------------------------------ responses
def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def completion(*, id: str, model: str, content: str, finish_reason: str, usage: dict | None,
               ext: SpanUQExtension, created: int | None = None, system_fingerprint: str | None = None) -> dict:
    return {"id": id, "object": "chat.completion", "created": created or int(time.time()), "model": model,
            "system_fingerprint": system_fingerprint,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content, "refusal": None},
                         "logprobs": None, "finish_reason": finish_reason}],
            "usage": usage, "spanuq": ext.model_dump(mode="json")}


def chunk(*, id: str, model: str, created: int, delta: dict, finish_reason: str | None = None,
          ext: SpanUQExtension | None = None, usage: dict | None = None, choices: bool = True) -> dict:
    out = {"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
           "system_fingerprint": None,
           "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}] if choices else []}
    if usage is not None:
        out["usage"] = usage
    if ext is not None:
        out["spanuq"] = ext.model_dump(mode="json")
    return out


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def model_card(model_id: str, owned_by: str = "spanuq", created: int | None = None) -> dict:
    return {"id": model_id, "object": "model", "created": created or int(time.time()), "owned_by": owned_by}
