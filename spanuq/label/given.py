"""Given answers as training data: what teaches û the difference a reader of a pasted answer
cares about — a wrong fact against the right one in the same words.

The teacher's labels on the backbone's own answers say "would the backbone say this again".
Read teacher-forced, an answer someone else wrote looks unlike anything the backbone would say,
right or wrong. So for every prompt of a factoid domain in ``label.given_splits`` (dev: to
calibrate on; train: to train on) whose own answer has an *answer slot* the reference rule judges
(the first claim with evidence ``reference:match`` or ``reference:mismatch``,
`offline.reference_verdicts`), the label stage adds given answers:

* ``swap``: the own answer with its slot swapped — a slot that names a reference becomes a
  wrong value of the same kind (`plant.wrong_values`: u* = 1), a slot the rule calls wrong
  becomes the reference (u* = 0); every other claim keeps its label, its offsets shifted;
* ``t<k>r`` / ``t<k>w``: short answers from ``given_templates.txt`` around the reference
  (u* = 0) and around a wrong value (u* = 1), the slot their only claim.

Their labels come from the reference rule alone. Wrong values come from the answers of other
prompts *of the same split* (a test answer is never planted as a wrong training value). Each is
named ``<prompt id>@given-<tag>``, keeps its prompt's split and its own token ids (the label row
carries them), and is read teacher-forced like any given answer; the train stage fits û's
calibration for given answers on the dev ones (`spanuq.model.calibration`).
"""
from __future__ import annotations

from pathlib import Path

from ..config import LabelConfig
from ..pipeline.records import Claim, Generation, LabeledResponse, Prompt
from .answer_ids import SLOT, answer_id
from .plant import fact_kind, rng_for, swap, wrong_values

TEMPLATES = Path(__file__).with_name("given_templates.txt")
FACTOID = ("triviaqa", "longform_qa")
PLANTED, REFERENCE = "given:planted", "given:reference"


