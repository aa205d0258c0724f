"""Given answers read with their sources: the grounded pairs' twins (`spanuq.data.grounded`).

A grounded prompt row (``prompts.grounded``) carries its pairs' two answers in ``meta["twins"]``: the
answer that states the fact, and the same answer with one value swapped for a wrong one of the same
kind (in case ``a`` a value the source also mentions, so "is this string in the source" cannot tell
them apart).  For a row in ``label.given_splits`` each becomes a given answer, read teacher-forced
after the row's rendered sources (its generation's chat prompt), its one claim the slot, labelled by
the source (the rule of `spanuq.train.grounded_slots.label`):

    u* = 0  the right value where the source states it (cases a, b, c — c in other words)
    u* = 1  the wrong value; the right value where the source is silent (case d)

Named ``<prompt id>@given-src-<case><k>r`` (the right fact) and ``…w`` (the wrong one); the right
answer of pairs that share it (a and b) is written once.  `train.given_kinds: [grounded]` trains on
them; on dev they are what a with-sources calibration of given answers can be fitted on.
"""
from __future__ import annotations

import json

from ..config import LabelConfig
from ..pipeline.records import Claim, LabeledResponse, Prompt
from .answer_ids import GROUNDED_TAG, SLOT, answer_id
from .plant import swap


def twin_label(case: str, wrong: bool) -> float:
    return 1.0 if wrong or case == "d" else 0.0


def grounded_given_answers(cfg: LabelConfig, prompts: dict[str, Prompt], records: list[LabeledResponse],
                           tokenizer) -> tuple[list[LabeledResponse], list[Claim]]:
    """The twins of the grounded rows of ``cfg.given_splits`` (module docstring): label rows, claims."""
    from .targets import span_targets

    rows, claims = [], []
    for r in records:
        p = prompts[r.prompt_id]
        if not p.grounded or r.split not in cfg.given_splits:
            continue
        seen: set[str] = set()
        for k, t in enumerate(json.loads(p.meta["twins"])):
            s, e = t["slot"]
            planted, (ps, pe) = swap(t["answer"], s, e, t["wrong"])
            for text, (a, b), wrong in ((t["answer"], (s, e), False), (planted, (ps, pe), True)):
                if text in seen:
                    continue
                seen.add(text)
                aid = answer_id(r.prompt_id, f"{GROUNDED_TAG}{t['case']}{k}{'w' if wrong else 'r'}")
                u = twin_label(t["case"], wrong)
                c = Claim(id=f"{aid}:{SLOT}", prompt_id=aid, text=text, start=a, end=b, support=[1.0 - u],
                          evidence=[f"given:source-{'planted' if wrong else 'case-' + t['case']}"])
                ids = tokenizer(text, add_special_tokens=False)["input_ids"]
                spans, lost = span_targets([c], text, ids, tokenizer)
                if not spans:
                    continue
                rows.append(LabeledResponse(prompt_id=aid, domain=p.domain, split=r.split, response=text,
                                            n_tokens=len(ids), spans=spans, u_seq=spans[0].u, unplaced=lost,
                                            token_ids=ids, with_context=True))
                claims.append(c)
    return rows, claims
