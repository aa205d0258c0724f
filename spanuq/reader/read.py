"""`Reader`: an answer read against its sources, word by word, then span by span.

    reader = Reader.load(folder)                       # model.safetensors + config.json (`spanuq.reader.model`)
    out = reader.read(["passage", ...], "the answer", question="the question")
    out.spans            # [(start, end)] characters of each span (`spanuq.reader.spans`)
    out.u_raw            # each span's chance that the sources do not back it, before calibration
    out.passage          # the index of the passage each span was read against (its best-aligned words' passage)

Every sentence of every passage is read (`spanuq.reader.features`); nothing of the sources is cut.  A reader
trained with the backbone's readings (`spanuq.reader.backbone`) takes them from ``reader.backbone``, the
scorer's frozen LLM (set by the scorer; reading without it is an error).  The
reader's calibrations — how raw û becomes what a user sees, per answer source — are in ``config.json``
(``extra.calibration``, fitted on real dev items by `spanuq.train.reader`) and reach the scorer as its
with-sources calibration (`spanuq.model.calibration.Calibration.grounded`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .backbone import Backbone, backbone_rows
from .encoder import load_encoder
from .features import FEATURES, READER_FEATURES, word_rows
from .model import load, with_neighbours
from .spans import span_scores, spans_of


@dataclass(frozen=True)
class Reading:
    words: list[tuple[int, int]]
    p: np.ndarray  # per word: the chance the sources do not back it
    groups: list[list[int]]  # word indices of each span
    spans: list[tuple[int, int]]  # characters of each span
    u_raw: np.ndarray  # per span: the highest p of its words
    passage: list[int]  # per span: the passage of the source piece most like its best-backed content word
    x: np.ndarray  # the words' feature rows (`spanuq.reader.features.FEATURES`)

    @property
    def u_seq_raw(self) -> float:
        """The answer's raw score: its least-backed span (0 for an answer without content words)."""
        return float(self.u_raw.max()) if len(self.u_raw) else 0.0


class Reader:
    def __init__(self, net, folder: Path | None = None, backbone: Backbone | None = None, readings_cache=None):
        self.net, self.folder = net, folder
        self.encoder = load_encoder(net.cfg.encoder)
        self.columns = [READER_FEATURES.index(f) for f in net.cfg.features]
        self.backbone, self.readings_cache = backbone, readings_cache  # the cache: a training run's, else None

    @property
    def needs_backbone(self) -> bool:
        """Whether the net reads the backbone's readings (it was trained with them)."""
        return any(c >= len(FEATURES) for c in self.columns)

    @classmethod
    def load(cls, folder: str | Path) -> "Reader":
        return cls(load(Path(folder)), Path(folder))

    @property
    def calibration(self) -> dict:
        """{answer source: mapping} as `Calibration.grounded` takes it (empty when none was fitted)."""
        return dict(self.net.cfg.extra.get("calibration") or {})

    def read(self, passages: list[str], answer: str, question: str | None = None,
             entities: list[tuple[int, int]] = ()) -> Reading:
        """``answer`` read against ``passages`` after ``question``; ``entities``: characters of its names and
        numbers (spaCy's, when the caller has it), each kept whole as one span."""
        rows = word_rows(self.encoder, passages, answer, question)
        x = rows.x
        if self.needs_backbone and rows.words:
            if self.backbone is None:
                raise RuntimeError(f"the reader in {self.folder} reads the backbone's readings: give it the backbone "
                                   "(Reader.backbone, spanuq.reader.backbone.Backbone)")
            x = np.concatenate([x, backbone_rows(self.backbone, self.encoder, passages, answer, question, rows.words,
                                                 cache=self.readings_cache)], 1)
        p = self.net.probability(with_neighbours(x[:, self.columns], rows.sentence)) if rows.words else np.zeros(0)
        groups = spans_of(answer, rows.words, entities)
        spans = [(rows.words[g[0]][0], rows.words[g[-1]][1]) for g in groups]
        u = span_scores(p, groups)
        # a span was read against the passage of its best-backed content word's closest source piece (a function
        # word it leads with, "in" of "in 1925", is like every passage alike)
        function = rows.x[:, FEATURES.index("function")] > 0.5 if rows.words else np.zeros(0, bool)
        passage = [rows.passage[min([i for i in g if not function[i]] or g, key=lambda i: p[i])] for g in groups]
        return Reading(rows.words, p, groups, spans, u, passage, rows.x)
