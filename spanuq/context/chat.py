"""A question and its sources as one rendered chat: how a pipeline row with ``context`` reaches the backbone.

The generate stage answers a prompt row with sources (`spanuq.pipeline.records.Prompt.context`) after
this string, and the extract stage reads the answer after the same string (the generation record's
``chat_prompt``): the one rendering of `spanuq.context.render`, so the probe is trained on the input
`SpanUQ.score(prompt, response, context=...)` reads — the scorer's first window, which is all of the
sources when they fit its budget (a pipeline row's sources must: the backbone answers with all of them).
"""
from __future__ import annotations

from ..config import ScoreConfig
from .passages import as_passages
from .render import render


def context_chat(tokenizer, text: str, context: list, system_prompt: str | None = None) -> str:
    """The question ``text`` after ``system_prompt`` with every passage of ``context`` rendered into it
    (`spanuq.context.render.render`); bad passages raise `ContextError` naming them."""
    limits = ScoreConfig()  # a pipeline row's sources: the scorer's default limits
    passages = as_passages(context, limits.max_context_chars, limits.max_context_passages)
    pieces = [(i, p, 0, len(p.text)) for i, p in enumerate(passages, 1)]
    return render(tokenizer, [{"role": "user", "content": text}], pieces, system_prompt).chat
