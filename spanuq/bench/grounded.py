"""The grounded pairs: answers that differ in one fact, each with the sources it is read against.

A pair is one question answered twice against the same sources (``context``, the passages a
user gives): the *correct* twin states the fact as it is, the *planted* twin a wrong value of
the same kind in its place, every other character equal. By how the source relates to the fact:

* ``a``: the wrong value appears elsewhere in the source (so "is this string in the source"
  cannot tell the twins apart);
* ``b``: the wrong value is not in the source;
* ``c``: the source states the right fact in other words (a spelled-out number, a surname, an
  adjective for a country), the wrong value not in it;
* ``d``: the source is silent on the fact: both twins are unsupported (reported, not a target).

Files (``pairs.jsonl``, one pair a row): ``{id, group, kind, case, prompt, context: [passage, …],
answer, slot: [start, end], wrong}`` — ``answer[start:end]`` is the right value, ``wrong`` what
the planted twin has there; ``group`` ties the pairs of one subject (resampled together by the
bootstrap). The bundled bench (``spanuq/bench/grounded/``) and the grounded training data
(``spanuq/label/grounded/``) are built by ``scripts/build_grounded_pairs.py`` from disjoint
subjects with different wording.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

from ..data.grounded import TRAIN_PAIRS  # noqa: F401 - the training pairs (subjects the bench never shares)
from ..label.plant import swap
from ..pipeline.files import iter_jsonl
from .planted import Twin

PAIRS = Path(__file__).with_name("grounded") / "pairs.jsonl"
CASES = ("a", "b", "c", "d")
CASE_NAMES = {"a": "wrong value elsewhere in the source", "b": "wrong value not in the source",
              "c": "source states it in other words", "d": "source silent"}
KINDS = ("year", "number", "person", "place", "entity")
FIELDS = ("id", "group", "kind", "case", "prompt", "context", "answer", "slot", "wrong")


@dataclass(frozen=True)
class GroundedPair:
    id: str
    group: str
    kind: str
    case: str
    prompt: str
    context: tuple[str, ...]
    correct: Twin
    planted: Twin

    def as_dict(self) -> dict:
        return asdict(self)


def read_pairs(path: str | Path = PAIRS) -> list[GroundedPair]:
    """The pairs of a file (module docstring); a row that does not fit gets a clear error naming it."""
    path = Path(path)
    out = []
    for n, r in enumerate(iter_jsonl(path), 1):
        where = f"{path}: row {n} ({r.get('id', 'no id')})"
        missing = [k for k in FIELDS if k not in r]
        if missing:
            raise ValueError(f"{where}: missing {', '.join(missing)}")
        ctx = r["context"]
        if not isinstance(ctx, list) or not ctx or not all(isinstance(p, str) and p.strip() for p in ctx):
            raise ValueError(f"{where}: context must be a non-empty list of non-empty strings")
        if r["case"] not in CASES:
            raise ValueError(f"{where}: case must be one of {', '.join(CASES)}, not {r['case']!r}")
        s, e = r["slot"]
        if not 0 <= s < e <= len(r["answer"]):
            raise ValueError(f"{where}: slot {r['slot']} is outside the answer")
        if r["answer"][s:e] == r["wrong"]:
            raise ValueError(f"{where}: the wrong value equals the right one ({r['wrong']!r})")
        planted, p_slot = swap(r["answer"], s, e, r["wrong"])
        out.append(GroundedPair(r["id"], str(r["group"]), r["kind"], r["case"], r["prompt"], tuple(ctx),
                                Twin(r["answer"], (s, e)), Twin(planted, p_slot)))
    if not out:
        raise ValueError(f"{path}: no pairs")
    return out


def pasted(prompt: str, context: tuple[str, ...] | list[str]) -> str:
    """The sources pasted above the question: how a user gives them where no `context` input exists."""
    return "\n\n".join([*context, prompt])


WORD = re.compile(r"\w+")


def in_source(value: str, context: tuple[str, ...] | list[str]) -> float:
    """The string-overlap control: the share of the value's words that are words of the sources
    (case-folded, whole words: "1" is not in "1766"); 1 − this is its score for "likely wrong"."""
    source = set(WORD.findall(" ".join(context).casefold()))
    words = WORD.findall(value.casefold())
    return sum(w in source for w in words) / len(words) if words else 0.0
