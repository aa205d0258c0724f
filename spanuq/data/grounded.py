"""Grounded prompt rows: questions with their sources, from the grounded *training* pairs.

``prompts.grounded: N`` adds N rows to the run's prompts, built from
``spanuq/label/grounded/pairs.jsonl`` (subjects and wording no bench uses: the bench's pairs,
``spanuq/bench/grounded/``, are never read here).  A pair file row is one question, its sources
(``context``) and two answers that differ in one fact (`spanuq.bench.grounded`); pairs of cases
``a`` and ``b`` share their sources, so one prompt row stands for every pair of a subject, kind and
source text:

* ``text``: the question; ``context``: its passages, rendered into the backbone's input by the
  generate stage (`spanuq.llm.loading.chat_prompt`), so the backbone answers *with* them;
* ``references``: the right value where the source states it (cases a, b, c; in c in other words),
  none where the source is silent (d): the label stage labels such a row from its source
  (docs/labels.md "Rows with sources"), and a right fact the source does not state is unsupported;
* ``meta``: ``grounded_case`` (``ab``, ``c`` or ``d``), the subject (``group``, which decides the
  split: train or dev by a hash of it, never test, so the test split is the run's own prompts),
  the fact's ``kind``, and ``twins`` (JSON): the pairs' two answers — the right fact, the same answer
  with the wrong value — which the label stage adds as given answers of the dev split
  (`spanuq.label.grounded_given`).

Rows are chosen round-robin over the three source cases, each case in a seeded hash order, so a
small N still has every case and a larger N keeps the rows of a smaller one.
"""
from __future__ import annotations

import json
import zlib
from pathlib import Path

from ..pipeline.files import iter_jsonl
from ..pipeline.records import Prompt

TRAIN_PAIRS = Path(__file__).parents[1] / "label" / "grounded" / "pairs.jsonl"
CASE_ROWS = ("ab", "c", "d")  # a and b share their sources: one row
# the with-sources calibration of own answers is fitted on the dev rows: a larger share than the run's dev
# fraction, so a few dozen rows give it slots of both classes
DEV_SHARE = 1 / 3


def _order(key: str, seed: int) -> int:
    return zlib.crc32(f"{seed}\x1f{key}".encode())


def subject_split(group: str, seed: int = 0) -> str:
    """``dev`` for `DEV_SHARE` of the subjects (by a seeded hash of the subject), else ``train``."""
    return "dev" if _order(group, seed) % 1000 < DEV_SHARE * 1000 else "train"


def grounded_rows(path: str | Path = TRAIN_PAIRS) -> list[Prompt]:
    """Every prompt row of a grounded pair file (module docstring), in file order, split unset."""
    rows: dict[tuple, dict] = {}
    for r in iter_jsonl(Path(path)):
        case = "ab" if r["case"] in ("a", "b") else r["case"]
        key = (r["group"], r["kind"], case, r["prompt"], tuple(r["context"]))
        row = rows.setdefault(key, {"pair": r, "case": case, "twins": []})
        row["twins"].append({"id": r["id"], "case": r["case"], "answer": r["answer"], "slot": r["slot"],
                             "wrong": r["wrong"]})
    out = []
    for (group, kind, case, prompt, context), row in rows.items():
        first = row["pair"]
        s, e = first["slot"]
        pid = first["id"].rsplit("-", 1)[0] + f"-{case}"
        out.append(Prompt(id=pid, domain="triviaqa", text=prompt, context=list(context),
                          references=[first["answer"][s:e]] if case != "d" else [],
                          meta={"source": "grounded", "grounded_case": case, "group": str(group), "kind": kind,
                                "twins": json.dumps(row["twins"], ensure_ascii=False)}))
    return out


def grounded_prompts(n: int, seed: int, path: str | Path = TRAIN_PAIRS) -> list[Prompt]:
    """``n`` grounded rows (module docstring), each in train or dev by its subject (`DEV_SHARE` of them dev)."""
    if n < 0:
        raise ValueError(f"prompts.grounded must be >= 0, got {n}")
    if not n:
        return []
    rows = grounded_rows(path)
    by_case = {c: sorted((p for p in rows if p.meta["grounded_case"] == c), key=lambda p: _order(p.id, seed))
               for c in CASE_ROWS}
    chosen: list[Prompt] = []
    for k in range(max(map(len, by_case.values()))):
        chosen += [by_case[c][k] for c in CASE_ROWS if k < len(by_case[c])]
    if n > len(chosen):
        raise ValueError(f"prompts.grounded = {n}, but {path} gives {len(chosen)} rows")
    return [p.model_copy(update={"split": subject_split(p.meta["group"], seed)}) for p in chosen[:n]]
