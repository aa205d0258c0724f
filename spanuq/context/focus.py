"""Long sources read in part: the pieces most relevant to the question, up to a token budget.

The backbone's pass over the sources is the whole added cost of scoring with them (docs/context.md
"Cost"): every token of the sources goes through all its layers before the answer is read.  With
``score.context_focus_tokens`` = B > 0, sources of more than B tokens are **focused**:

1. each passage is cut into pieces of whole sentences, at most `PIECE_TOKENS` tokens each
   (`pieces`; a sentence longer than that is split at whitespace, `render.split_passage`);
2. the pieces are ranked by BM25 against the question — the conversation's user turns — with the
   retrieval the label stage and ``spanuq score --corpus`` use (`spanuq.context.retrieval`);
3. the best pieces are kept while their tokens (counted as rendered, ``[n]``, title and digits all) fit in B,
   and read in the order they appear in the sources (passages keep their numbers).

The query is the question alone, never the answer: what an answer is read after does not depend on
the answer, so the backbone's own answer (written after the focused sources) and the same answer
scored again read the same input, and every answer to one question shares its KV cache
(``score.prefix_cache``).  Pieces with no word of the question score 0 and come last, in reading
order.  Every result lists the characters it read (``context_read``); a span no read piece backs
reads as unsupported, as one no source backs.  B = 0 reads every character (in windows past the
backbone's budget, `render.render_windows`).
"""
from __future__ import annotations

import re

import numpy as np

from ..llm.loading import count_tokens
from .passages import Passage
from .render import passage_line, split_passage

PIECE_TOKENS = 96  # a piece: whole sentences; a passage this short stays whole (what "it" names stays with it)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Character ranges ``[start, end)`` of ``text``'s sentences (ends at . ! ? before whitespace), tiling it."""
    cuts = [m.end() for m in _SENTENCE_END.finditer(text)]
    starts = [0] + cuts
    return [(s, e) for s, e in zip(starts, cuts + [len(text)]) if e > s]


def pieces(tokenizer, p: Passage, max_tokens: int = PIECE_TOKENS) -> list[tuple[int, int]]:
    """Character ranges that tile passage ``p``: consecutive whole sentences, at most ``max_tokens`` tokens
    each (a longer sentence alone, split at whitespace)."""
    out: list[tuple[int, int]] = []
    start = end = n = 0
    for s, e in sentence_spans(p.text):
        k = count_tokens(tokenizer, p.text[s:e])
        if k > max_tokens:
            if end > start:
                out.append((start, end))
            out += [(s + a, s + b) for a, b in split_passage(tokenizer, p.text[s:e], max_tokens)]
            start = end = e
            n = 0
        elif n + k > max_tokens and end > start:
            out.append((start, end))
            start, end, n = s, e, k
        else:
            end, n = e, n + k
    if end > start:
        out.append((start, end))
    return out


def question_of(messages: list[dict]) -> str:
    """The query sources are focused on: the text of the conversation's user turns."""
    def text(c) -> str:
        if isinstance(c, list):  # OpenAI content parts
            return " ".join(x.get("text", "") for x in c if isinstance(x, dict))
        return c if isinstance(c, str) else ""
    return "\n".join(text(m.get("content")) for m in messages if m.get("role") == "user")


def focus(tokenizer, passages: list[Passage], question: str, budget: int) -> list[tuple[int, Passage, int, int]]:
    """The pieces ``(number, passage, start, end)`` of ``passages`` read when they are focused on ``question``
    within ``budget`` tokens (module docstring), in reading order; at least the best piece."""
    from .retrieval import BM25Retriever

    all_pieces = [(i, p, s, e) for i, p in enumerate(passages, 1) for s, e in pieces(tokenizer, p)]
    retriever = BM25Retriever.build([Passage(str(k), p.text[s:e], p.title)
                                     for k, (_, p, s, e) in enumerate(all_pieces)])
    scores = np.zeros(len(all_pieces))
    for hit, score in retriever.search(question, len(all_pieces)):
        scores[int(hit.id)] = score
    order = sorted(range(len(all_pieces)), key=lambda k: (-scores[k], k))
    kept, used = [], 0
    for k in order:
        n, p, s, e = all_pieces[k]
        cost = count_tokens(tokenizer, "\n" + passage_line(n, p, s, e)[0])
        if kept and used + cost > budget:
            continue
        kept.append(k)
        used += cost
    return [all_pieces[k] for k in sorted(kept)]
