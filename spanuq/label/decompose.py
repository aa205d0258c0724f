"""Claim decomposition (paper App. D.2, Stage 2): an answer → atomic, self-contained claims.

The judge returns, for each claim, a self-contained sentence (coreferences
resolved: "He was born in 1879" → "Albert Einstein was born in 1879") and the
exact span of the answer that states it.  Spans are checked against the answer:
a span that is not there verbatim is re-anchored by fuzzy matching (counted as
repaired) or, below ``repair_min_score``, dropped (counted as dropped).
"""
from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, Field

from .judge import Judge, JudgeFailure, Template
from .spans import anchor_span


class ClaimOut(BaseModel):
    claim: str = Field(description="one atomic, self-contained factual claim; pronouns replaced by names")
    span: str = Field(description="the exact words of the answer that state this claim, copied verbatim")


class Decomposition(BaseModel):
    claims: list[ClaimOut]


DECOMPOSE = Template(
    name="decompose",
    version=2,
    system=(
        "You split answers into atomic factual claims. An atomic claim states exactly one "
        "verifiable fact, e.g. 'Barack Obama was born in Hawaii', not 'Barack Obama was born in "
        "Hawaii and graduated from Harvard'. Reply with JSON only.\n\n"
        "Example.\nAnswer: Marie Curie was a Polish physicist. She won the Nobel Prize in 1903.\n"
        'JSON: {"claims": [{"claim": "Marie Curie was Polish.", "span": "Polish"}, '
        '{"claim": "Marie Curie was a physicist.", "span": "physicist"}, '
        '{"claim": "Marie Curie won the Nobel Prize.", "span": "won the Nobel Prize"}, '
        '{"claim": "Marie Curie won the Nobel Prize in 1903.", "span": "1903"}]}'
    ),
    user=(
        "Question: {question}\n\nAnswer: {answer}\n\n"
        "List every atomic factual claim the answer makes. For each claim give:\n"
        '- "claim": the claim as a self-contained sentence (replace pronouns and vague '
        "references with the names they refer to);\n"
        '- "span": the shortest passage of the answer that states the claim, copied exactly, '
        "character for character.\n"
        "Skip opinions, greetings and statements with no factual content. If there is no factual "
        'claim, return an empty list.\nReply with JSON: {{"claims": [{{"claim": ..., "span": ...}}]}}'
    ),
    schema=Decomposition,
)


@dataclass(frozen=True)
class DecomposedClaim:
    text: str  # self-contained claim
    start: int  # char span in the answer, [start, end)
    end: int
    repaired: bool


@dataclass
class DecomposeResult:
    claims: list[DecomposedClaim]
    repaired: int = 0
    dropped: int = 0


def anchor_claims(answer: str, out: Decomposition, min_score: float, min_chars: int = 1,
                  max_claims: int | None = None) -> DecomposeResult:
    """Anchor the judge's spans in `answer`; repair by fuzzy matching or drop."""
    res = DecomposeResult([])
    seen: set[tuple[int, int, str]] = set()
    for c in out.claims:
        a = anchor_span(answer, c.span, min_score, min_chars) if c.claim.strip() else None
        if a is None:
            res.dropped += 1
            continue
        key = (a.start, a.end, c.claim.strip())
        if key in seen:  # the same claim twice
            continue
        seen.add(key)
        res.repaired += a.repaired
        res.claims.append(DecomposedClaim(c.claim.strip(), a.start, a.end, a.repaired))
    if max_claims is not None and len(res.claims) > max_claims:
        res.claims = res.claims[:max_claims]
    return res


def claim_texts(out: Decomposition | JudgeFailure) -> list[str] | None:
    """The claims of a sample (spans not needed there); None for a failed decomposition."""
    if isinstance(out, JudgeFailure):
        return None
    return [c.claim.strip() for c in out.claims if c.claim.strip()]


def decompose(judge: Judge, question: str, answer: str, min_score: float = 80.0,
              min_chars: int = 1, max_claims: int | None = None) -> DecomposeResult:
    """Decompose one answer; raises `JudgeFailure` when the judge gives no valid answer."""
    out = judge.ask(DECOMPOSE, question=question, answer=answer)
    return anchor_claims(answer, out, min_score, min_chars, max_claims)
