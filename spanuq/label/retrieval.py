"""BM25 retrieval over a user-provided corpus (paper App. D.2, Stage 3: "passages retrieved via BM25").

The corpus is JSONL, one passage a line: ``{"id": ..., "title": ... (optional), "text": ...}``
(a Wikipedia dump cut into passages, or any reference collection).  The index is
built once with `bm25s` and saved next to the data (``StagePaths.corpus_index``, a
DVC output) together with a manifest holding the corpus's sha256; a later run
loads it, and rebuilds only when the corpus file changed.
"""
from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

import bm25s

from ..pipeline.files import iter_jsonl, read_json, sha256_file, write_json

log = logging.getLogger(__name__)

MANIFEST = "spanuq_manifest.json"
INDEX_VERSION = 1
STOPWORDS = "en"


@dataclass(frozen=True)
class Passage:
    id: str
    text: str
    title: str | None = None

    @property
    def indexed_text(self) -> str:
        return f"{self.title}. {self.text}" if self.title else self.text


def read_corpus(path: str | Path) -> list[Passage]:
    """Passages from a JSONL file; each line needs ``id`` and ``text``."""
    out: list[Passage] = []
    for n, d in enumerate(iter_jsonl(path), 1):
        if "text" not in d or "id" not in d:
            raise ValueError(f"{path}:{n}: a passage needs 'id' and 'text' (got keys {sorted(d)})")
        out.append(Passage(str(d["id"]), str(d["text"]), d.get("title")))
    if not out:
        raise ValueError(f"{path}: the corpus has no passages")
    return out


class BM25Retriever:
    """A `bm25s.BM25` index plus the passages it indexes."""

    def __init__(self, index: bm25s.BM25, passages: list[Passage]):
        self.index, self.passages = index, passages

    @classmethod
    def build(cls, passages: list[Passage]) -> "BM25Retriever":
        tokens = bm25s.tokenize([p.indexed_text for p in passages], stopwords=STOPWORDS, show_progress=False)
        index = bm25s.BM25()
        index.index(tokens, show_progress=False)
        return cls(index, passages)

    def save(self, index_dir: str | Path, manifest: dict | None = None) -> None:
        index_dir = Path(index_dir)
        tmp = index_dir.with_name(index_dir.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        corpus = [{"id": p.id, "title": p.title, "text": p.text} for p in self.passages]
        self.index.save(str(tmp), corpus=corpus, show_progress=False)
        write_json(tmp / MANIFEST, {"version": INDEX_VERSION, "stopwords": STOPWORDS,
                                    "n_passages": len(self.passages), **(manifest or {})})
        shutil.rmtree(index_dir, ignore_errors=True)
        tmp.rename(index_dir)

    @classmethod
    def load(cls, index_dir: str | Path) -> "BM25Retriever":
        index = bm25s.BM25.load(str(index_dir), load_corpus=True, show_progress=False)
        passages = [Passage(str(d["id"]), d["text"], d.get("title")) for d in index.corpus]
        index.corpus = None  # we map indices to passages ourselves
        return cls(index, passages)

    @classmethod
    def open(cls, corpus_path: str | Path, index_dir: str | Path) -> "BM25Retriever":
        """Load the saved index of `corpus_path`, building (and saving) it when missing or stale."""
        index_dir = Path(index_dir)
        sha = sha256_file(corpus_path)
        mf = index_dir / MANIFEST
        if mf.exists():
            m = read_json(mf)
            if m.get("corpus_sha256") == sha and m.get("version") == INDEX_VERSION:
                return cls.load(index_dir)
            log.info("corpus %s changed: rebuilding the BM25 index", corpus_path)
        r = cls.build(read_corpus(corpus_path))
        r.save(index_dir, {"corpus": str(corpus_path), "corpus_sha256": sha})
        log.info("built the BM25 index of %d passages at %s", len(r.passages), index_dir)
        return r

    def search_many(self, queries: list[str], k: int) -> list[list[tuple[Passage, float]]]:
        """Top-`k` passages per query with their BM25 scores; passages scoring 0 are left out."""
        if not queries:
            return []
        k = max(1, min(k, len(self.passages)))
        tokens = bm25s.tokenize(queries, stopwords=STOPWORDS, return_ids=False, show_progress=False)
        tokens = [t if t else ["\u2400"] for t in tokens]  # bm25s refuses an empty query
        idx, scores = self.index.retrieve(tokens, k=k, show_progress=False)
        return [[(self.passages[int(i)], float(s)) for i, s in zip(row_i, row_s) if s > 0]
                for row_i, row_s in zip(idx, scores)]

    def search(self, query: str, k: int) -> list[tuple[Passage, float]]:
        return self.search_many([query], k)[0]

