"""The answers file of `spanuq monitor`: one JSON object per line.

    {"prompt": "Who wrote Dune?", "response": "Frank Herbert wrote Dune in 1965.",
     "domain": "books", "id": "q17", "metadata": {"model": "v2", "team": "search"}}

``prompt`` and ``response`` are required strings (an empty response is scored as an unverified
empty answer); ``id`` is optional; ``answer_source`` (optional) says who wrote the answer, as the
API's field does: ``generated`` (the probe's backbone, e.g. through a server that serves it) or
``given`` (anyone else: the default), and picks that calibration; ``context`` (optional) holds the
sources the answer is read against, as the API's field does (passages: strings or ``{text, id?,
title?}``; docs/context.md); ``domain`` and every key of ``metadata`` (and any other top-level
scalar) are columns the report breaks rates down by.  A line that is not UTF-8, not JSON or
without the required fields is that row's error: the other rows are read as they are.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

RESERVED = ("prompt", "response", "id", "metadata", "answer_source", "context")
SOURCES = ("given", "generated")


@dataclass
class Row:
    line: int
    prompt: str
    response: str
    id: str | None = None
    answer_source: str = "given"  # who wrote the answer: the backbone ("generated") or anyone else
    columns: dict = field(default_factory=dict)  # domain, metadata keys, other scalars: str values
    context: list | None = None  # the sources the answer is read against (checked when it is scored)

    def request(self) -> dict:
        """The row as `SpanUQ.score_many` takes it."""
        req = {"prompt": self.prompt, "response": self.response, "answer_source": self.answer_source}
        return req if self.context is None else {**req, "context": self.context}


@dataclass
class BadRow:
    line: int
    error: str


def _scalar(v) -> bool:
    return isinstance(v, (str, int, float, bool)) or v is None


def read_rows(path: Path) -> list[Row | BadRow]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    out: list[Row | BadRow] = []
    with path.open("rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8-sig" if n == 1 else "utf-8")
            except UnicodeDecodeError as e:
                out.append(BadRow(n, f"not UTF-8 text ({e.reason} at byte {e.start} of the line)"))
                continue
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                out.append(BadRow(n, f"not JSON: {e.msg} at column {e.colno}"))
                continue
            if not isinstance(row, dict):
                out.append(BadRow(n, "a row must be a JSON object"))
                continue
            missing = [k for k in ("prompt", "response") if not isinstance(row.get(k), str)]
            if missing:
                out.append(BadRow(n, f"a row needs string {' and '.join(missing)}"))
                continue
            source = row.get("answer_source", "given")
            if source not in SOURCES:
                out.append(BadRow(n, f"answer_source is {source!r}: given or generated"))
                continue
            context = row.get("context")
            if context is not None and not isinstance(context, list):
                out.append(BadRow(n, f"context is {type(context).__name__}: a list of passages (strings or "
                                     "{text, id?, title?})"))
                continue
            cols = {k: v for k, v in row.items() if k not in RESERVED and _scalar(v)}
            meta = row.get("metadata")
            if isinstance(meta, dict):
                cols.update({k: v for k, v in meta.items() if _scalar(v)})
            out.append(Row(n, row["prompt"], row["response"], None if row.get("id") is None else str(row["id"]),
                           source, {k: "null" if v is None else str(v) for k, v in cols.items()}, context))
    return out
