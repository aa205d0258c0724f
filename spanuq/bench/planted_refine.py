"""`spanuq bench planted --refine`: does `refine` make answers worse?

Each twin of each pair is refined (``mode="regenerate"``, as a given answer) and read again: a
correct twin that no longer names its right value went **right → wrong**; a planted twin that
now names a right value and no longer the planted one went **wrong → right**. The backbone's own
answers to the facts' questions are refined as its own answers (``answer_source="generated"``)
and judged the same way by the references: right → wrong when an answer that named a reference
no longer does, wrong → right when one that did not now does. Refine must not make more answers
wrong than it makes right. Each answer that went right → wrong or wrong → right is kept as a
case (its question, the text before and after), so a reader can see what refine broke or mended.
"""
from __future__ import annotations

from collections import Counter

from tqdm.auto import tqdm

from ..label.plant import find_value
from .planted import PlantedPair


def _names(text: str, values: list[str]) -> bool:
    return find_value(text, values) is not None


def case(outcome: str, prompt: str, before: str, after: str, **where) -> dict:
    return {"outcome": outcome, **where, "prompt": prompt, "before": before, "after": after}


def refine_twins(uq, pairs: list[PlantedPair], references: dict[str, list[str]],
                 progress: bool = True) -> tuple[dict, list[dict]]:
    """Counts per source of what refining did to the correct and the planted twins, and the cases
    that changed an answer's verdict."""
    out: dict[str, Counter] = {}
    cases: list[dict] = []
    bar = tqdm(total=2 * len(pairs), desc="refine pairs", unit="answer", disable=not progress)
    for p in pairs:
        refs = references.get(p.group) or [p.correct.value]
        c = out.setdefault(p.source, Counter())
        for twin, right in ((p.correct, True), (p.planted, False)):
            r = uq.refine(p.prompt, twin.text, mode="regenerate")
            changed = r.answer != twin.text
            c["changed"] += changed
            if right:
                c["right"] += 1
                flipped, outcome = changed and not _names(r.answer, refs), "right_to_wrong"
            else:
                c["wrong"] += 1
                flipped = changed and _names(r.answer, refs) and not _names(r.answer, [twin.value])
                outcome = "wrong_to_right"
            c[outcome] += flipped
            if flipped:
                cases.append(case(outcome, p.prompt, twin.text, r.answer, source=p.source, group=p.group,
                                  kind=p.kind))
            bar.update(1)
    bar.close()
    return {k: dict(v) for k, v in out.items()}, cases


def refine_own(uq, rows: list[dict], answers: dict[str, str], progress: bool = True) -> tuple[dict, list[dict]]:
    """What refining did to the backbone's own answers to the facts' questions (judged by references),
    and the cases that changed an answer's verdict."""
    c: Counter = Counter()
    cases: list[dict] = []
    for r in tqdm(rows, desc="refine own", unit="answer", disable=not progress):
        answer = answers.get(r["id"], "")
        if not answer.strip():
            continue
        right = _names(answer, r["references"])
        out = uq.refine(r["text"], answer, mode="regenerate", answer_source="generated")
        changed = out.answer != answer
        now = _names(out.answer, r["references"])
        c["changed"] += changed
        c["right" if right else "wrong"] += 1
        c["right_to_wrong"] += changed and right and not now
        c["wrong_to_right"] += changed and not right and now
        if changed and right != now:
            cases.append(case("right_to_wrong" if right else "wrong_to_right", r["text"], answer, out.answer,
                              group=r["id"]))
    return dict(c), cases
