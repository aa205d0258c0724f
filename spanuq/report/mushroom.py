"""The Mu-SHROOM table (`spanuq bench mushroom`'s Markdown file and the report's section), read
from ``data/<backbone>/bench/mushroom-<split>.json``; nothing here imports the bench package."""
from __future__ import annotations

import json
from pathlib import Path

from ..pipeline.files import atomic_write_text
from .tables import Table, cell


def _settings(s: dict) -> str:
    hard = s["hard"]
    return f"soft: {s['soft']}; hard: {hard['variant']} > {hard['threshold']:g}"


def mushroom_table(record: dict) -> Table:
    split, n = record["split"], record["n_items"]
    ctrl = (record.get("deltas") or ["entities_numbers"])[0]
    h = ["Method", "IoU", "Cor", "Δ IoU vs entities+numbers", "Δ Cor vs entities+numbers",
         "settings (chosen on val)"]
    body = []
    for r in record["rows"]:
        d = r.get(f"delta_vs_{ctrl}") or {}
        body.append([r["name"], cell(r["iou"]), cell(r["cor"]), cell(d.get("iou")), cell(d.get("cor")),
                     _settings(r["settings"])])
    anchors = record.get("anchors") or {}
    src = anchors.get("source", {})
    for a in anchors.get("anchors", []):
        body.append([f"leaderboard: {a['name']}", f"{a['iou']:.3f}", f"{a['cor']:.3f}", "–", "–",
                     f"{anchors.get('split')} split, {anchors.get('n_items')} answers"])
    probe = record["probe"]
    notes = [f"{n} answers of the English {split} split, every method on the same answers in one run; "
             f"95% bootstrap intervals over answers ({record['bootstrap']['resamples']} resamples; Δ paired).",
             f"Probe {probe['path']} (sha256 {probe['sha256'][:12]}…), scored through SpanUQ.score_many "
             f"(question, answer); {record['n_skipped']} answers could not be scored (empty) "
             "(the model-based rows mark nothing there).",
             f"Data: {record['data']['source']} (sha256 {record['data']['sha256'][:12]}…), from "
             f"{record['data'].get('origin')}.",
             f"Leaderboard rows: {src.get('repository')} {', '.join(src.get('files', []))} "
             f"(commit {str(src.get('commit'))[:7]}, {src.get('date')}), computed on the test split."]
    if record["data"].get("n_excluded"):
        notes.append(f"{record['data']['n_excluded']} answers left out: their questions are in "
                     f"{record['data']['excluded_questions_of']}, which the probe trained on (--exclude-questions).")
    if split == "val":
        notes.append("Validation figures are in-sample: every method's settings were chosen to maximise them.")
    else:
        forced = " (forced re-read)" if record.get("forced") else ""
        notes.append(f"Test read {record.get('test_read')} of this probe{forced}; settings read from "
                     f"{record['settings_file']}, chosen on the validation split.")
    title = f"Mu-SHROOM English {split} split: IoU and Cor against human span labels"
    return Table(title, h, body, notes)


def write_markdown(record: dict, path: Path) -> Path:
    from .render import table_markdown

    atomic_write_text(path, table_markdown(mushroom_table(record)))
    return path


def report_tables(bench_dir: Path) -> list[Table]:
    """The tables of the splits that have a result file (for the report stage)."""
    out = []
    for split in ("test", "val"):
        f = Path(bench_dir) / f"mushroom-{split}.json"
        if f.is_file():
            out.append(mushroom_table(json.loads(f.read_text())))
    return out
