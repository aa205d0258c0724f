"""The English Mu-SHROOM splits (SemEval-2025 Task 3): read from files the user gives, cached normalised.

The data are not shipped with SpanUQ (the task's repository states no license): pass the
English files of https://github.com/Helsinki-NLP/mu-shroom once,

    spanuq bench mushroom --split val --data path/to/mu-shroom        # a checkout, a folder or files

(validation: ``splits/val/v2/mushroom.en-val.v2.extra.jsonl`` or ``val/v1``; labelled test:
``splits/test_labeled/v1/mushroom.en-tst.v1.extra.jsonl``).  A file is recognised by its
first record (``lang`` EN, ``id`` ``val-en-…`` or ``tst-en-…``, labels present); each split is
parsed, checked and written to ``<paths.cache>/bench/mushroom/en-<split>.jsonl`` with the
source's sha256, so later runs need no ``--data``.

One record: ``id``, ``model_input`` (the question), ``model_output_text`` (another model's
answer), ``model_id``, ``hard_labels`` (``[[start, end)]`` character spans marked by most
annotators) and ``soft_labels`` (``[{start, end, prob}]``, prob = share of annotators).
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..pipeline.files import iter_jsonl, read_records, sha256_file, write_json, write_jsonl

SPLITS = {"val": "val-en-", "test": "tst-en-"}
SOURCE = "https://github.com/Helsinki-NLP/mu-shroom"


class SoftSpan(BaseModel):
    model_config = ConfigDict(extra="ignore")
    start: int = Field(ge=0)
    end: int = Field(ge=0)
    prob: float = Field(ge=0, le=1)


class MushroomItem(BaseModel):
    """One labelled answer of the task (other fields of the source file are dropped)."""

    model_config = ConfigDict(extra="ignore")
    id: str
    model_input: str
    model_output_text: str
    model_id: str | None = None
    hard_labels: list[tuple[int, int]]
    soft_labels: list[SoftSpan]

    @model_validator(mode="after")
    def _spans_inside(self) -> "MushroomItem":
        n = len(self.model_output_text)
        for s, e in list(self.hard_labels) + [(x.start, x.end) for x in self.soft_labels]:
            if not 0 <= s <= e <= n:
                raise ValueError(f"span [{s}, {e}) is outside the answer's {n} characters")
        return self

    @property
    def text_len(self) -> int:
        return len(self.model_output_text)

    def reference(self) -> dict:
        """The record the metrics read (`metrics.item_scores`)."""
        return {"hard_labels": [list(h) for h in self.hard_labels],
                "soft_labels": [s.model_dump() for s in self.soft_labels], "text_len": self.text_len}


def read_items(path: str | Path) -> list[MushroomItem]:
    """Every record of a labelled Mu-SHROOM JSONL file, checked; a bad record is a ValueError
    naming the file and line."""
    out = []
    for n, row in enumerate(iter_jsonl(path), 1):
        if "hard_labels" not in row or "soft_labels" not in row:
            raise ValueError(f"{path}:{n}: no hard_labels/soft_labels (an unlabelled file? the labelled test "
                             "split is splits/test_labeled/v1/mushroom.en-tst.v1.extra.jsonl)")
        try:
            out.append(MushroomItem.model_validate(row))
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(x) for x in first["loc"]) or "record"
            raise ValueError(f"{path}:{n}: {where}: {first['msg']}") from None
    if not out:
        raise ValueError(f"{path}: no records")
    ids = [x.id for x in out]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: repeated ids")
    return out


def split_of(path: Path) -> str | None:
    """``val`` / ``test`` for an English labelled file (judged by its first record), else None."""
    try:
        with open(path, encoding="utf-8") as f:
            first = json.loads(f.readline() or "{}")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(first, dict) or str(first.get("lang", "")).upper() != "EN":
        return None
    if "hard_labels" not in first or "soft_labels" not in first:
        return None
    return next((s for s, prefix in SPLITS.items() if str(first.get("id", "")).startswith(prefix)), None)


def find_split_file(data: list[str | Path], split: str) -> Path:
    """The one English labelled file of ``split`` among the given files and folders (searched
    recursively).  Copies with the same questions, answers and labels (val v1 and v2) count as
    one: the last by name (v2) is used."""
    found: list[Path] = []
    for d in map(Path, data):
        if not d.exists():
            raise FileNotFoundError(f"--data {d}: no such file or folder")
        files = sorted(d.rglob("*.jsonl")) if d.is_dir() else [d]
        found += [f for f in files if split_of(f) == split]
    if not found:
        raise FileNotFoundError(f"no English labelled Mu-SHROOM {split} file in {', '.join(map(str, data))} "
                                f"(expected records with lang EN, ids {SPLITS[split]}…, hard_labels and soft_labels; "
                                f"see {SOURCE})")
    contents: dict[str, Path] = {}
    keep = {"id", "model_input", "model_output_text", "hard_labels", "soft_labels"}
    for f in sorted(found, key=lambda p: (p.name, str(p))):
        items = sorted(read_items(f), key=lambda x: x.id)
        contents[json.dumps([x.model_dump(include=keep) for x in items], sort_keys=True)] = f
    if len(contents) > 1:
        raise ValueError(f"several different English {split} files: {', '.join(map(str, contents.values()))}; "
                         "pass the one to use as --data FILE")
    return next(iter(contents.values()))


def cache_paths(cache_root: str | Path, split: str) -> tuple[Path, Path]:
    d = Path(cache_root) / "bench" / "mushroom"
    return d / f"en-{split}.jsonl", d / f"en-{split}.source.json"


def load_split(split: str, cache_root: str | Path, data: list[str | Path] | None = None
               ) -> tuple[list[MushroomItem], dict]:
    """(items sorted by id, source info).  With ``data``, the split's file is found there,
    parsed and cached (replacing an older cache); without, the cache is read."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; one of {sorted(SPLITS)}")
    items_file, info_file = cache_paths(cache_root, split)
    if data:
        src = find_split_file(list(data), split)
        items = sorted(read_items(src), key=lambda x: x.id)
        info = {"split": split, "source": str(src.resolve()), "sha256": sha256_file(Path(src)), "n_items": len(items),
                "cached": datetime.now(timezone.utc).isoformat(timespec="seconds"), "origin": SOURCE}
        write_jsonl(items_file, items)
        write_json(info_file, info)
        return items, info
    if not items_file.exists() or not info_file.exists():
        raise FileNotFoundError(f"no cached Mu-SHROOM {split} split in {items_file.parent}: pass --data with the "
                                f"English files of {SOURCE} (a checkout, its splits/ folder, or the files)")
    info = json.loads(info_file.read_text())
    items = read_records(items_file, MushroomItem)
    if len(items) != info.get("n_items"):
        raise ValueError(f"{items_file}: {len(items)} items, its source record says {info.get('n_items')}; "
                         "pass --data again")
    return items, info
