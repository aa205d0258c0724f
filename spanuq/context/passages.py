"""What a source is, and the checks on the ``context`` a user gives.

``context`` is a list of passages, each a string or ``{"text": ..., "id": ...?, "title": ...?}``
(a retrieved passage, a tool result, a document).  A passage without an id is named by its
place, ``"1"``, ``"2"``, ... as it is numbered in the backbone's input (`spanuq.context.render`).
Bad input is refused before any model is called, with a `ContextError` that names the passage.
"""
from __future__ import annotations

from dataclasses import dataclass


class ContextError(ValueError):
    """Sources that cannot be read; ``status`` is the HTTP status the service answers with."""

    def __init__(self, message: str, status: int = 422):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Passage:
    id: str
    text: str
    title: str | None = None

    @property
    def indexed_text(self) -> str:
        return f"{self.title}. {self.text}" if self.title else self.text


def as_passages(context, max_chars: int, max_passages: int) -> list[Passage]:
    """The passages of a user's ``context`` (module docstring), checked: a list, not empty, each passage
    a non-empty string (or a dict with one as ``text``), ids unique, at most ``max_passages`` passages
    and ``max_chars`` characters in all (``score.max_context_passages``, ``score.max_context_chars``)."""
    if isinstance(context, (str, bytes)) or not isinstance(context, (list, tuple)):
        raise ContextError(f"context must be a list of passages (strings or {{'text': ...}} objects), "
                           f"not {type(context).__name__}")
    if not context:
        raise ContextError("context is an empty list: give at least one passage, or leave context out to score "
                           "without sources")
    if len(context) > max_passages:
        raise ContextError(f"context has {len(context):,} passages; the limit is {max_passages:,} "
                           "(score.max_context_passages)", 413)
    out: list[Passage] = []
    for i, p in enumerate(context, 1):
        out.append(_passage(p, i))
    total = sum(len(p.text) + len(p.title or "") for p in out)
    if total > max_chars:
        raise ContextError(f"context has {total:,} characters; the limit is {max_chars:,} "
                           "(score.max_context_chars)", 413)
    ids = [p.id for p in out]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ContextError(f"context passage ids must be unique; repeated: {', '.join(dup)}")
    return out


def _passage(p, i: int) -> Passage:
    if isinstance(p, Passage):
        text, pid, title = p.text, p.id, p.title
    elif isinstance(p, dict):
        unknown = sorted(set(p) - {"text", "id", "title"})
        if unknown:
            raise ContextError(f"context passage {i}: unknown keys {unknown} (a passage has text, id, title)")
        text, pid, title = p.get("text"), p.get("id", str(i)), p.get("title")
    else:
        text, pid, title = p, str(i), None
    if not isinstance(text, str):
        raise ContextError(f"context passage {i} must be a string (or {{'text': <string>}}), "
                           f"not {type(text).__name__}")
    if not text.strip():
        raise ContextError(f"context passage {i} is empty")
    if not isinstance(pid, (str, int)) or isinstance(pid, bool) or not str(pid).strip():
        raise ContextError(f"context passage {i}: its id must be a non-empty string")
    if title is not None and not isinstance(title, str):
        raise ContextError(f"context passage {i}: its title must be a string")
    return Passage(str(pid), text, title or None)
