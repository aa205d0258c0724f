"""`spanuq bench mushroom`: a probe scored on the English Mu-SHROOM split through the public
API, beside every control, with the task's IoU and Cor.

The headline row is **the product's own output** (``product``): each answer scored as a user
scores it, ``SpanUQ.score(question, response=answer)`` with the probe's own settings (its given-answer
calibration: mapping, red line, fact spans, and the validity threshold of given answers that
`spanuq.bench.mushroom_given` chose on the validation split and the probe carries), a character's
soft score the largest û of the shown spans over it, its hard label û at or above the result's own
red line (``flag_threshold``).  The bench chooses nothing for it: what validation chose is the
probe's, for every user.  The ``spanuq`` row below it reads the same probe with a character
mapping, a validity cut and a threshold chosen on validation that the product does not apply:
a labelled second row.

    run_mushroom(cfg, "val", probe="path/to/probe", data=["path/to/mu-shroom"])   # chooses settings
    run_mushroom(cfg, "test", probe="path/to/probe")                               # reads them; once per probe

Every method (the probe and each control) is computed in the same run on the same answers.
The probe reads each (question, answer) pair with ``SpanUQ.score_many`` (validity threshold 0:
every non-duplicate span comes back, the validation split chooses which to keep).  An answer
the probe cannot score (an empty one; longer ones are read in windows, `spanuq.score.windows`)
is skipped by the model-based methods (they mark nothing there), counted and listed; the
metric still covers every answer of the split.

Writes ``data/<backbone>/bench/mushroom-<split>.{json,md}`` and the predictions of every
method in the task's submission format (``mushroom-<split>-predictions/<method>.jsonl``),
which the task's own ``scorer.py`` can read.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import yaml

from ..config import Config
from ..pipeline.files import read_json, sha256_file, write_json, write_jsonl
from ..report.mushroom import write_markdown
from . import controls, ledger
from .metrics import item_scores, mean_ci
from .mushroom import MushroomItem, load_split
from .mushroom_train import leave_out, questions_of
from .probe_chars import probe_chars, probe_variants, u_seq_chars
from .select import Method, choose, predictions

ANCHORS = Path(__file__).with_name("mushroom_anchors.yaml")
CONTROL = "entities_numbers"  # the control the probe must beat
DELTAS = (CONTROL, "claim_units")  # paired differences against the text-only taggers


def commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).parent).stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def score_items(uq, items: list[MushroomItem], progress: bool) -> tuple[list, list[dict]]:
    """The probe's `ScoreResult` per answer (None where it could not read it: an error, or an
    unverified answer with no span, e.g. an empty one) and the skips.  An unverified answer that
    has spans is scored: the status is the display's decision, the spans are still the probe's."""
    out = uq.score_many([{"prompt": x.model_input, "response": x.model_output_text} for x in items],
                        progress=progress, return_errors=True)

    def unread(r) -> str | None:
        if isinstance(r, Exception):
            return str(r)
        if r.status == "unverified" and not r.spans:
            return "unverified: " + "; ".join(x.message for x in r.status_reasons)
        return None

    reasons = [unread(r) for r in out]
    skipped = [{"id": x.id, "reason": why} for x, why in zip(items, reasons) if why is not None]
    return [None if why is not None else r for r, why in zip(out, reasons)], skipped


def product_method(shown: list, lens: list[int]) -> Method:
    """The product's own output (module docstring): û of the spans `SpanUQ.score` returns, hard at its red
    line; an answer it could not score (None) marks nothing."""
    flags = {r.flag_threshold for r in shown if r is not None}
    if len(flags) > 1:
        raise ValueError(f"the answers were scored with {len(flags)} red lines; one source, one line expected")
    flag = flags.pop() if flags else 0.5
    cuts = sorted({r.validity_threshold for r in shown if r is not None})
    chars = [probe_chars(r, n, "u", 0.0) for r, n in zip(shown, lens)]
    return Method("product", "SpanUQ as a user gets it (headline)",
                  f"SpanUQ.score's spans and û as returned (the probe's own settings: spans of validity ≥ "
                  f"{'/'.join(f'{c:g}' for c in cuts) or '–'}), hard at its red line û ≥ {flag:.2f}",
                  {"as returned": chars}, thresholds=(float(np.nextafter(flag, 0.0)),), kind="probe")


def build_methods(uq, items: list[MushroomItem], results: list, cfg: Config, seed: int,
                  progress: bool, shown: list | None = None) -> list[Method]:
    """The product's output (``shown``: `SpanUQ.score`'s results with the probe's own settings), the probe
    read with settings chosen on validation, and every control, on the same answers."""
    from ..label.units import load_spacy
    from ..llm.loading import chat_prompt

    texts = [x.model_output_text for x in items]
    lens = [len(t) for t in texts]
    stored = uq.fitted.validity_threshold
    chats = [None if r is None else chat_prompt(uq.tok, x.model_input, uq.system_prompt)
             for x, r in zip(items, results)]
    ent = [np.zeros(n) if v is None else v for v, n in zip(
        controls.token_entropy_chars(uq.model, uq.tok, chats, texts, progress=progress), lens)]
    nlp = load_spacy(cfg.label.spacy_model)
    fixed = (0.5,)
    product = [] if shown is None else [product_method(shown, lens)]
    return product + [
        Method("spanuq", "SpanUQ probe, settings chosen on val", "the probe's spans read with a character mapping, "
               "validity cut and threshold chosen on validation (not what the product returns)",
               probe_variants(results, texts, stored), kind="probe"),
        Method("spans_only", "SpanUQ spans, û ignored", "the probe's spans marked 1 (validity cut chosen on val)",
               probe_variants(results, texts, stored, mappings=("const",)), thresholds=fixed, kind="ablation"),
        Method("u_seq", "û_seq on every character", "the probe's answer-level score, no spans",
               {"u_seq": u_seq_chars(results, lens)}),
        Method("token_entropy", "Token entropy (backbone)", "SmolLM2's next-token entropy / log|V|, teacher-forced",
               {"token": ent, "word_max": [controls.word_max(t, v) for t, v in zip(texts, ent)]}),
        Method(CONTROL, "Named entities + numbers", "spaCy entities and regex numbers marked, text only",
               {"binary": controls.entities_numbers(nlp, texts)}, thresholds=fixed),
        Method("claim_units", "Teacher's claim anchors", "the offline labeller's spans (entities, numbers, a noun "
               "chunk per clause) marked, text only",
               {"binary": controls.claim_units(nlp, texts, cfg.label.min_span_chars, cfg.label.max_spans)},
               thresholds=fixed),
        Method("random", "Random words (seeded)", f"a uniform random score per word, seed {seed}",
               {"word": controls.random_words(texts, [x.id for x in items], seed)}),
        Method("mark_all", "Mark everything", "every character marked with probability 1",
               {"all": controls.mark_all(texts)}, thresholds=fixed),
    ]


def evaluate_methods(methods: list[Method], settings: dict, refs: list[dict], bootstrap: int, seed: int
                     ) -> tuple[list[dict], dict[str, list[dict]]]:
    """One row per method (IoU, Cor with bootstrap intervals; Δ against the two text-only
    taggers, paired over the same resamples) and each method's predictions."""
    preds, per_item = {}, {}
    for m in methods:
        preds[m.key] = predictions(m, settings[m.key])
        per_item[m.key] = item_scores(refs, preds[m.key])
    rows = []
    for m in methods:
        i, c = per_item[m.key]
        row = {"key": m.key, "name": m.name, "kind": m.kind, "what": m.what,
               "iou": mean_ci(i, bootstrap, seed), "cor": mean_ci(c, bootstrap, seed), "settings": settings[m.key]}
        for base in DELTAS:
            if base in per_item and m.key != base:
                bi, bc = per_item[base]
                row["delta_vs_" + base] = {"iou": mean_ci(i - bi, bootstrap, seed),
                                           "cor": mean_ci(c - bc, bootstrap, seed)}
        rows.append(row)
    return rows, preds


