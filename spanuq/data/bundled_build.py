"""Build the bundled prompt set from its data files (``spanuq/data/bundled/sources``).

Each table is a tab-separated file, one fact or hand-written prompt per line, with
its reference answers in one cell (``answer | alias | case:Xy``, see
:mod:`spanuq.data.aliases`).  ``templates.yaml`` says how rows become prompts.
:func:`build` reads the tables in order, templates each row, skips generated
prompts a hand-written one already asks, numbers each domain's prompts
(``bundled-<domain>-0001``...), and refuses duplicates and ambiguous references.
The same files always give the same prompts, byte for byte.

    python scripts/make_bundled_prompts.py          # writes spanuq/data/bundled/prompts.jsonl
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ..pipeline.files import write_jsonl
from ..pipeline.records import Prompt
from .aliases import Entry, Ref, check, parse_refs
from .prompts import bundled_path

TABLE_KEYS = {"handwritten", "slots", "meta", "select", "skip_if_asked", "key_facts"}
SLOT_KEYS = {"domain", "text", "text_if", "references"}


def sources_dir() -> Path:
    return Path(str(resources.files("spanuq.data") / "bundled" / "sources"))


def read_table(path: Path) -> list[tuple[int, dict[str, str]]]:
    """(line number, row) of a TSV with a header; ``#`` lines and blank lines are skipped."""
    rows, header = [], None
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        cells = [c.strip() for c in line.split("\t")]
        if header is None:
            header = cells
            continue
        if len(cells) > len(header):
            raise ValueError(f"{path.name}:{n}: {len(cells)} cells, the header has {len(header)} "
                             f"({', '.join(header)})")
        rows.append((n, dict(zip(header, cells + [""] * (len(header) - len(cells))))))
    if header is None:
        raise ValueError(f"{path.name}: empty table")
    return rows


@dataclass
class Draft:
    """A prompt before numbering: where it came from, and its references with their flags."""

    domain: str
    text: str
    refs: list[Ref]
    meta: dict[str, str]
    where: str
    table: str
    row: dict[str, str]
    key_facts: bool = False


def _plain(cell: str) -> str:
    """A cell as text in a template: a list of references formats as its first one, without flags."""
    refs = parse_refs(cell) if "|" in cell or cell.startswith(("case:", "ok:")) else []
    return refs[0].text if refs else cell


def _fill(template: str, row: dict[str, str], where: str) -> str:
    values = {k: _plain(v) for k, v in row.items()}
    try:
        return template.format(**values)
    except KeyError as e:
        raise ValueError(f"{where}: the template {template!r} needs a column {e.args[0]!r}") from None


def _slot(spec: dict[str, Any], i: int, row: dict[str, str], where: str) -> dict[str, Any]:
    slots = spec["slots"]
    if "select" not in spec:
        return slots[i % len(slots)]
    name = row.get(spec["select"], "")
    if name not in slots:
        raise ValueError(f"{where}: {spec['select']} {name!r} is not one of {', '.join(slots)}")
    return slots[name]


def _key_facts(rule: bool | dict[str, str], row: dict[str, str]) -> bool:
    """``key_facts: true`` for a whole table, or ``{column: value}`` for some of its rows."""
    if isinstance(rule, dict):
        return any(row.get(k) == v for k, v in rule.items())
    return bool(rule)


def table_drafts(name: str, spec: dict[str, Any], folder: Path) -> list[Draft]:
    """One table's prompts, in row order."""
    out = []
    for i, (line, row) in enumerate(read_table(folder / f"{name}.tsv")):
        where = f"{name}.tsv:{line}"
        slot = _slot(spec, i, row, where)
        text = slot["text"]
        for column, alternative in slot.get("text_if", {}).items():
            if row.get(column):
                text = alternative
        meta = {k: _fill(v, row, where) for k, v in spec.get("meta", {}).items()}
        if slot["references"] not in row:
            raise ValueError(f"{where}: no column {slot['references']!r} for the references")
        refs = parse_refs(row[slot["references"]])
        out.append(Draft(slot["domain"], _fill(text, row, where), refs, {k: v for k, v in meta.items() if v},
                         where, name, row, _key_facts(spec.get("key_facts", False), row)))
    return out


