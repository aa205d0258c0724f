"""A question and its sources as one rendered chat: how a pipeline row with ``context`` reaches the backbone.

The generate stage answers a prompt row with sources (`spanuq.pipeline.records.Prompt.context`) after
this string, and the extract stage reads the answer after the same string (the generation record's
``chat_prompt``): the one rendering of `spanuq.context.render`, so the probe is trained on the input
`SpanUQ.score(prompt, response, context=...)` reads — the scorer's first window, which is all of the
sources when they fit its budget (a pipeline row's sources must: the backbone answers with all of them).
"""
from __future__ import annotations

from typing import Sequence

from ..config import ScoreConfig
from .passages import Passage, as_passages
from .render import RenderedChat, render


def question_chat(tokenizer, question: str, passages: Sequence[Passage | str],
                  system_prompt: str | None = None) -> RenderedChat:
    """The one user turn ``question`` after ``system_prompt`` with every passage whole, numbered in order
    (`spanuq.context.render.render`; a string is passage ``str(its number)``): a pipeline row's input, and
    the grounded bench's and the grounded training slots' (`spanuq.bench.grounded_run`, `spanuq.train.grounded_slots`)."""
    passages = [p if isinstance(p, Passage) else Passage(str(i), p) for i, p in enumerate(passages, 1)]
    pieces = [(i, p, 0, len(p.text)) for i, p in enumerate(passages, 1)]
    return render(tokenizer, [{"role": "user", "content": question}], pieces, system_prompt)


def context_chat(tokenizer, text: str, context: list, system_prompt: str | None = None) -> str:
    """The question ``text`` after ``system_prompt`` with every passage of ``context`` rendered into it
    (`question_chat`); bad passages raise `ContextError` naming them."""
    limits = ScoreConfig()  # a pipeline row's sources: the scorer's default limits
    return question_chat(tokenizer, text, as_passages(context, limits.max_context_chars, limits.max_context_passages),
                         system_prompt).chat
