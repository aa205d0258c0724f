"""Build the grounded pair files: answers that differ in one fact, each with the passage it is read against.

    pip install --no-deps mendeleev==1.3.0      # data only: its SQLite file is read directly
    python scripts/build_grounded_pairs.py      # writes both files below

Provenance: the facts are the chemical elements' discovery year, discoverer, country of
discovery, atomic number and symbol in the ``elements`` table of ``mendeleev/elements.db``
(PyPI package mendeleev 1.3.0, MIT licence). The passages and answers are sentences written
for this project (the two ``templates.yaml``), filled with those facts; no text of the package
is copied. Elements with an odd atomic number go to the bench
(``spanuq/bench/grounded/pairs.jsonl``), even ones to the grounded training data
(``spanuq/label/grounded/pairs.jsonl``), each with its own wording: no element, passage or
sentence is shared. Neither set shares a question with the bundled training prompts or the
planted bench (their facts are about history, people and places, not elements' discovery).

Each element gets one pair per kind (year | number | person | place | entity) and case:

* ``a``: the wrong value appears elsewhere in the source (the second element's sentence);
* ``b``: the wrong value is not in the source;
* ``c``: the source states the right fact in other words (a spelled-out year or number, the
  discoverer's surname only, the country's adjective), the wrong value not in the source;
  not built for ``entity`` (a symbol has no other words);
* ``d``: the source is silent on the fact (its sentence left out), the wrong value not in it.

Row: ``{id, group, kind, case, prompt, context: [passage], answer, slot: [start, end], wrong}``.
"""
from __future__ import annotations

import argparse
import json
import re
import sqlite3
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from spanuq.bench.grounded import in_source  # noqa: E402  (the overlap control's notion of "in the source")

OUT = {"bench": ROOT / "spanuq/bench/grounded", "train": ROOT / "spanuq/label/grounded"}
DEMONYMS = ROOT / "spanuq/label/grounded/demonyms.tsv"
KINDS = ("year", "number", "person", "place", "entity")
CASES = ("a", "b", "c", "d")
ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen " \
       "seventeen eighteen nineteen".split()
TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def words(n: int) -> str:
    """An integer 0-9999 in English words; a four-digit year as it is said ("seventeen seventy-four")."""
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + ("" if n % 10 == 0 else "-" + ONES[n % 10])
    if n < 1000:
        return ONES[n // 100] + " hundred" + ("" if n % 100 == 0 else " and " + words(n % 100))
    hi, lo = divmod(n, 100)
    if hi % 10 == 0 and lo < 10:  # 1905: "nineteen oh five", 2000: "two thousand"
        return words(n // 1000) + " thousand" + ("" if n % 1000 == 0 else " and " + words(n % 1000))
    return words(hi) + " " + ("hundred" if lo == 0 else ("oh " + ONES[lo]) if lo < 10 else words(lo))


def person(discoverers: str | None) -> str | None:
    """The first named discoverer, when it reads as a person's full name."""
    if not discoverers:
        return None
    first = re.split(r",| and ", discoverers)[0].strip()
    parts = first.split()
    if len(parts) < 2 or any(ch.isdigit() for ch in first) or "." in parts[0] or len(parts[0]) < 3:
        return None
    if re.search(r"al\b|Centre|Laborator|Institut|Universit|ancient", first):
        return None
    return first


def elements(db: Path, demonyms: dict[str, str]) -> list[dict]:
    con = sqlite3.connect(db)
    rows = con.execute("select atomic_number, name, symbol, discoverers, discovery_year, discovery_location "
                       "from elements order by atomic_number")
    out = []
    for z, name, sym, disc, year, place in rows:
        p = person(disc)
        if p is None or not year or not place or "/" in place:
            continue
        out.append({"number": str(z), "name": name, "entity": sym, "year": str(year), "person": p,
                    "surname": p.split()[-1], "place": place, "demonym": demonyms.get(place),
                    "number_words": words(z), "year_words": words(int(year))})
    return out


def differs(a: dict, b: dict) -> bool:
    """Whether no fact of ``b`` equals ``a``'s (so a wrong value from b is wrong for a)."""
    return all(a[k] != b[k] for k in KINDS) and a["surname"] != b["surname"]


def passage(tmpl: dict, e: dict, other: dict, kind: str, case: str) -> str:
    """The source of a pair: every fact of ``e`` (the asked one in other words for case c, left
    out for case d), then the other element's sentence."""
    fields = {**e, "Name": e["name"], "name": e["name"].lower(), "o_name": other["name"],
              **{f"o_{k}": other[k] for k in KINDS}}
    out = []
    for k in ("number", "year", "person", "place", "entity"):  # the sentence naming the element first
        if k == kind and case == "d":
            continue
        out.append(tmpl["passage"][f"{k}_words" if k == kind and case == "c" else k].format(**fields))
    out.append(tmpl["passage"]["other"].format(**fields))
    return " ".join(out)


def pairs(tmpl: dict, els: list[dict], split: str) -> list[dict]:
    out = []
    for i, e in enumerate(els):
        others = [o for o in els[i + 1:] + els[:i] if differs(e, o)]
        other, third = others[0], others[1:]
        for kind in KINDS:
            for case in CASES:
                if case == "c" and (kind == "entity" or (kind == "place" and not e["demonym"])):
                    continue
                src = passage(tmpl, e, other, kind, case)
                if case == "a":
                    wrong = other[kind]
                else:  # a value of the same kind from an element the source does not name
                    wrong = next((o[kind] for o in third if o[kind] not in src and not in_source(o[kind], [src])
                                  and o[kind] != e[kind]), None)
                if wrong is None:
                    continue
                q, a = tmpl["questions"][kind]
                fields = {"Name": e["name"], "name": e["name"].lower()}
                prefix, suffix = a.split("{value}")
                prefix, suffix = prefix.format(**fields), suffix.format(**fields)
                answer = prefix + e[kind] + suffix
                out.append({"id": f"grounded-{split}-{e['name'].lower()}-{kind}-{case}", "group": e["name"],
                            "kind": kind, "case": case, "prompt": q.format(**fields), "context": [src],
                            "answer": answer, "slot": [len(prefix), len(prefix) + len(e[kind])], "wrong": wrong})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", default=None, help="mendeleev's elements.db (default: the installed package's)")
    args = ap.parse_args()
    if args.db is None:
        import importlib.util

        args.db = Path(importlib.util.find_spec("mendeleev").origin).with_name("elements.db")
    demonyms = dict(line.split("\t") for line in DEMONYMS.read_text(encoding="utf-8").splitlines() if line.strip())
    els = elements(Path(args.db), demonyms)
    for split, keep in (("bench", 1), ("train", 0)):
        tmpl = yaml.safe_load((OUT[split] / "templates.yaml").read_text(encoding="utf-8"))
        rows = pairs(tmpl, [e for e in els if int(e["number"]) % 2 == keep], split)
        path = OUT[split] / "pairs.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        print(f"{split}: {len(rows)} pairs about {len({r['group'] for r in rows})} elements -> {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