def load_templates(folder: Path) -> dict[str, dict[str, Any]]:
    """``templates.yaml``, checked: unknown keys and tables without a template are errors."""
    templates = yaml.safe_load((folder / "templates.yaml").read_text(encoding="utf-8"))
    for name, spec in templates.items():
        slots = spec.get("slots")
        slots = list(slots.values()) if isinstance(slots, dict) else slots
        if not slots:
            raise ValueError(f"templates.yaml: {name} has no slots")
        bad = (set(spec) - TABLE_KEYS) | {k for s in slots for k in s if k not in SLOT_KEYS}
        missing = {k for s in slots for k in ("domain", "text", "references") if k not in s}
        if bad or missing:
            raise ValueError(f"templates.yaml: {name}: unknown keys {sorted(bad)}, "
                             f"missing slot keys {sorted(missing)}")
    orphans = sorted(p.stem for p in folder.glob("*.tsv") if p.stem not in templates)
    if orphans:
        raise ValueError(f"{folder}: tables with no entry in templates.yaml: {', '.join(orphans)}")
    return templates


def drafts(folder: Path | None = None) -> list[Draft]:
    """Every prompt of the set in file order: hand-written tables, then generated ones."""
    folder = folder or sources_dir()
    templates = load_templates(folder)
    out: list[Draft] = []
    for name, spec in templates.items():
        if spec.get("handwritten"):
            out.extend(table_drafts(name, spec, folder))
    asked = [d.text for d in out]
    seen = {t.lower() for t in asked}
    for name, spec in templates.items():
        if spec.get("handwritten"):
            continue
        pattern = spec.get("skip_if_asked")
        for d in table_drafts(name, spec, folder):
            if d.text.lower() in seen:
                continue
            if pattern:  # the same fact asked in other words
                rx = re.compile(pattern.format(**{k: re.escape(v) for k, v in d.row.items()}), re.IGNORECASE)
                if any(rx.search(t) for t in asked):
                    continue
            seen.add(d.text.lower())
            out.append(d)
    return out


def build(folder: Path | None = None) -> list[Prompt]:
    """The bundled prompts; ValueError listing every duplicate or ambiguous reference."""
    ds = drafts(folder)
    problems = check([Entry(d.where, d.table, d.refs, d.key_facts) for d in ds])
    seen: dict[str, str] = {}
    for d in ds:
        key = d.text.lower()
        if key in seen:
            problems.append(f"{d.where}: the same prompt as {seen[key]}: {d.text!r}")
        seen.setdefault(key, d.where)
    entities: dict[str, str] = {}
    for d in ds:
        entity = d.meta.get("entity") if d.domain == "biography" else None
        if entity in entities:
            problems.append(f"{d.where}: a second biography of {entity} ({entities[entity]})")
        if entity:
            entities[entity] = d.where
    if problems:
        raise ValueError(f"{len(problems)} problem(s) in the bundled prompt tables:\n  " + "\n  ".join(problems))
    out, numbers = [], {}
    for d in ds:
        numbers[d.domain] = numbers.get(d.domain, 0) + 1
        meta = {"source": "bundled", **d.meta}
        cs = [r.text for r in d.refs if r.case_sensitive]
        if cs:
            meta["case_sensitive"] = json.dumps(cs, ensure_ascii=False)
        out.append(Prompt(id=f"bundled-{d.domain}-{numbers[d.domain]:04d}", domain=d.domain, text=d.text,
                          references=list(dict.fromkeys(r.text for r in d.refs)), meta=meta))
    return out


def write(prompts: list[Prompt], path: Path | None = None) -> Path:
    path = path or bundled_path()
    write_jsonl(path, prompts)
    return path
