"""The paper's tables from the metrics files: span level (Tab. 1), sequence level (Tab. A-seq),
detection (Tab. 2), cost, per domain and, when ablation runs exist, the ablation table.

Each table is a `Table` of already formatted cells; `render.py` writes it as
Markdown and HTML.  Every method keeps its row: one that could not run shows why.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..metrics.uq import WIDE_CI, is_positive, metric_at, metric_value, negatives, span_metrics, wide_interval
from ..evaluate.table import ABLATION_COLUMNS

# display name, implementation (docs/baselines.md says why)
METHODS: dict[str, tuple[str, str]] = {
    "spanuq": ("SpanUQ (ours)", "spanuq probe, one forward pass"),
    "token_entropy": ("Token entropy", "ours"),
    "mlp_probe": ("MLP probe*", "ours"),
    "surface_prior": ("Surface prior", "ours (the floor: where a span sits, how long, prompt overlap)"),
    "verbalized": ("Verbalized confidence", "ours (backbone, transformers)"),
    "p_true": ("P(True)", "ours (backbone, transformers)"),
    "self_verify": ("FActScore-style self-verification", "ours (backbone, transformers)"),
    "selfcheck_nli": ("SelfCheckGPT-NLI", "ours, = selfcheckgpt 0.1.7 formula (tested)"),
    "semantic_entropy": ("Semantic entropy", "ours, = lm-polygraph 0.7.0 (tested)"),
    "eigenscore": ("INSIDE / EigenScore", "ours, = lm-polygraph 0.7.0 (tested)"),
    "kle": ("KLE", "ours, = lm-polygraph 0.7.0 (tested)"),
}
STAND_IN = "embedding NLI stand-in"


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)


WIDE_MARK = "⚠"
WIDE_NOTE = (f"{WIDE_MARK} the 95% interval is wider than ±{WIDE_CI:g}: too few items (see neg, the negatives "
             "u* < 0.5 / labelled spans each AUROC rests on) to tell apart methods that close.")


def cell(m, digits: int = 3) -> str:
    """``0.812 [0.77, 0.85]``; ``n/a (why)`` for an undefined metric; ``–`` when absent; a
    trailing ⚠ when the 95% interval is wider than ±0.1."""
    if m is None:
        return "–"
    v = metric_value(m)
    if v is None:
        why = m.get("undefined") if isinstance(m, dict) else None
        return f"n/a ({why})" if why else "n/a"
    ci = m.get("ci") if isinstance(m, dict) else None
    text = f"{v:.{digits}f} [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else f"{v:.{digits}f}"
    return text + (f" {WIDE_MARK}" if wide_interval(m) else "")


def with_wide_note(table: "Table") -> "Table":
    """The table, with `WIDE_NOTE` added when a cell carries the mark."""
    if any(c.endswith(f" {WIDE_MARK}") for r in table.rows for c in r) and WIDE_NOTE not in table.notes:
        table.notes.append(WIDE_NOTE)
    return table


def num(x, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def display_name(key: str, row: dict) -> str:
    name = METHODS.get(key, (key, ""))[0]
    impl = row.get("implementation") or ""
    if impl == STAND_IN:
        name += f" ({STAND_IN})"
    elif impl and key == "eigenscore":
        name += f" ({impl})"
    return name


def method_rows(evaluation: dict, baselines: dict) -> dict[str, dict]:
    """SpanUQ (the evaluate stage's row) first, then the baselines stage's rows."""
    rows = {k: v for k, v in evaluation.items() if isinstance(v, dict) and ("span" in v or "unavailable" in v)}
    rows.update(baselines.get("methods", {}))
    if "spanuq" in rows:
        rows = {"spanuq": rows.pop("spanuq"), **rows}
    return rows


def _unavailable(row: dict, n_cols: int) -> list[str]:
    return [f"not run: {row['unavailable']}"] + ["–"] * (n_cols - 1)


def members_note(spanuq: dict) -> list[str]:
    """A line on SpanUQ's members (`train.members`), when it is an ensemble: what each would read alone."""
    alone = spanuq.get("members_alone") or {}
    values = [v for v in alone.get("span_auroc") or [] if v is not None]
    if not values:
        return []
    seeds = alone.get("seeds") or []
    return [f"SpanUQ is {len(values)} probes (training seeds {', '.join(map(str, seeds))}) read as one; each alone "
            f"reads span AUROC {min(values):.3f}–{max(values):.3f} on the same spans (one probe is one draw of these)."]


def span_table(rows: dict[str, dict]) -> Table:
    h = ["Method", "AUROC", "neg", "MAE", "ρ_s", "Pearson", "ECE", "ECE cal", "pair acc", "spans"]
    body = []
    for k, r in rows.items():
        if "span" not in r:
            body.append([display_name(k, r)] + _unavailable(r, len(h) - 1))
            continue
        s = r["span"]
        body.append([display_name(k, r), cell(s.get("auroc")), negatives(s), cell(s.get("mae")), cell(s.get("spearman")),
                     cell(s.get("pearson")), cell(s.get("ece")), cell(s.get("ece_cal")), cell(s.get("pair_accuracy")),
                     num(s.get("n"))])
    return with_wide_note(Table("Span level (Tab. 1): every labelled span of the test split", h, body, [
        "* oracle span boundaries.  Sequence- and claim-level methods broadcast their score to the answer's spans.",
        "SpanUQ's span metrics are those of the evaluate stage (its rule for labelled spans without a kept "
        "prediction is in its metrics.json).", *members_note(rows.get("spanuq") or {})]))


def sequence_table(rows: dict[str, dict]) -> Table:
    h = ["Method", "seq ρ", "seq Pearson", "seq AUROC", "neg", "seq MAE", "answers"]
    body = []
    for k, r in rows.items():
        if "sequence" not in r:
            body.append([display_name(k, r)] + _unavailable(r, len(h) - 1) if "unavailable" in r
                        else [display_name(k, r)] + ["–"] * (len(h) - 1))
            continue
        s = r["sequence"]
        auroc = next((v for kk, v in s.items() if kk.startswith("auroc@")), None)
        body.append([display_name(k, r), cell(s.get("spearman")), cell(s.get("pearson")), cell(auroc),
                     negatives(s), cell(s.get("mae")), num(s.get("n"))])
    return with_wide_note(Table("Sequence level (Tab. A-seq): native sequence scores", h, body,
                                ["Span-level methods: the mean of the answer's span scores; neg: answers with "
                                 "u*_seq under the sequence threshold / answers."]))


def detection_table(evaluation: dict, baselines: dict) -> Table:
    h = ["Detector + scorer", "P", "R", "F1", "coverage", "downstream AUROC", "neg", "spans / answer"]
    body = []
    su = evaluation.get("spanuq") or {}
    if "detection" in su:
        d = su["detection"]
        body.append(["SpanUQ (learned detection)", cell(d.get("precision")), cell(d.get("recall")), cell(d.get("f1")),
                     cell(su.get("coverage")), cell((su.get("span") or {}).get("auroc")), negatives(su.get("span")),
                     "–"])
    for k, r in baselines.get("detectors", {}).items():
        if "unavailable" in r:
            body.append([k] + _unavailable(r, len(h) - 1))
            continue
        d = r["detection"]
        body.append([f"{k} + MLP probe", cell(d.get("precision")), cell(d.get("recall")), cell(d.get("f1")),
                     cell(r.get("coverage")), cell(r["span"].get("auroc")), negatives(r["span"]),
                     num(r.get("spans_per_answer"), 1)])
    iou = (su.get("detection") or {}).get("iou_threshold", 0.3)
    notes = [f"P/R/F1 at IoU ≥ {iou}; coverage = labelled spans matched by a detection.  Downstream AUROC over "
             "every labelled span: the matched detection's score, else the most-overlapping detection's, else the "
             "train mean u*."]
    if baselines.get("label_method", "offline") == "offline":
        notes.append("The offline teacher's spans come from spaCy rules (entities, numbers, noun chunks), so the "
                     "spaCy-based detectors (sentence, spacy_ner) are partly circular here; the comparison that "
                     "counts is under judge labels (label.method = judge).")
    return with_wide_note(Table("Span detection (Tab. 2)", h, body, notes))


def cost_table(rows: dict[str, dict], cost: dict) -> Table:
    """The work each method does per answer: backbone passes, generated tokens, NLI calls.  The
    seconds are the machine's and the run's, so they stay out of the report (see baselines/cost.py)."""
    h = ["Method", "forward passes / answer", "generated tokens / answer", "NLI calls / answer"]
    su = cost.get("spanuq") or {}
    body = [["SpanUQ (ours)", "1 (teacher-forced) + probe", "0", "0"]] if su else []
    for k, r in rows.items():
        c = r.get("cost")
        if k == "spanuq" or c is None:
            continue
        body.append([display_name(k, r), num(c.get("forward_passes_per_answer"), 1),
                     num(c.get("generated_tokens_per_answer"), 1), num(c.get("nli_calls_per_answer"), 1)])
    notes = [f"Counted over {su.get('n_answers', '?')} test answers. A sampling method first decodes its "
             "samples: one forward pass per sampled token. Seconds per answer on the machine that ran the stage, "
             "and the SelfCheckGPT-NLI / SpanUQ ratio, are in its run log (runs/baselines.json), not here: the same "
             "inputs give the same report."]
    return Table("Cost per answer", h, body, notes)


def per_domain_table(scores: dict, positive_threshold: float = 0.5) -> Table:
    """AUROC of every method within each domain of the test split (no bootstrap)."""
    dom = np.asarray(scores.get("domain", []))
    u = np.asarray(scores.get("u", []), dtype=float)
    domains = sorted(set(dom.tolist()))
    neg = {d: int((~is_positive(u[dom == d], positive_threshold)).sum()) for d in domains}
    h = ["Method"] + [f"{d} (n = {int((dom == d).sum())}, neg = {neg[d]})" for d in domains]
    body = []
    groups = ([("methods", {"spanuq": scores["spanuq"]})] if scores.get("spanuq") else []) + [
        (g, scores.get(g, {})) for g in ("methods", "detectors")]
    for group, entries in groups:
        for k, s in entries.items():
            s = np.asarray(s, dtype=float)
            label = display_name(k, {}) if group == "methods" else f"{k} + MLP probe"
            body.append([label] + [cell(span_metrics(u[dom == d], s[dom == d], positive_threshold)["auroc"])
                                   for d in domains])
    return Table("Span AUROC per domain", h, body, ["n: labelled spans of the domain; neg: those with u* < the "
                                                    "positive threshold. No intervals: read small domains as "
                                                    "anecdotes."])


def ablation_table(ablation_dir: Path) -> Table | None:
    """The rows of ``spanuq ablate`` (``ablation/ablation.json``), when it has run: each row's
    switches trained on the same split and scored as the evaluate stage scores."""
    f = Path(ablation_dir) / "ablation.json"
    if not f.is_file():
        return None
    d = json.loads(f.read_text())
    h = ["Variant", *[c for c, _ in ABLATION_COLUMNS], "train s"]
    body = []
    for r in d.get("rows", []):
        cells = [cell(metric_at(r.get("metrics", {}), *path)) for _, path in ABLATION_COLUMNS]
        body.append([r["name"], *cells, num(r.get("train_seconds"), 0)])
    meta = d.get("meta", {})
    first = next((r.get("metrics", {}).get("span") for r in d.get("rows", []) if r.get("metrics")), None)
    neg = negatives(first)
    title = (f"Ablations (Tab. 4 layout; {meta.get('n_train')} train answers, "
             f"{meta.get('n_test_spans')} labelled test spans"
             + (f", negatives / spans {neg}" if neg != "–" else "") + ")") if meta else "Ablations"
    return with_wide_note(Table(title, h, body))
