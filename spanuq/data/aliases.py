"""Reference answers of the bundled prompt set, and the rules that keep them unambiguous.

A reference cell in a data file lists a prompt's answer first, then its aliases,
separated by ``|``: ``Danish krone | case:DKK``.  An alias written ``case:Au`` must
match with its case (the labeller's business; it is listed in ``Prompt.meta
["case_sensitive"]``).  A labeller accepts an answer span when it matches any
reference, so one loose alias turns wrong answers into right ones: "krone" names
two countries, "He" (helium) is the pronoun, "Bell" is a bell, "Leonardo" is also
DiCaprio.  :func:`check` rejects, with the rule that fired:

* ``stop-word``     an English stop word or pronoun (spaCy's list, plus "yes");
* ``too-short``     shorter than 3 characters, unless it is a number or ``case:``;
* ``currency-unit`` a currency unit that two or more ISO 4217 currencies share
                    ("peso", "pound", "won"): write "Mexican peso" or the code;
* ``common-word``   an alias (not the answer itself) that is one common English
                    word ("Bell", "Wood", "tilt"), from ``wordlists/common_words.txt``;
* ``first-word``    an alias that is the first word of a longer reference of the same
                    prompt: a bare first name ("Leonardo" of "Leonardo da Vinci",
                    also DiCaprio) or a cut name ("Bering" of "Bering Strait");
* ``shared``        a shortened answer ("krone" of "Norwegian krone") that is also a
                    reference of another prompt of the same table whose answer
                    differs ("krone" of "Danish krone").

The last three are judgements about aliases of one answer: ``ok:Galileo`` records a
hand check that overrides them for that one alias (the first three always hold).
In a table of *key facts* (ELI5 explanations, biographies: every reference is a
separate fact a good answer mentions, and two people may both be "physicist") only
the first three apply.
Rules compare case-folded and without accents.  A number ("1945", "1/8",
"80 km/h", "eight") is exempt from the word rules: numbers are matched by value.
"""
from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

CASE_PREFIX = "case:"
CHECKED_PREFIX = "ok:"
MIN_CHARS = 3
RULES = ("stop-word", "too-short", "currency-unit", "common-word", "first-word", "shared")


@dataclass(frozen=True)
class Ref:
    """One reference answer as written in a data file."""

    text: str
    case_sensitive: bool = False
    checked: bool = False  # ``ok:``: judged unambiguous by hand

    def __str__(self) -> str:
        return (CHECKED_PREFIX if self.checked else "") + (CASE_PREFIX if self.case_sensitive else "") + self.text


def parse_refs(cell: str) -> list[Ref]:
    """``"Gold | case:Au | ok:Aurum"`` → [Ref("Gold"), Ref("Au", case_sensitive=True), Ref("Aurum", checked=True)]."""
    out = []
    for part in cell.split("|"):
        text, flags = part.strip(), set()
        for prefix in (CHECKED_PREFIX, CASE_PREFIX, CHECKED_PREFIX):
            if text.startswith(prefix):
                text, flags = text[len(prefix):].strip(), flags | {prefix}
        if not text:
            if flags:
                raise ValueError(f"an empty reference after {'/'.join(sorted(flags))} in {cell!r}")
            continue
        out.append(Ref(text, CASE_PREFIX in flags, CHECKED_PREFIX in flags))
    return out


def case_sensitive(meta: dict[str, str]) -> set[str]:
    """The references of a prompt that match only with their case (``Prompt.meta["case_sensitive"]``)."""
    raw = meta.get("case_sensitive")
    return set(json.loads(raw)) if raw else set()


def fold(text: str) -> str:
    """Case-folded, accents removed, inner whitespace collapsed ("Brontë" → "bronte")."""
    decomposed = unicodedata.normalize("NFKD", text)
    return " ".join("".join(c for c in decomposed if not unicodedata.combining(c)).casefold().split())


def _wordlist(name: str) -> frozenset[str]:
    path = Path(str(resources.files("spanuq.data") / "bundled" / "wordlists" / name))
    lines = path.read_text(encoding="utf-8").splitlines()
    return frozenset(w.strip() for w in lines if w.strip() and not w.startswith("#"))


@lru_cache(maxsize=1)
def common_words() -> frozenset[str]:
    return _wordlist("common_words.txt")


@lru_cache(maxsize=1)
def currency_units() -> frozenset[str]:
    return _wordlist("currency_units.txt")


@lru_cache(maxsize=1)
def stop_words() -> frozenset[str]:
    from spacy.lang.en.lex_attrs import like_num
    from spacy.lang.en.stop_words import STOP_WORDS

    return frozenset({w for w in STOP_WORDS if not like_num(w)} | {"yes"})


def is_number(text: str) -> bool:
    from spacy.lang.en.lex_attrs import like_num

    return any(c.isdigit() for c in text) or like_num(text.strip())


def word_problem(ref: Ref, is_answer: bool, others: list[Ref], key_facts: bool = False) -> str | None:
    """The rule one reference breaks on its own (None: fine).

    ``is_answer``: it is the prompt's answer (the first reference), not an alias;
    ``others``: the prompt's other references; ``key_facts``: the table lists facts, not aliases.
    """
    if is_number(ref.text):
        return None
    key = fold(ref.text)
    if key in stop_words():
        return "stop-word"
    if len(key) < MIN_CHARS and not ref.case_sensitive:
        return "too-short"
    if key in currency_units():
        return "currency-unit"
    if is_answer or key_facts or ref.checked or " " in key:
        return None
    if key in common_words():
        return "common-word"
    if any(len(o.split()) > 1 and o.split()[0] == key for o in (fold(r.text) for r in others)):
        return "first-word"
    return None


@dataclass
class Entry:
    """One prompt's references and where they were written (for error messages)."""

    where: str  # "capitals.tsv:12"
    table: str
    refs: list[Ref]
    key_facts: bool = False  # the references are separate facts, not aliases of one answer


def shortens(alias: str, refs: list[Ref]) -> bool:
    """Is ``alias`` a part of a longer reference of the same prompt ("krone" of "Danish krone")?"""
    words = fold(alias).split()
    for r in refs:
        other = fold(r.text).split()
        if len(other) > len(words) and any(other[i:i + len(words)] == words for i in range(len(other))):
            return True
    return False


def check(entries: list[Entry]) -> list[str]:
    """Every ambiguous reference: ``"<file>:<line>: 'krone' (shared: ...)"``; [] when clean."""
    problems = []
    by_table: dict[str, dict[str, dict[str, str]]] = {}  # table -> folded ref -> folded answer -> where
    for e in entries:
        answer = fold(e.refs[0].text) if e.refs else ""
        for i, r in enumerate(e.refs):
            rule = word_problem(r, i == 0, e.refs[:i] + e.refs[i + 1:], e.key_facts)
            if rule:
                problems.append(f"{e.where}: {str(r)!r} ({rule})")
            by_table.setdefault(e.table, {}).setdefault(fold(r.text), {}).setdefault(answer, e.where)
    for e in entries:
        if e.key_facts:
            continue
        answer = fold(e.refs[0].text) if e.refs else ""
        for r in e.refs:
            if r.checked or not shortens(r.text, e.refs):
                continue
            elsewhere = {a: w for a, w in by_table[e.table][fold(r.text)].items() if a != answer}
            if elsewhere:
                a, w = next(iter(elsewhere.items()))
                problems.append(f"{e.where}: {str(r)!r} (shared: also a reference at {w}, whose answer is {a!r})")
    return problems
