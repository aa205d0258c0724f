"""Planting one wrong fact: the kind of a reference answer, wrong values of that kind, where a
value sits in an answer, and the answer with it swapped.

A *slot* is the place in an answer that gives the fact a question asks for ("1903" in "She won
the Nobel Prize in Physics in 1903"). A planted twin is the same answer with the slot's value
replaced by a wrong value of the same kind — a nearby year, a number of the same scale, another
person, place or named thing of the same sort — so the two twins differ in exactly one fact.
The planted-pair bench (`spanuq.bench.planted`) and the given-answer training data
(`spanuq.label.given`) both build twins with these functions.

Kinds: ``year`` (a four-digit year), ``number`` (any other number), ``person``, ``place``,
``entity`` (any other named thing).
"""
from __future__ import annotations

import re
import zlib
from typing import Sequence

import numpy as np

KINDS = ("year", "number", "person", "place", "entity")
_YEAR = re.compile(r"^(1[0-9]{3}|20[0-9]{2})$")
_NUM = re.compile(r"^\d+(?:[.,]\d+)?$")
# spaCy entity labels → kind (anything else named is an entity)
_LABEL_KIND = {"PERSON": "person", "GPE": "place", "LOC": "place", "FAC": "place", "DATE": "year"}


def fact_kind(reference: str, label: str | None = None) -> str:
    """The kind of a reference answer: by its form (a year, a number), else by its spaCy
    entity ``label`` when given (``PERSON`` → person, ``GPE``/``LOC``/``FAC`` → place), else entity."""
    text = reference.strip()
    if _YEAR.match(text):
        return "year"
    if _NUM.match(text):
        return "number"
    kind = _LABEL_KIND.get(label or "", "entity")
    return "entity" if kind == "year" else kind  # a DATE that is not a plain year: a named thing


def rng_for(*key: str) -> np.random.Generator:
    """A generator seeded by the item's key, so what is planted for an item does not depend on
    the order or the size of the file it is in."""
    return np.random.default_rng([zlib.crc32("\x1f".join(key).encode())])


def _near_number(value: str, rng: np.random.Generator) -> str:
    """A different number of the same scale and format as ``value`` (integers stay integers)."""
    x = float(value.replace(",", ""))
    if x.is_integer():
        x = int(x)
        if abs(x) < 12:
            choices = [v for v in range(max(0, x - 4), x + 5) if v != x]
        else:
            lo, hi = max(1, int(x * 0.6)), int(x * 1.5) + 2
            choices = [v for v in range(lo, hi) if v != x and abs(v - x) >= max(1, abs(x) // 20)]
        out = int(rng.choice(choices))
        return f"{out:,}" if "," in value else str(out)
    return f"{x * rng.choice([0.5, 0.7, 1.3, 1.6, 2.0]):.{len(value.split('.')[-1])}f}"


def wrong_values(kind: str, references: Sequence[str], pool: Sequence[str], rng: np.random.Generator,
                 n: int = 1) -> list[str]:
    """``n`` distinct wrong values of ``kind`` for a question whose accepted answers are
    ``references``: a year 2–30 years away, a number of the same scale, or (person, place, entity)
    values drawn from ``pool`` (other answers of the same kind), never a reference or an alias of
    one. Fewer than ``n`` when the pool has no more."""
    refs = {r.strip().lower() for r in references if r.strip()}
    first = next(r for r in references if r.strip())
    out: list[str] = []
    if kind == "year":
        y = int(first)
        offsets = [d for d in range(-30, 31) if abs(d) >= 2]
        for d in rng.permutation(offsets):
            v = str(y + int(d))
            if v.lower() not in refs and v not in out:
                out.append(v)
            if len(out) == n:
                break
        return out
    if kind == "number":
        for _ in range(50 * n):
            v = _near_number(first, rng)
            if v.lower() not in refs and v not in out:
                out.append(v)
            if len(out) == n:
                break
        return out
    candidates = sorted({p for p in pool if p.strip() and p.strip().lower() not in refs
                         and not any(r in p.lower() or p.lower() in r for r in refs)})
    for i in rng.permutation(len(candidates))[:n]:
        out.append(candidates[int(i)])
    return out


def find_value(text: str, values: Sequence[str]) -> tuple[int, int] | None:
    """Characters [start, end) of the first whole-word occurrence in ``text`` of any of
    ``values`` (the longest value wins where several occur at one place; case-insensitive),
    None when none occurs."""
    best: tuple[int, int] | None = None
    for v in sorted({v.strip() for v in values if v.strip()}, key=len, reverse=True):
        m = re.search(r"(?<!\w)" + re.escape(v) + r"(?!\w)", text, re.IGNORECASE)
        if m and (best is None or m.start() < best[0]):
            best = m.span()
    return best


def swap(text: str, start: int, end: int, value: str) -> tuple[str, tuple[int, int]]:
    """``text`` with characters [start, end) replaced by ``value``, and the value's place in it."""
    return text[:start] + value + text[end:], (start, start + len(value))
