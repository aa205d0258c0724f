"""Claim verification (paper App. D.2, Stage 3): claim + top-k BM25 passages → verdict.

The judge classifies each claim as supported / unsupported / ambiguous against
the retrieved passages only; ambiguous (outdated, subjective, partly supported)
counts 0.5 (`VERDICT_SCORE`).  Without a corpus (``label.corpus: null``) the judge
verifies from its own knowledge (`VERIFY_CLOSED_BOOK`, FActScore's "no retrieval"
setting) — weaker, and said so in the label report.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from ..pipeline.records import VERDICT_SCORE
from .judge import Judge, JudgeFailure, Template
from ..context.retrieval import BM25Retriever, Passage

MAX_PASSAGE_CHARS = 1200


class VerdictOut(BaseModel):
    verdict: Literal["supported", "unsupported", "ambiguous"]
    reason: str = ""


VERIFY = Template(
    name="verify",
    version=1,
    system=(
        "You check factual claims against evidence passages. Use only the passages, not your own "
        "knowledge. Reply with JSON only."
    ),
    user=(
        "Passages:\n{passages}\n\nClaim: {claim}\n\n"
        'Is the claim supported by the passages? Answer "supported" if the passages state or clearly '
        'imply it, "unsupported" if they contradict it or say nothing that backs it, and "ambiguous" '
        "if they back it only in part, it depends on time or opinion, or the passages are unclear.\n"
        'Reply with JSON: {{"verdict": "supported" | "unsupported" | "ambiguous", "reason": "<one short sentence>"}}'
    ),
    schema=VerdictOut,
)


VERIFY_CLOSED_BOOK = Template(
    name="verify_closed_book",
    version=1,
    system="You check factual claims using your own knowledge. Reply with JSON only.",
    user=(
        "Claim: {claim}\n\n"
        'Is the claim true? Answer "supported" if it is true, "unsupported" if it is false, and '
        '"ambiguous" if it is partly true, depends on time or opinion, or you do not know.\n'
        'Reply with JSON: {{"verdict": "supported" | "unsupported" | "ambiguous", "reason": "<one short sentence>"}}'
    ),
    schema=VerdictOut,
)


@dataclass(frozen=True)
class Verification:
    verdict: str
    score: float  # 1 / 0 / 0.5
    evidence: tuple[str, ...]  # passage ids shown to the judge


def format_passages(hits: list[tuple[Passage, float]]) -> str:
    if not hits:
        return "(no passage found)"
    lines = []
    for p, _ in hits:
        text = p.text if len(p.text) <= MAX_PASSAGE_CHARS else p.text[:MAX_PASSAGE_CHARS] + " ..."
        lines.append(f"[{p.id}] {p.title + ': ' if p.title else ''}{text}")
    return "\n".join(lines)


def verify_claims(judge: Judge, retriever: BM25Retriever | None, claims: list[str],
                  top_k: int) -> list[Verification | JudgeFailure]:
    """One verdict per claim (or a `JudgeFailure` in its place), order kept.

    With ``retriever=None`` the judge answers closed-book (no evidence ids)."""
    if retriever is None:
        hits: list[list[tuple[Passage, float]]] = [[] for _ in claims]
        outs = judge.ask_many(VERIFY_CLOSED_BOOK, [{"claim": c} for c in claims])
    else:
        hits = retriever.search_many(claims, top_k)
        inputs = [{"claim": c, "passages": format_passages(h)} for c, h in zip(claims, hits)]
        outs = judge.ask_many(VERIFY, inputs)
    return [o if isinstance(o, JudgeFailure)
            else Verification(o.verdict, VERDICT_SCORE[o.verdict], tuple(p.id for p, _ in h))
            for o, h in zip(outs, hits)]


def verify_against(judge: Judge, claims: list[str], passages: list[Passage]) -> list[Verification | JudgeFailure]:
    """One verdict per claim against the given ``passages`` (a prompt row's sources: every claim is shown
    all of them, no retrieval), order kept."""
    shown = format_passages([(p, 1.0) for p in passages])
    outs = judge.ask_many(VERIFY, [{"claim": c, "passages": shown} for c in claims])
    ids = tuple(p.id for p in passages)
    return [o if isinstance(o, JudgeFailure) else Verification(o.verdict, VERDICT_SCORE[o.verdict], ids)
            for o in outs]
