"""What an OpenAI request asks SpanUQ to score: the new assistant turn, conditioned on the conversation.

The answer scored is always the one the response returns in ``message.content``: the next
assistant turn after ``messages``.  It is read by the backbone in one teacher-forced pass after
the **whole conversation**, rendered by the backbone's chat template (``add_generation_prompt``),
so earlier turns (user questions, earlier assistant answers) are its context, never scored
themselves — they were scored when they were the answer.  ``developer`` messages count as
``system`` ones.  A conversation without a system message gets the probe's own system prompt
first (the one its training answers were generated with), so a single user message is scored
exactly as ``SpanUQ.score(prompt)`` scores it; with ``--upstream`` the conversation forwarded is
this same one, so the upstream answers in the context SpanUQ reads.

``content`` is the answer with leading and trailing whitespace removed (the text scored; span
offsets index it), in both modes and streamed or not.

**Sources** (`sources`; docs/openai.md "Sources"): the answer is read against them as `SpanUQ.score(...,
context=...)` reads it (`spanuq.context.render`: numbered in the system message).  They are, in this order:

* each ``<document>…</document>`` block of a ``system`` / ``developer`` message (attributes ``id`` and
  ``title`` optional); the message's other text stays the system message;
* each ``tool`` (or legacy ``function``) message's content: a tool's result, its id the ``tool_call_id``
  (else the ``name``); an ``assistant`` message that only calls tools (``tool_calls``, no text) is left out;
* the passages of a top-level ``context`` (or ``documents``) field, as in ``POST /score``.

Any other system message text is instructions, not a source.  An upstream (``--upstream``) gets the
client's messages as they were sent (tool messages and documents where the client put them).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .records import ChatRequest, OpenAIError

DOCUMENT = re.compile(r"<document(?P<attrs>[^>]*)>(?P<text>.*?)</document>", re.S | re.I)
DOCUMENT_TAG = re.compile(r"</?document\b", re.I)  # a tag left after every closed block: unclosed or stray
ATTR = re.compile(r"""(\w+)\s*=\s*(?:"([^"]*)"|'([^']*)')""")


@dataclass(frozen=True)
class Conversation:
    messages: list[dict]  # {"role", "content"}: what the chat template renders (system prompt included, no sources)
    prompt: str  # the last user turn: ScoreResult.prompt
    chat: str  # the rendered conversation with the assistant's turn opened: the context the answer is read in
    context: list[dict] | None = None  # the sources (module docstring): passages {id, text, title?}; None: none
    forwarded: list[dict] | None = None  # what an upstream gets: the client's messages (its system prompt first)


def sources(req: ChatRequest) -> tuple[list[dict], list[dict]]:
    """(the messages without their sources, the sources) of a request (module docstring)."""
    msgs, found = [], []
    for i, m in enumerate(req.messages):
        extra = m.model_extra or {}
        if m.role in ("tool", "function"):
            text = m.text()
            pid = extra.get("tool_call_id") or m.name or f"tool-{i}"
            found.append({"id": str(pid), "text": text})
            continue
        if m.role == "assistant" and extra.get("tool_calls") and not m.text().strip():
            continue
        text = m.text()
        if m.role in ("system", "developer"):
            for k, d in enumerate(DOCUMENT.finditer(text), 1):
                attrs = {a: v1 or v2 for a, v1, v2 in ATTR.findall(d.group("attrs"))}
                found.append({"id": attrs.get("id") or f"m{i}-doc{k}", "text": d.group("text").strip(),
                              **({"title": attrs["title"]} if attrs.get("title") else {})})
            text = DOCUMENT.sub("", text).strip()
            if DOCUMENT_TAG.search(text):
                raise OpenAIError(400, f"messages[{i}]: a <document> tag without its closing </document> (or the other "
                                       "way round): its text would be read as instructions, not as a source",
                                  "invalid_messages", f"messages[{i}]")
            if not text:
                continue
        msgs.append({"role": "system" if m.role == "developer" else m.role, "content": text})
    extra = req.model_extra or {}
    for key in ("context", "documents"):
        if extra.get(key) is not None:
            given = extra[key]
            if not isinstance(given, list):
                raise OpenAIError(400, f"`{key}` must be a list of passages (strings or {{text, id?, title?}})",
                                  "invalid_value", key)
            if not given:
                raise OpenAIError(400, f"`{key}` is an empty list: give at least one passage, or leave it out",
                                  "invalid_value", key)
            for k, p in enumerate(given):
                if not (isinstance(p, str) or isinstance(p, dict) and isinstance(p.get("text"), str)):
                    raise OpenAIError(400, f"`{key}[{k}]` must be a string or {{text, id?, title?}} with `text` a "
                                           f"string, not {type(p).__name__} {str(p)[:40]}", "invalid_value", f"{key}[{k}]")
            found += [p if isinstance(p, dict) else {"text": p} for p in given]
    return msgs, found


def conversation(req: ChatRequest, tokenizer, system_prompt: str | None) -> Conversation:
    msgs, found = sources(req)
    forwarded = [{"role": "system" if m.role == "developer" else m.role, "content": m.text()} for m in req.messages]
    if found:
        forwarded = [m.model_dump(exclude_none=True) for m in req.messages]
        for i, p in enumerate(found, 1):
            p.setdefault("id", str(i))
    if not any(m["role"] == "user" for m in msgs):
        raise OpenAIError(400, "messages has no user message: there is no question to answer", "invalid_messages",
                          "messages")
    if system_prompt and msgs[0]["role"] != "system":
        msgs.insert(0, {"role": "system", "content": system_prompt})
    if system_prompt and forwarded[0]["role"] not in ("system", "developer"):
        forwarded.insert(0, {"role": "system", "content": system_prompt})
    prompt = next(m["content"] for m in reversed(msgs) if m["role"] == "user")
    try:
        chat = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    except Exception as e:  # noqa: BLE001 - a template that refuses this order of roles
        raise OpenAIError(400, f"the backbone's chat template cannot render these messages: {e}", "invalid_messages",
                          "messages") from None
    return Conversation(msgs, prompt, chat, found or None, forwarded)


def visible(text: str, stops: list[str]) -> str:
    """The part of streamed ``text`` that is surely in the final content: cut at the first stop
    string, without a tail that may still become a stop string, without leading whitespace and
    without trailing whitespace (the final content is stripped)."""
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    if cut >= 0:
        text = text[:cut]
    else:
        hold = max((k for s in stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
        text = text[: len(text) - hold]
    return text.strip()
