"""Span targets: claims' character spans → response-token spans (DESIGN.md `SpanTarget`).

The response tokens are the canonical tokenisation of the greedy text
(``tokenizer(text, add_special_tokens=False)``, what `generate` stores and what
`extract` feeds the backbone).  A fast tokenizer's offset mapping gives each token
its characters [s_t, e_t); a claim [start, end) covers every token that overlaps it:

    tok_start = min{t : s_t < end and e_t > start},   tok_end = max{...}   (inclusive)

Byte-level BPE may split one multi-byte character over several tokens, which then
share its offsets: all of them are covered, so a span never cuts a character in
half.  Overlapping claims stay overlapping; identical token spans of two claims
are both kept (they are two claims).
"""
from __future__ import annotations

from ..llm.loading import token_offsets
from ..pipeline.records import Claim, SpanTarget


def char_span_to_tokens(offsets: list[tuple[int, int]], start: int, end: int) -> tuple[int, int] | None:
    """Inclusive token span covering characters [start, end); None if no token overlaps."""
    hit = [t for t, (s, e) in enumerate(offsets) if e > s and s < end and e > start]
    return (hit[0], hit[-1]) if hit else None


def span_targets(claims: list[Claim], text: str, token_ids: list[int], tokenizer) -> tuple[list[SpanTarget], int]:
    """SpanTargets of `claims` over the response tokens, and how many claims could not be placed.

    Raises ValueError when `tokenizer` does not reproduce `token_ids` (the
    generations were made with another tokenizer: re-run `spanuq generate`).
    """
    ids, offsets = token_offsets(tokenizer, text)
    if ids != list(token_ids):
        raise ValueError("the tokenizer does not reproduce the stored response tokens; "
                         "were the generations made with another backbone? re-run `spanuq generate`")
    out, lost = [], 0
    for c in claims:
        span = char_span_to_tokens(offsets, c.start, c.end)
        if span is None:
            lost += 1
            continue
        out.append(SpanTarget(claim_id=c.id, text=text[c.start:c.end], char_start=c.start, char_end=c.end,
                              tok_start=span[0], tok_end=span[1], u=c.u))
    return out, lost
