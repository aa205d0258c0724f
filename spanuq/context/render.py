"""The one way sources reach the backbone: numbered in the system message, through its chat template.

An answer scored against sources is read after this input (the backbone's chat template,
``add_generation_prompt``)::

    system:  <the conversation's system message (the probe's system prompt when it has none)>

             Sources:
             [1] <title>: <text of passage 1>
             [2] <text of passage 2>          (numbers in words followed by their digits: "ten (10)")
    user:    <the question>              (every other turn of the conversation, unchanged)
    assistant: <the answer, scored>

The sources go into the system message, before every turn, so a single prompt and an OpenAI
conversation (documents in the system message, ``tool`` results) put them in the same place, and the
question is the same string with and without sources.  Passages are numbered in the order given.

**The budget.**  A rendered chat may hold at most ``max_tokens`` tokens (the backbone's context less
the room its answer needs, or ``score.context_tokens``).  Sources that do not fit are never cut
silently: they are read in **windows** (`render_windows`), each window the same conversation with
the passages that fit, in order; a passage longer than a whole window is split at whitespace into
consecutive pieces, each piece a passage of its own in a window.  Every window says exactly which
characters of which passage it read (`ReadRange`: the passage's id, number and ``[start, end)`` of
its text, and where they sit in the rendered chat, for features that read the answer's attention
to its sources).  More windows than ``max_windows`` raise `ContextError` (HTTP 413): the sources
are past every limit.  How the windows' verdicts combine is `spanuq.score.grounded`.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..llm.loading import count_tokens  # the one token count (also imported from here)
from .numbers import with_digits
from .passages import ContextError, Passage

HEADER = "Sources:"
MIN_SOURCE_TOKENS = 32  # a window with less room than this for its sources is refused


@dataclass(frozen=True)
class ReadRange:
    """Characters ``[start, end)`` of passage ``id`` (numbered ``number`` in the input) read in one window;
    ``chat_start``, ``chat_end``: where their text sits in the rendered chat, its number words with their digits
    (None if the template moved them)."""

    id: str
    number: int
    start: int
    end: int
    chat_start: int | None = None
    chat_end: int | None = None


@dataclass(frozen=True)
class RenderedChat:
    """One window: the chat the answer is read after, its length in tokens, and what of the sources it holds."""

    chat: str
    n_tokens: int
    read: tuple[ReadRange, ...]


def passage_line(number: int, p: Passage, start: int, end: int) -> tuple[str, int]:
    """``[n] title: text`` of a passage's characters [start, end), its numbers in words followed by their digits
    (`spanuq.context.numbers`), and where the text starts in the line."""
    head = f"[{number}] " + (f"{p.title}: " if p.title and start == 0 else "")
    return head + with_digits(p.text[start:end]), len(head)


def sources_block(pieces: list[tuple[int, Passage, int, int]]) -> tuple[str, list[tuple[int, int]]]:
    """The sources as the system message carries them: ``Sources:`` and one numbered line per piece
    ``(number, passage, start, end)``; returns the text and where each piece's text sits in it."""
    text, where = HEADER, []
    for number, p, s, e in pieces:
        line, at = passage_line(number, p, s, e)
        text += "\n"
        where.append((len(text) + at, len(text) + len(line)))
        text += line
    return text, where


def with_sources(messages: list[dict], block: str, system_prompt: str | None) -> list[dict]:
    """``messages`` with ``block`` at the end of the (first) system message, one made when there is none."""
    msgs = [dict(m) for m in messages]
    if msgs and msgs[0]["role"] == "system":
        msgs[0]["content"] = (msgs[0]["content"].rstrip() + "\n\n" + block) if msgs[0]["content"].strip() else block
    else:
        msgs.insert(0, {"role": "system", "content": (system_prompt.rstrip() + "\n\n" + block)
                        if system_prompt else block})
    return msgs


def apply_template(tokenizer, messages: list[dict]) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)


