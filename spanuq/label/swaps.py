"""Same-passage swaps: a real answer and its twin with one fact changed to another of the same kind.

From each question with its paragraph and gold answer (XQuAD), two answers are read against the same
paragraph:

* ``qa`` — "The answer is X." with X the gold answer (right) and with X′ another entity of the same kind
  that the paragraph names (wrong): both values stand in the source, so string overlap cannot tell them
  apart — only reading the question against the paragraph can;
* ``sentence`` — the paragraph's own sentence holding the gold answer (right) and the same sentence with
  the answer replaced by X′ (wrong): a real sentence with one fact changed.

The wrong twin's ``marks`` are X′'s characters; the right twin has none.  X′ is chosen per question by a
generator seeded with its id (`spanuq.label.plant.rng_for`), among the paragraph's entities of the gold
answer's kind that share no word with any gold answer; where the paragraph has none, the article's other
paragraphs are tried.  Kinds come from spaCy's entity labels (`KIND`).
"""
from __future__ import annotations

from dataclasses import replace

from .plant import rng_for
from ..data.real import RealItem

KIND = {"PERSON": "person", "NORP": "group", "ORG": "organisation", "GPE": "place", "LOC": "place", "FAC": "place",
        "DATE": "date", "TIME": "time", "CARDINAL": "number", "QUANTITY": "number", "MONEY": "number",
        "PERCENT": "number", "ORDINAL": "ordinal", "EVENT": "event", "WORK_OF_ART": "work", "PRODUCT": "product",
        "LAW": "law", "LANGUAGE": "language"}
QA_FORM = "The answer is {}."
FORMS = ("qa", "sentence")


def _entities(nlp, texts: list[str]) -> list[list[tuple[int, int, str]]]:
    return [[(e.start_char, e.end_char, KIND[e.label_]) for e in doc.ents if e.label_ in KIND]
            for doc in nlp.pipe(texts)]


def _words(text: str) -> set[str]:
    return {w.lower().strip(".,;:'\"()") for w in text.split()} - {""}


def _kind_of(ents: list[tuple[int, int, str]], start: int, end: int) -> str | None:
    """The kind of the entity that covers most of [start, end) and is mostly inside it."""
    best, cover = None, 0
    for s, e, k in ents:
        inter = min(e, end) - max(s, start)
        if inter > cover and inter >= 0.6 * (e - s) and inter >= 0.6 * (end - start):
            best, cover = k, inter
    return best


def _sentence_at(text: str, start: int, end: int) -> tuple[int, int]:
    from ..context.focus import sentence_spans

    return next(((s, e) for s, e in sentence_spans(text) if s <= start and end <= e), (0, len(text)))


def swaps(items: list[RealItem], nlp, forms: tuple[str, ...] = FORMS) -> list[RealItem]:
    """Right and wrong twins (module docstring) of each question of ``items`` that has a gold answer located in
    its paragraph, of a kind the paragraph (or its article) has another entity of."""
    by_article: dict[str, list[str]] = {}
    for it in items:
        texts = by_article.setdefault(it.article, [])
        if it.sources[0]["text"] not in texts:
            texts.append(it.sources[0]["text"])
    paragraphs = [t for ts in by_article.values() for t in ts]
    ents = dict(zip(paragraphs, _entities(nlp, paragraphs)))
    out: list[RealItem] = []
    for it in items:
        text, starts = it.sources[0]["text"], it.meta.get("answer_start") or []
        if not it.references or not starts or text[starts[0]: starts[0] + len(it.references[0])] != it.references[0]:
            continue
        gold, g0 = it.references[0], starts[0]
        kind = _kind_of(ents[text], g0, g0 + len(gold))
        if kind is None:
            continue
        gold_words = set().union(*(_words(r) for r in it.references))
        pool = []
        for other in [text] + [t for t in by_article[it.article] if t != text]:
            pool = sorted({other[s:e] for s, e, k in ents[other] if k == kind and not (_words(other[s:e]) & gold_words)})
            if pool:
                break
        if not pool:
            continue
        wrong = str(rng_for("swap", it.id).choice(pool))
        base = {"kind": kind, "right": gold, "wrong": wrong}
        for form in forms:
            if form == "qa":
                right_text, at = QA_FORM.format(gold), QA_FORM.index("{}")
                wrong_text = QA_FORM.format(wrong)
            else:
                s, e = _sentence_at(text, g0, g0 + len(gold))
                right_text, at = text[s:e].strip(), g0 - s - (len(text[s:e]) - len(text[s:e].lstrip()))
                wrong_text = right_text[:at] + wrong + right_text[at + len(gold):]
            pair = f"{it.id}@{form}"
            out.append(replace(it, id=f"{pair}/right", answer=right_text, marks=[],
                               meta={**base, "pair": pair, "form": form, "twin": "right", "slot": [at, at + len(gold)]}))
            out.append(replace(it, id=f"{pair}/wrong", answer=wrong_text, marks=[(at, at + len(wrong))],
                               meta={**base, "pair": pair, "form": form, "twin": "wrong", "slot": [at, at + len(wrong)]}))
    return out