def run_mushroom(cfg: Config, split: str, probe: str | None = None, data: list[str] | None = None,
                 force: bool = False, seed: int = 0, bootstrap: int = 1000, progress: bool = True,
                 exclude_questions: str | Path | None = None) -> Path:
    """Score the split, write the table; returns the JSON file.  ``exclude_questions``: a prompt
    file the probe trained on; answers to its questions are left out (and counted)."""
    from .. import SpanUQ
    from ..model.checkpoint import calibration_sha256, load_checkpoint
    from ..score.scorer import resolve_checkpoint

    if split not in ("val", "test"):
        raise ValueError(f"--split must be val or test, not {split!r}")
    ckpt = resolve_checkpoint(probe, cfg)  # a folder, an MLflow URI or data/<backbone>/probe
    weights_sha, cal_sha = sha256_file(ckpt / "model.safetensors"), calibration_sha256(ckpt)
    probe_sha = f"{weights_sha}-{cal_sha[:12]}"  # the ledger's key: these weights with this calibration
    backbone = (read_json(ckpt / "config.json").get("extra") or {}).get("backbone") or cfg.backbone.name
    bench_dir = Path(cfg.paths.data) / backbone / "bench"
    if split == "test":  # before any model is loaded: a refused read costs nothing
        chosen = ledger.read_settings(bench_dir, probe_sha)
        read_no = ledger.check_test_read(bench_dir, probe_sha, force)
    items, info = load_split(split, cfg.paths.cache, data)
    excluded = 0
    if exclude_questions is not None:
        kept = leave_out(items, questions_of(exclude_questions))
        excluded, items = len(items) - len(kept), kept
        info = {**info, "excluded_questions_of": str(exclude_questions), "n_excluded": excluded}
        if not items:
            raise ValueError(f"every {split} answer asks a question of {exclude_questions}: nothing left to score")
    with SpanUQ.load(ckpt, cfg=cfg, threshold=0.0) as uq:
        refs = [x.reference() for x in items]
        results, skipped = score_items(uq, items, progress)
        # the product: the same backbone and probe with the probe's own settings (its validity threshold)
        product = SpanUQ(load_checkpoint(ckpt), uq.cfg, uq.model, uq.tok, uq.checkpoint, None, uq.settings)
        shown, _ = score_items(product, items, progress)
        methods = build_methods(uq, items, results, cfg, seed, progress, shown)
        probe_info = {"path": str(uq.checkpoint), "source": uq.probe_source, "sha256": weights_sha,
                      "calibration_sha256": cal_sha,
                      "backbone": uq.backbone_name,
                      "stored_validity_threshold": uq.fitted.validity_threshold,
                      "dev_auroc": uq.extra.get("dev_auroc")}
    if split == "val":
        settings = {m.key: choose(m, refs) for m in methods}
        settings_file = ledger.write_settings(bench_dir, probe_sha, {
            "probe": probe_info, "split": "val", "data_sha256": info["sha256"], "n_items": len(items),
            "seed": seed, "n_excluded": excluded, "methods": settings})
    else:
        settings = chosen["methods"]
        settings_file = ledger.settings_path(bench_dir, probe_sha)
    rows, preds = evaluate_methods(methods, settings, refs, bootstrap, seed)
    out = bench_dir / f"mushroom-{split}.json"
    pred_dir = bench_dir / f"mushroom-{split}-predictions"
    for key, p in preds.items():
        write_jsonl(pred_dir / f"{key}.jsonl", [{"id": x.id, **q} for x, q in zip(items, p)])
    record = {"benchmark": "Mu-SHROOM English (SemEval-2025 Task 3)", "split": split, "n_items": len(items),
              "n_skipped": len(skipped), "skipped": skipped, "data": info, "probe": probe_info,
              "settings_file": str(settings_file), "settings_chosen_on": "val",
              "test_read": read_no if split == "test" else None, "forced": bool(force and split == "test"),
              "date": ledger.now(), "commit": commit(), "seed": seed,
              "bootstrap": {"resamples": bootstrap, "unit": "answer", "level": 0.95}, "deltas": list(DELTAS),
              "rows": rows, "anchors": yaml.safe_load(ANCHORS.read_text()), "predictions": str(pred_dir)}
    write_json(out, record)
    write_markdown(record, out.with_suffix(".md"))
    if split == "test":
        ledger.record_test_read(bench_dir, probe_sha, {"output": str(out), "forced": bool(force),
                                                       "read": read_no, "n_items": len(items)})
    return out
