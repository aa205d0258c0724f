"""Ids of the answers the label stage adds beside a prompt's greedy answer, and what the stages
after it rebuild from them: given answers (`spanuq.label.given`) are named
``<prompt id>@given-<tag>`` (``swap``, ``t<k>r``, ``t<k>w``) and their slot claim
``<answer id>:slot``. (Sample answers, ``<prompt id>@sample<i>``: `spanuq.label.sample_answers`.)
"""
from __future__ import annotations

from ..pipeline.records import Generation, LabeledResponse, Sample

MARK = "@given-"
SLOT = "slot"  # the claim id suffix of a given answer's slot: ``<answer id>:slot``


def answer_id(prompt_id: str, tag: str) -> str:
    return f"{prompt_id}{MARK}{tag}"


def is_given(answer: str) -> bool:
    return MARK in answer


GIVEN_KINDS = ("swap", "template", "grounded")
GROUNDED_TAG = "src-"  # a grounded pair's twin read with its sources: ``src-<pair id>-r`` / ``-w``


def given_kind(answer: str) -> str | None:
    """``swap`` (the backbone's own answer, its slot swapped), ``template`` (a templated short
    answer, ``t<k>r`` / ``t<k>w``) or ``grounded`` (a grounded pair's twin, `spanuq.label.grounded_given`)
    for a given answer's id; None for any other answer."""
    head, sep, tag = answer.rpartition(MARK)
    if not sep:
        return None
    return "swap" if tag == "swap" else "grounded" if tag.startswith(GROUNDED_TAG) else "template"


def parent_id(answer: str) -> str:
    head, sep, _ = answer.rpartition(MARK)
    return head if sep else answer


def slot_label(record: LabeledResponse) -> float | None:
    """u* of a given answer's slot (1: a planted wrong value, 0: a reference), None without one."""
    return next((s.u for s in record.spans if s.claim_id.endswith(f":{SLOT}")), None)


def with_given_answers(gens: list[Generation], records: list[LabeledResponse]) -> list[Generation]:
    """``gens`` and, after them, a generation record for every given answer of ``records``: its
    prompt's chat prompt and samples, the given text and token ids as the answer."""
    by_id = {g.prompt_id: g for g in gens}
    out = list(gens)
    for r in records:
        if not is_given(r.prompt_id) or r.prompt_id in by_id:
            continue
        g = by_id.get(parent_id(r.prompt_id))
        if g is None or r.token_ids is None:
            raise KeyError(f"labels.jsonl names given answer {r.prompt_id!r}, whose prompt has no generation; "
                           "re-run `spanuq label`")
        out.append(g.model_copy(update={"prompt_id": r.prompt_id, "greedy": Sample(text=r.response,
                                                                                   token_ids=r.token_ids),
                                        "answer_given": True}))
    return out
