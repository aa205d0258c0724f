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
"""
from __future__ import annotations

from dataclasses import dataclass

from .records import ChatRequest, OpenAIError


@dataclass(frozen=True)
class Conversation:
    messages: list[dict]  # {"role", "content"}: what the chat template renders (system prompt included)
    prompt: str  # the last user turn: ScoreResult.prompt
    chat: str  # the rendered conversation with the assistant's turn opened: the context the answer is read in


def conversation(req: ChatRequest, tokenizer, system_prompt: str | None) -> Conversation:
    msgs = [{"role": "system" if m.role == "developer" else m.role, "content": m.text()} for m in req.messages]
    if not any(m["role"] == "user" for m in msgs):
        raise OpenAIError(400, "messages has no user message: there is no question to answer", "invalid_messages",
                          "messages")
    if system_prompt and msgs[0]["role"] != "system":
        msgs.insert(0, {"role": "system", "content": system_prompt})
    prompt = next(m["content"] for m in reversed(msgs) if m["role"] == "user")
    try:
        chat = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    except Exception as e:  # noqa: BLE001 - a template that refuses this order of roles
        raise OpenAIError(400, f"the backbone's chat template cannot render these messages: {e}", "invalid_messages",
                          "messages") from None
    return Conversation(msgs, prompt, chat)


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