def templates(path: Path = TEMPLATES) -> list[str]:
    return [t for t in (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
            if t and not t.startswith("#")]


def slot_claim(answer: str, claims: list[Claim]) -> tuple[Claim, bool] | None:
    """The answer slot (the first claim the reference rule judged) and whether it names a reference;
    None when no claim was judged, or another claim anchors on the same words (a swap of one would
    leave the other saying the old value)."""
    judged = sorted((c for c in claims if any(e.startswith("reference:") for e in c.evidence)), key=lambda c: c.start)
    if not judged:
        return None
    slot = judged[0]
    anchor = answer[slot.start:slot.end].lower()
    if any(c is not slot and answer[c.start:c.end].lower() == anchor for c in claims):
        return None
    return slot, "reference:match" in slot.evidence


def _claim(aid: str, text: str, start: int, end: int, wrong: bool, tag: str) -> Claim:
    return Claim(id=f"{aid}:{SLOT}", prompt_id=aid, text=text, start=start, end=end,
                 support=[0.0 if wrong else 1.0], evidence=[PLANTED if wrong else REFERENCE, f"given:{tag}"])


def swapped(gen: Generation, claims: list[Claim], value: str, slot: Claim, wrong: bool) -> tuple[str, list[Claim]]:
    """The own answer with ``slot``'s characters replaced by ``value``, and its claims: the slot
    relabelled (u* = 1 when ``wrong``, else 0), the others kept with shifted offsets (a claim that
    overlaps the slot is dropped)."""
    aid = answer_id(gen.prompt_id, "swap")
    text, (s, e) = swap(gen.greedy.text, slot.start, slot.end, value)
    shift = (e - s) - (slot.end - slot.start)
    out = []
    for k, c in enumerate(claims):
        if c is slot:
            out.append(_claim(aid, c.text.replace(gen.greedy.text[slot.start:slot.end], value), s, e, wrong, "swap"))
        elif c.end <= slot.start or c.start >= slot.end:
            moved = shift if c.start >= slot.end else 0
            out.append(c.model_copy(update={"id": f"{aid}:{k}", "prompt_id": aid, "start": c.start + moved,
                                            "end": c.end + moved}))
    return text, out


def templated(prompt_id: str, template: str, k: int, value: str, wrong: bool) -> tuple[str, str, list[Claim]]:
    """A short answer from ``template`` around ``value``: (its id, text, its one claim)."""
    tag = f"t{k}{'w' if wrong else 'r'}"
    aid = answer_id(prompt_id, tag)
    start = template.index("{value}")
    text = template.replace("{value}", value)
    if start == 0 and value[:1].islower():
        text = text[0].upper() + text[1:]
    return aid, text, [_claim(aid, text, start, start + len(value), wrong, tag)]


def pool_key(prompt: Prompt, kind: str, label: str | None) -> str:
    """Wrong values of one question are drawn from the answers of questions of the same sort:
    its table's topic (capital, author, ...), else its answer's entity label, else its kind."""
    return prompt.meta.get("topic") or (label if kind in ("person", "place", "entity") and label else kind)


def given_answers(cfg: LabelConfig, prompts: dict[str, Prompt], gens: list[Generation],
                  records: list[LabeledResponse], claims: dict[str, list[Claim]], tokenizer, nlp
                  ) -> tuple[list[LabeledResponse], list[Claim]]:
    """The given answers of the prompts of ``cfg.given_splits`` (module docstring): label rows, claims."""
    from .targets import span_targets

    split = {r.prompt_id: r.split for r in records if r.status == "ok"}
    chosen = [g for g in gens if split.get(g.prompt_id) in cfg.given_splits
              and prompts[g.prompt_id].domain in FACTOID and prompts[g.prompt_id].references
              and prompts[g.prompt_id].context is None]  # rows with sources: their pairs' twins (grounded_given.py)
    refs = {g.prompt_id: next(r for r in prompts[g.prompt_id].references if r.strip()) for g in chosen}
    labels = {g.prompt_id: (d.ents[0].label_ if d.ents else None)
              for g, d in zip(chosen, nlp.pipe([refs[g.prompt_id] for g in chosen]))}
    kinds = {pid: fact_kind(refs[pid], labels[pid]) for pid in refs}
    pools: dict[tuple[str, str], list[str]] = {}
    for g in chosen:
        pools.setdefault((split[g.prompt_id], pool_key(prompts[g.prompt_id], kinds[g.prompt_id],
                                                       labels[g.prompt_id])), []).append(refs[g.prompt_id])
    tmpl = templates()
    rows, out_claims = [], []
    for g in chosen:
        p, pid = prompts[g.prompt_id], g.prompt_id
        rng = rng_for(pid, "given")
        pool = pools[(split[pid], pool_key(p, kinds[pid], labels[pid]))]
        wrong = wrong_values(kinds[pid], p.references, pool, rng, 1 + cfg.given_templates)
        made: list[tuple[str, str, list[Claim]]] = []
        found = slot_claim(g.greedy.text, claims.get(pid, [])) if cfg.given_swaps else None
        if found is not None and (wrong or not found[1]):  # a right slot needs a wrong value to plant
            slot, right = found
            text, cs = swapped(g, claims[pid], wrong[0] if right else refs[pid], slot, wrong=right)
            made.append((answer_id(pid, "swap"), text, cs))
        for k, i in enumerate(rng.permutation(len(tmpl))[: cfg.given_templates] if wrong else []):
            made.append(templated(pid, tmpl[int(i)], k, refs[pid], wrong=False))
            made.append(templated(pid, tmpl[int(i)], k, wrong[min(1 + k, len(wrong) - 1)], wrong=True))
        for aid, text, cs in made:
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            spans, lost = span_targets(cs, text, ids, tokenizer)
            if not spans:
                continue
            rows.append(LabeledResponse(prompt_id=aid, domain=p.domain, split=split[pid], response=text,
                                        n_tokens=len(ids), spans=spans, u_seq=sum(s.u for s in spans) / len(spans),
                                        unplaced=lost, token_ids=ids))
            out_claims += cs
    return rows, out_claims
