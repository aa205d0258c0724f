"""What the reader is trained and checked on: real items with people's marks, as word rows with labels.

`items_for` takes each set of ``reader.sets`` (params.yaml) for a split — WiCE's claims, same-passage swaps
built from XQuAD (`spanuq.label.swaps`), SummEdits' edited summaries, the grounded training pairs' twins
(``templated``: `templated_items`) — at most the configured number of items of each (a stable choice by id, so a
smaller run is a subset of a larger one).  `rows_for` reads each
item as the product does (`spanuq.reader.features.word_rows`) and labels each word 1 when people marked a
character of it as not backed; `with_readings` adds the backbone's readings of each word
(`spanuq.reader.backbone`) when the reader is trained with them.  Rows and readings are cached per item by a
hash of what determines them, so a killed run resumes and a second run reads nothing again.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
from tqdm.auto import tqdm

from ..data.grounded import TRAIN_PAIRS, subject_split
from ..data.real import RealItem, load_items
from ..label.plant import swap
from ..pipeline.cache import ItemCache, content_hash
from ..pipeline.files import iter_jsonl
from ..reader.backbone import TOP, backbone_rows
from ..reader.features import FEATURES, WordRows, word_rows

ROWS_VERSION = 3  # bump when `word_rows` changes what it computes


@dataclass(frozen=True)
class ItemRows:
    item: RealItem
    rows: WordRows
    y: np.ndarray  # per word: 1 when a marked character falls in it


def word_labels(words: list[tuple[int, int]], marks: list[tuple[int, int]] | None) -> np.ndarray:
    return np.array([float(any(s < b and e > a for a, b in marks or [])) for s, e in words])


def _stable_subset(items: list, n: int | None, key=lambda it: it.id) -> list:
    if n is None or n >= len(items):
        return items
    return sorted(items, key=lambda it: hashlib.sha1(key(it).encode()).hexdigest())[:n]


def templated_items(split: str, path=None, seed: int = 0) -> list[RealItem]:
    """The grounded training pairs (`spanuq.data.grounded.TRAIN_PAIRS`: subjects and wording the grounded bench never
    uses; the format of `spanuq.bench.grounded`) as twins read against their sources: the right answer (marked where
    the source is silent, case ``d``) and the same answer with the wrong value (marked there).  A subject's pairs are
    all train or all dev, by the rule that splits the pipeline's grounded rows (`spanuq.data.grounded.subject_split`);
    none is test."""
    if split == "test":
        return []
    out = []
    for p in iter_jsonl(path or TRAIN_PAIRS):
        group = str(p["group"])
        if subject_split(group, seed) != split:
            continue
        sources = [{"id": f"{group}#{k}", "text": t} for k, t in enumerate(p["context"], 1)]
        pair = f"templated/{p['id']}@{p['case']}"
        s, e = p["slot"]
        planted, slot = swap(p["answer"], s, e, p["wrong"])
        for twin, text, at in (("right", p["answer"], (s, e)), ("wrong", planted, slot)):
            marked = twin == "wrong" or p["case"] == "d"
            out.append(RealItem(id=f"{pair}/{twin}", set="templated", split=split, article=group, sources=sources,
                                answer=text, question=p["prompt"], marks=[at] if marked else [],
                                meta={"kind": p["kind"], "case": p["case"], "pair": pair, "form": p["case"],
                                      "twin": twin, "slot": list(at)}))
    return out


def items_for(sets: dict[str, dict[str, int | None]], split: str, nlp=None,
              swap_forms: tuple[str, ...] = ("qa", "sentence")) -> list[RealItem]:
    """Every set's items of ``split`` (module docstring): ``sets`` maps a set (``wice``, ``swaps``, ``summedits``,
    ``templated``) to {split: how many items, None = all, 0 = none}.  ``swaps`` needs spaCy (``nlp``) and is built in
    the forms ``swap_forms`` names (`spanuq.label.swaps.FORMS`); a swap's two twins are kept together, as are a
    templated pair's."""
    out: list[RealItem] = []
    for name, limits in sets.items():
        n = limits.get(split, 0)
        if n == 0:
            continue
        if name == "swaps":
            from ..label.swaps import swaps

            questions = _stable_subset(load_items("xquad", split), n)
            out += swaps(questions, nlp, tuple(swap_forms))
        elif name == "templated":
            items = templated_items(split)
            keep = set(_stable_subset(sorted({it.meta["pair"] for it in items}), n, key=str))
            out += [it for it in items if it.meta["pair"] in keep]
        elif name == "summedits":
            marked = [it for it in load_items("summedits", split) if it.label == "supported" or it.marks]
            out += _stable_subset(marked, n)
        else:
            out += _stable_subset(load_items(name, split), n)
    return out


def rows_for(encoder, items: list[RealItem], cache: ItemCache | None = None, progress: bool = True) -> list[ItemRows]:
    """Each item read as the product reads it, with its word labels (cached per item)."""
    out = []
    for it in tqdm(items, desc="reader rows", unit="item", disable=not progress):
        passages = [p["text"] for p in it.sources]
        key = content_hash({"v": ROWS_VERSION, "features": FEATURES, "sources": passages, "answer": it.answer,
                            "question": it.question})
        hit = cache.get(key) if cache is not None else None
        if hit is not None:
            rows = WordRows([tuple(w) for w in hit["words"]], np.asarray(hit["x"], np.float32).reshape(-1, len(FEATURES)),
                            hit["sentence"], hit["passage"])
        else:
            rows = word_rows(encoder, passages, it.answer, it.question)
            if cache is not None:
                cache.put(key, {"words": rows.words, "x": rows.x.tolist(), "sentence": rows.sentence,
                                "passage": rows.passage})
        out.append(ItemRows(it, rows, word_labels(rows.words, it.marks)))
    return out


def with_readings(backbone, encoder, rows: list[ItemRows], cache: ItemCache, progress: bool = True,
                  top: int = TOP) -> list[ItemRows]:
    """``rows`` with the backbone's readings of each word beside its features (`spanuq.reader.features.READER_FEATURES`
    columns; cached per item; ``top``: `spanuq.reader.backbone.TOP`)."""
    out = []
    for r in tqdm(rows, desc="backbone readings", unit="item", disable=not progress):
        it = r.item
        b = backbone_rows(backbone, encoder, [p["text"] for p in it.sources], it.answer, it.question, r.rows.words,
                          top, cache)
        out.append(ItemRows(it, WordRows(r.rows.words, np.concatenate([r.rows.x, b], 1), r.rows.sentence,
                                         r.rows.passage), r.y))
    return out
