"""The planted-pair yardstick: pairs of answers that differ in one fact.

Each pair is one question answered twice: the *correct* twin gives the fact as a reference
answer states it, the *planted* twin gives a wrong value of the same kind (`spanuq.label.plant`)
in its place, every other character equal. A scorer that means "likely wrong" must give the
planted slot a higher û than the correct one. Three sources of pairs:

* ``templated``: a short answer written from a template (``templates.txt`` beside the data:
  "The answer is {value}." …) around the reference and around a wrong value;
* ``own``: the backbone's own answer to the question with its answer slot set to the reference
  and to a wrong value (``knew``: the backbone's own answer already named a reference);
* ``pasted``: multi-sentence answers a person might paste (``pasted.jsonl``), each fact of
  ``plants`` swapped in turn for its wrong value.

The data (``spanuq/bench/planted/``): ``facts.jsonl`` — prompts in the prompts stage's format,
each with ``meta.kind`` (year | number | person | place | entity) and ``meta.wrong`` (plausible
wrong values of that kind); ``pasted.jsonl`` — ``{id, domain, prompt, answer, plants: [{slot,
kind, wrong}]}``. Neither shares a question or subject with the bundled training prompts.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from ..label.plant import fact_kind, find_value, rng_for, swap, wrong_values
from ..pipeline.files import iter_jsonl

DATA = Path(__file__).with_name("planted")
FACTS, PASTED, TEMPLATES = DATA / "facts.jsonl", DATA / "pasted.jsonl", DATA / "templates.txt"
SOURCES = ("templated", "own", "pasted")


@dataclass(frozen=True)
class Twin:
    text: str
    slot: tuple[int, int]  # characters [start, end) of the fact in `text`

    @property
    def value(self) -> str:
        return self.text[self.slot[0]: self.slot[1]]


@dataclass(frozen=True)
class PlantedPair:
    id: str
    group: str  # pairs of one question share a group (resampled together by the bootstrap)
    source: str  # templated | own | pasted
    kind: str  # year | number | person | place | entity
    domain: str
    prompt: str
    correct: Twin
    planted: Twin
    knew: bool | None = None  # own: the backbone's own answer named a reference

    def as_dict(self) -> dict:
        return asdict(self)


def templates(path: Path = TEMPLATES) -> list[str]:
    return [t for t in (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
            if t and not t.startswith("#")]


def fill(template: str, value: str) -> Twin:
    start = template.index("{value}")
    text = template.replace("{value}", value)
    if template.startswith("{value}"):
        text = text[0].upper() + text[1:] if value[:1].islower() else text
    return Twin(text, (start, start + len(value)))


def read_facts(path: Path = FACTS) -> list[dict]:
    """Prompt rows with a reference; the kind from ``meta.kind`` (else from the reference's form)."""
    rows = []
    for r in iter_jsonl(path):
        refs = [x for x in r.get("references", []) if x.strip()]
        if not refs:
            continue
        meta = dict(r.get("meta") or {})
        meta.setdefault("kind", fact_kind(refs[0]))
        rows.append({**r, "references": refs, "meta": meta})
    return rows


def wrong_for(row: dict, pool: list[str], salt: str) -> str | None:
    """One wrong value for a fact row: from its ``meta.wrong`` list, else planted (`wrong_values`)."""
    rng = rng_for(row["id"], salt)
    given = row["meta"].get("wrong")
    if given:
        given = [given] if isinstance(given, str) else list(given)
        return given[int(rng.integers(len(given)))]
    out = wrong_values(row["meta"]["kind"], row["references"], pool, rng, 1)
    return out[0] if out else None


def pools(rows: list[dict]) -> dict[str, list[str]]:
    """The references of every row by kind: where wrong values come from without ``meta.wrong``."""
    out: dict[str, list[str]] = {}
    for r in rows:
        out.setdefault(r["meta"]["kind"], []).append(r["references"][0])
    return out


def templated_pairs(rows: list[dict], tmpl: list[str]) -> list[PlantedPair]:
    by_kind = pools(rows)
    out = []
    for r in rows:
        for k, t in enumerate(tmpl):
            wrong = wrong_for(r, by_kind[r["meta"]["kind"]], f"templated{k}")
            if wrong is None:
                continue
            out.append(PlantedPair(f"{r['id']}:t{k}", r["id"], "templated", r["meta"]["kind"], r.get("domain", "custom"),
                                   r["text"], fill(t, r["references"][0]), fill(t, wrong)))
    return out


# the spaCy labels of a span that can answer a question of each kind (`answers_kind`)
KIND_LABELS = {"year": {"DATE"}, "number": {"CARDINAL", "QUANTITY", "MONEY", "PERCENT", "DATE", "TIME", "NUM"},
               "person": {"PERSON"}, "place": {"GPE", "LOC", "FAC"}}


def answers_kind(unit, kind: str) -> bool:
    """Whether a claim unit can be the answer to a question of ``kind``: a year or a number where one is
    asked (a date or a quantity, or any span with a digit), a person or a place by its entity label,
    any named thing for ``entity``. Swapping another word for the reference ("The prime minister during
    World War II was Winston Churchill" → "during Neville Chamberlain was Winston Churchill") would
    leave a "correct" twin that still answers wrong."""
    if kind in ("year", "number") and any(ch.isdigit() for ch in unit.anchor):
        return True
    return unit.label in KIND_LABELS[kind] if kind in KIND_LABELS else unit.kind == "entity" or unit.named


def answer_slot(answer: str, row: dict, nlp, min_score: float = 85.0) -> tuple[tuple[int, int], bool] | None:
    """Where ``answer`` gives the fact ``row`` asks for, and whether it gives it right: a
    reference's first whole-word occurrence, else the first span the labeller's reference rule
    calls a wrong answer (`spanuq.label.offline.reference_verdicts`) that can answer a question of
    the row's kind (`answers_kind`); None when neither."""
    from ..label.offline import reference_verdicts
    from ..label.units import extract_units
    from ..pipeline.records import Prompt

    hit = find_value(answer, row["references"])
    if hit is not None:
        return hit, True
    prompt = Prompt(id=row["id"], domain=row.get("domain", "triviaqa"), text=row["text"], references=row["references"])
    if prompt.domain not in ("triviaqa", "longform_qa"):
        prompt = prompt.model_copy(update={"domain": "triviaqa"})  # the rule judges factoid answers
    units = extract_units(nlp(answer), 3, 32)
    verdicts = reference_verdicts(units, answer, prompt, min_score, nlp)
    kind = row["meta"]["kind"]
    wrong = [i for i, v in verdicts.items() if v == "mismatch" and answers_kind(units[i], kind)]
    if not wrong:
        return None
    u = units[min(wrong)]
    return (u.start, u.end), False


def own_pairs(rows: list[dict], answers: dict[str, str], nlp) -> tuple[list[PlantedPair], dict[str, str]]:
    """Pairs from the backbone's own answers (``answers``: row id → answer); the rows whose answer
    has no slot to swap, with why."""
    by_kind = pools(rows)
    out, skipped = [], {}
    for r in rows:
        answer = answers.get(r["id"], "")
        found = answer_slot(answer, r, nlp) if answer.strip() else None
        if found is None:
            skipped[r["id"]] = "no answer slot" if answer.strip() else "empty answer"
            continue
        (s, e), knew = found
        wrong = wrong_for(r, by_kind[r["meta"]["kind"]], "own")
        if wrong is None:
            skipped[r["id"]] = "no wrong value"
            continue
        correct_text, c_slot = swap(answer, s, e, r["references"][0]) if not knew else (answer, (s, e))
        planted_text, p_slot = swap(answer, s, e, wrong)
        out.append(PlantedPair(f"{r['id']}:own", r["id"], "own", r["meta"]["kind"], r.get("domain", "custom"),
                               r["text"], Twin(correct_text, c_slot), Twin(planted_text, p_slot), knew))
    return out, skipped


def pasted_pairs(path: Path = PASTED) -> list[PlantedPair]:
    out = []
    for r in iter_jsonl(path):
        for k, p in enumerate(r["plants"]):
            s = r["answer"].find(p["slot"])
            if s < 0 or r["answer"].find(p["slot"], s + 1) >= 0:
                raise ValueError(f"{path}: {r['id']}: slot {p['slot']!r} must occur exactly once in the answer")
            planted, slot = swap(r["answer"], s, s + len(p["slot"]), p["wrong"])
            out.append(PlantedPair(f"{r['id']}:p{k}", r["id"], "pasted", p["kind"], r.get("domain", "custom"),
                                   r["prompt"], Twin(r["answer"], (s, s + len(p["slot"]))), Twin(planted, slot)))
    return out