def render(tokenizer, messages: list[dict], pieces: list[tuple[int, Passage, int, int]],
           system_prompt: str | None = None) -> RenderedChat:
    """The chat of ``messages`` with ``pieces`` as its sources (module docstring), counted in tokens."""
    block, where = sources_block(pieces)
    chat = apply_template(tokenizer, with_sources(messages, block, system_prompt))
    at = chat.find(block)
    read = tuple(ReadRange(p.id, n, s, e, None if at < 0 else at + a, None if at < 0 else at + b)
                 for (n, p, s, e), (a, b) in zip(pieces, where))
    return RenderedChat(chat, count_tokens(tokenizer, chat), read)


def split_passage(tokenizer, text: str, max_tokens: int) -> list[tuple[int, int]]:
    """Character ranges ``[start, end)`` that tile ``text``, each at most ``max_tokens`` tokens, cut at the
    last whitespace before the limit when there is one in the piece's second half (else mid-word)."""
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    if len(offsets) <= max_tokens:
        return [(0, len(text))]
    out, start, t = [], 0, 0
    while t < len(offsets):
        if len(offsets) - t <= max_tokens:
            out.append((start, len(text)))
            break
        end = offsets[t + max_tokens][0]  # the first character of the first token past the limit
        cut = text.rfind(" ", start + (end - start) // 2, end)
        end = cut + 1 if cut > start else end
        out.append((start, end))
        start = end
        while t < len(offsets) and offsets[t][0] < start:
            t += 1
    return out


def render_windows(tokenizer, messages: list[dict], passages: list[Passage], max_tokens: int,
                   system_prompt: str | None = None, max_windows: int = 8) -> list[RenderedChat]:
    """The windows that read every character of ``passages`` (module docstring): one when they all fit in
    ``max_tokens``, else consecutive groups of passages (long ones split) each fitting it."""
    bare = render(tokenizer, messages, [], system_prompt)
    room = max_tokens - bare.n_tokens
    if room < MIN_SOURCE_TOKENS:
        raise ContextError(f"the conversation takes {bare.n_tokens:,} of the {max_tokens:,} tokens the sources may "
                           f"fill: no room is left for sources; shorten the prompt", 413)
    whole = render(tokenizer, messages, [(i, p, 0, len(p.text)) for i, p in enumerate(passages, 1)], system_prompt)
    if whole.n_tokens <= max_tokens:
        return [whole]
    pieces: list[tuple[int, Passage, int, int]] = []
    for i, p in enumerate(passages, 1):
        head = count_tokens(tokenizer, passage_line(i, p, 0, 0)[0]) + 2
        # pieces are cut on the source's own tokens; its digits ("(1766)") make each piece longer by this share
        share = count_tokens(tokenizer, p.text) / max(1, count_tokens(tokenizer, with_digits(p.text)))
        for s, e in split_passage(tokenizer, p.text, max(8, int((room - head - 8) * share))):
            pieces.append((i, p, s, e))
    windows: list[RenderedChat] = []
    group: list = []
    last: RenderedChat | None = None
    for piece in pieces:
        r = render(tokenizer, messages, group + [piece], system_prompt)
        if r.n_tokens <= max_tokens:
            group, last = group + [piece], r
            continue
        if not group:  # a piece alone over the budget: the split's estimate missed; refuse rather than cut
            raise ContextError(f"passage {piece[1].id}: a piece of {piece[3] - piece[2]:,} characters does not fit "
                               f"in {max_tokens:,} tokens", 413)
        windows.append(last)
        group, last = [piece], render(tokenizer, messages, [piece], system_prompt)
        if last.n_tokens > max_tokens:
            raise ContextError(f"passage {piece[1].id}: a piece of {piece[3] - piece[2]:,} characters does not fit "
                               f"in {max_tokens:,} tokens", 413)
        if len(windows) >= max_windows:
            break
    if group and len(windows) < max_windows:
        windows.append(last)
        group = []
    if group or len(windows) > max_windows or sum(r.end - r.start for w in windows for r in w.read) < sum(
            len(p.text) for p in passages):
        raise ContextError(f"the sources need more than {max_windows} windows of {max_tokens:,} tokens "
                           f"(score.max_context_windows): they are past every limit; give fewer or shorter passages",
                           413)
    return windows
