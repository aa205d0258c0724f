"""Same-passage swaps: a real answer and its twin with one fact changed to another of the same kind.

From each question with its paragraph and gold answer (XQuAD), two answers are read against the same
paragraph:

* ``qa`` — "The answer is X." with X the gold answer (right) and with X′ another entity of the same kind
  that the paragraph names (wrong): both values stand in the source, so string overlap cannot tell them
  apart — only reading the question against the paragraph can;
* ``sentence`` — the paragraph's own sentence holding the gold answer (right) and the same sentence with
  the answer replaced by X′ (wrong): a real sentence with one fact changed;
* ``aside`` — that sentence and the paragraph's next one (the one before, for the last), as an answer that says
  more than the question asks (right), and the same two with a name, number or date of the *other* sentence
  replaced by another of its kind from the paragraph (wrong): a fact far from the question's words is not wrong
  for that, and a changed one is.

`spanuq bench real` reads every form; the reader trains on the forms ``reader.swap_forms`` names (docs/grounded.md
says why ``aside`` is not among them).

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
FORMS = ("qa", "sentence", "aside")


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
        for form in forms:
            if form == "aside":
                out += _aside(it, text, g0, g0 + len(gold), ents[text])
                continue
            if form == "qa":
                right_text, at = QA_FORM.format(gold), QA_FORM.index("{}")
            else:
                s, e = _sentence_at(text, g0, g0 + len(gold))
                right_text, at = text[s:e].strip(), g0 - s - (len(text[s:e]) - len(text[s:e].lstrip()))
            out += _twins(it, form, kind, right_text, at, gold, wrong)
    return out


def _twins(it: RealItem, form: str, kind: str, right_text: str, at: int, right: str, wrong: str) -> list[RealItem]:
    """The right twin ``right_text`` (``right`` at character ``at``) and the wrong one, ``wrong`` in its place and
    marked."""
    pair = f"{it.id}@{form}"
    wrong_text = right_text[:at] + wrong + right_text[at + len(right):]
    base = {"kind": kind, "right": right, "wrong": wrong, "pair": pair, "form": form}
    return [replace(it, id=f"{pair}/right", answer=right_text, marks=[],
                    meta={**base, "twin": "right", "slot": [at, at + len(right)]}),
            replace(it, id=f"{pair}/wrong", answer=wrong_text, marks=[(at, at + len(wrong))],
                    meta={**base, "twin": "wrong", "slot": [at, at + len(wrong)]})]


def _aside(it: RealItem, text: str, g0: int, g1: int, ents: list[tuple[int, int, str]]) -> list[RealItem]:
    """The ``aside`` twins of a question whose gold answer is ``text[g0:g1]`` (module docstring); none where the
    neighbouring sentence has no name, number or date with another of its kind in the paragraph."""
    from ..context.focus import sentence_spans

    sents = sentence_spans(text)
    k = next((j for j, (s, e) in enumerate(sents) if s <= g0 and g1 <= e), None)
    if k is None or len(sents) < 2:
        return []
    other = sents[k + 1] if k + 1 < len(sents) else sents[k - 1]
    inside = [(s, e, kind) for s, e, kind in ents if other[0] <= s and e <= other[1]]
    rng = rng_for("aside", it.id)
    for s, e, kind in (inside[j] for j in rng.permutation(len(inside))):
        pool = sorted({text[a:b] for a, b, k2 in ents if k2 == kind and not (_words(text[a:b]) & _words(text[s:e]))})
        if pool:
            lo, hi = min(sents[k][0], other[0]), max(sents[k][1], other[1])
            lead = len(text[lo:hi]) - len(text[lo:hi].lstrip())
            return _twins(it, "aside", kind, text[lo:hi].strip(), s - lo - lead, text[s:e], str(rng.choice(pool)))
    return []
