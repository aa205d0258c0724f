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
from pathlib import Path

import bm25s

from ..pipeline.files import iter_jsonl, read_json, sha256_file, write_json
from .passages import ContextError, Passage

log = logging.getLogger(__name__)
# bm25s sets its own logger to DEBUG when imported ("Building index from IDs objects" on every build), so an
# application's root handler prints its debug lines: its warnings are all a user needs to see
logging.getLogger("bm25s").setLevel(logging.WARNING)

MANIFEST = "spanuq_manifest.json"
INDEX_VERSION = 1
STOPWORDS = "en"


def read_corpus(path: str | Path) -> list[Passage]:
    """Passages from a JSONL file; each line a JSON object with ``id`` and ``text`` (a string).
    Anything else raises `ContextError` naming the file and line."""
    out: list[Passage] = []
    try:
        for n, d in enumerate(iter_jsonl(path), 1):
            if not isinstance(d, dict) or "text" not in d or "id" not in d:
                got = f"keys {sorted(d)}" if isinstance(d, dict) else f"a JSON {type(d).__name__}"
                raise ContextError(f"{path}:{n}: a passage is a JSON object with 'id' and 'text' (got {got})")
            if not isinstance(d["text"], str):
                raise ContextError(f"{path}:{n}: a passage's 'text' must be a string")
            out.append(Passage(str(d["id"]), d["text"], d.get("title")))
    except UnicodeDecodeError:
        raise ContextError(f"{path}: not a UTF-8 text file (a corpus is JSONL: one JSON object a line)") from None
    except ContextError:
        raise
    except ValueError as e:  # iter_jsonl: a line that is not JSON
        raise ContextError(f"{e} (a corpus is JSONL: one JSON object a line)") from None
    if not out:
        raise ContextError(f"{path}: the corpus has no passages")
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

