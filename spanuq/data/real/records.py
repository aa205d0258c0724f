"""`RealItem`: one text read against real sources, as every imported set is normalised to.

A WiCE claim with its cited article, an XQuAD question with its paragraph and gold answers, a SummEdits
summary with its document: ``answer`` is the text read against ``sources`` (None for a question the
backbone answers later), ``marks`` the characters of it that people (or the set's edit) mark as not
backed by the sources, ``label`` the item's own verdict where the set gives one.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

SPLITS = ("train", "dev", "test")
LABELS = ("supported", "partially_supported", "not_supported")


@dataclass(frozen=True)
class RealItem:
    id: str  # "<set>/<the set's own id>"
    set: str
    split: str  # train | dev | test: by ``article``, never one article in two splits
    article: str  # the unit a split keeps whole (a Wikipedia article, a document)
    sources: list[dict]  # passages as the API takes them: {"id", "title"?, "text"}
    answer: str | None = None
    question: str | None = None
    marks: list[tuple[int, int]] | None = None  # [start, end) of ``answer`` not backed; None: not marked per token
    label: str | None = None  # one of LABELS, where the set gives a verdict on the whole answer
    references: list[str] | None = None  # gold answers (QA)
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.split not in SPLITS:
            raise ValueError(f"{self.id}: split {self.split!r} is not one of {SPLITS}")
        if self.label is not None and self.label not in LABELS:
            raise ValueError(f"{self.id}: label {self.label!r} is not one of {LABELS}")
        for s, e in self.marks or []:
            if not (self.answer is not None and 0 <= s < e <= len(self.answer)):
                raise ValueError(f"{self.id}: mark [{s}, {e}) is outside the answer")

    def to_json(self) -> dict:
        d = asdict(self)
        d["marks"] = None if self.marks is None else [list(m) for m in self.marks]
        return {k: v for k, v in d.items() if v is not None and v != {}}

    @classmethod
    def from_json(cls, d: dict) -> "RealItem":
        marks = d.get("marks")
        return cls(**{**d, "marks": None if marks is None else [tuple(m) for m in marks]})
