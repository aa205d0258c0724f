"""Ship a finished pipeline run's probe inside the package: spanuq/probes/<backbone>/.

    python scripts/ship_probe.py --run data                                   # the default run's data dir
    python scripts/ship_probe.py --run data --preset cpu-full \\
        --bench data/smollm2-135m/bench/mushroom-test.json                    # with the Mu-SHROOM result

Copies the run's probe checkpoint (model.safetensors + config.json, as the train stage saved it)
and writes, beside it:

* ``card.json``: data and split sizes, the teacher's settings, the probe's metrics over every
  labelled test span (intervals, negatives), the baselines stage's rows on the same spans,
  the calibration, the Mu-SHROOM figures (``--bench``), date, commit and the sha256 of the weights;
* ``MODEL_CARD.md``: card.json rendered with the report's tables;
* ``test_split.jsonl``: the run's labelled test answers (prompt, chat prompt, answer, token ids,
  spans with u*): tests/test_shipped_probe.py re-extracts their states with the backbone and
  checks the card's metrics against a re-evaluation.

The run's config is read as the stages read it (``-p/--preset/-o``, as `spanuq <stage>`); it
must be the config the run was made with (the script checks the data paths agree).  When the
teacher changes, re-run the pipeline and this script: the folder is replaced as a whole.

    python scripts/ship_probe.py --recalibrated DIR --bench … --planted …     # same weights, new calibration

``--recalibrated``: the shipped weights after `spanuq recalibrate` refitted their given-answer
calibration; only config.json and the card's calibration, planted and Mu-SHROOM entries change.

    python scripts/ship_probe.py --reader data/smollm2-135m/reader --real-bench data/smollm2-135m/bench/real.json

``--reader``: the with-sources reader a `train-reader` run wrote (`spanuq.train.reader`), shipped beside the probe
(``reader/``) with its dev figures and, with ``--real-bench``, what `spanuq bench real` read of the shipped probe
with it; nothing of the probe changes.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path

def test_rows(paths) -> list[dict]:
    """The labelled test answers the evaluate stage scores (`load_examples`: status ok, split test),
    with the chat prompt and token ids their states were extracted from."""
    from spanuq.pipeline.files import read_records
    from spanuq.pipeline.records import Generation, LabeledResponse

    gens = {g.prompt_id: g for g in read_records(paths.generations, Generation)}
    rows = []
    for rec in read_records(paths.labels, LabeledResponse):
        if rec.split != "test" or rec.status != "ok":
            continue
        g = gens[rec.prompt_id]
        if len(g.greedy.token_ids) != rec.n_tokens:
            raise ValueError(f"{rec.prompt_id}: labels have {rec.n_tokens} tokens, the generation "
                             f"{len(g.greedy.token_ids)}")
        rows.append({"prompt_id": rec.prompt_id, "domain": rec.domain, "prompt": g.prompt_text,
                     "chat_prompt": g.chat_prompt, "response": rec.response, "token_ids": g.greedy.token_ids,
                     "spans": [s.model_dump(mode="json") for s in rec.spans], "u_seq": rec.u_seq,
                     "unplaced": rec.unplaced})
    return rows


def check_config(cfg, paths) -> dict:
    """The run's decoding, as its generations recorded it; a config that disagrees with the run
    (not the -p/--preset/-o it was made with) stops the script, so the card cannot misstate the teacher."""
    from spanuq.pipeline.files import iter_jsonl, read_records
    from spanuq.pipeline.records import Prompt

    decoding = next(iter_jsonl(paths.generations))["decoding"]
    n_prompts = sum(1 for p in read_records(paths.prompts, Prompt) if not p.train_only)
    said = {"n_samples": cfg.generate.n_samples, "temperature": cfg.generate.temperature, "top_p": cfg.generate.top_p,
            "max_new_tokens": cfg.generate.max_new_tokens}
    wrong = {k: (v, decoding.get(k)) for k, v in said.items() if decoding.get(k) != v}
    if n_prompts != cfg.prompts.n_prompts:
        wrong["prompts.n_prompts"] = (cfg.prompts.n_prompts, n_prompts)
    if wrong:
        raise SystemExit("ship_probe: the config is not the run's (config, run): "
                         + ", ".join(f"{k} {a} vs {b}" for k, (a, b) in wrong.items())
                         + "; pass the -p/--preset/-o the run was made with")
    return decoding


def split_sizes(paths) -> dict:
    """Labelled answers and spans per split (what train / dev / test rest on)."""
    from spanuq.pipeline.files import read_records
    from spanuq.pipeline.records import LabeledResponse

    out: dict[str, dict] = {}
    for rec in read_records(paths.labels, LabeledResponse):
        d = out.setdefault(rec.split, {"answers": 0, "labelled_answers": 0, "spans": 0})
        d["answers"] += 1
        if rec.status == "ok":
            d["labelled_answers"] += 1
            d["spans"] += len(rec.spans)
    return out


def added_to_train(paths) -> dict:
    """Prompts from ``prompts.add_train`` files (other systems' answers), per file."""
    from collections import Counter

    from spanuq.pipeline.files import read_records
    from spanuq.pipeline.records import Prompt

    return dict(Counter(p.meta.get("added_from") for p in read_records(paths.prompts, Prompt) if p.train_only))


def headline(row: dict) -> dict:
    """The card's summary figures of a metrics row (values; intervals stay in the full rows)."""
    from spanuq.metrics.uq import metric_value

    span = row.get("span") or {}
    return {"auroc": metric_value(span, "auroc"), "auroc_ci": (span.get("auroc") or {}).get("ci"),
            "pair_accuracy": metric_value(span, "pair_accuracy"), "ece": metric_value(span, "ece"),
            "ece_cal": metric_value(span, "ece_cal"), "mae": metric_value(span, "mae"),
            "detection_f1": metric_value(row, "detection", "f1"), "n_spans": span.get("n"),
            "n_positive": span.get("n_pos"),
            "negatives": None if span.get("n") is None else int(span["n"]) - int(span.get("n_pos") or 0)}


def build_card(cfg, paths, probe_dir: Path, bench: dict | None, n_test: int, planted: dict | None = None) -> dict:
    from spanuq.bench.run import commit
    from spanuq.pipeline.files import read_json, sha256_file

    metrics = read_json(paths.metrics)
    base_file = paths.root / "baselines" / "metrics.json"
    baselines = read_json(base_file) if base_file.exists() else None
    label_report = read_json(paths.label_report) if paths.label_report.exists() else None
    train_report = read_json(paths.train_report) if paths.train_report.exists() else None
    ckpt = read_json(probe_dir / "config.json")
    if n_test != metrics.get("n_responses"):
        raise ValueError(f"the run's labels have {n_test} labelled test answers but metrics.json scored "
                         f"{metrics.get('n_responses')}: re-run `spanuq evaluate` on this run first")
    return {
        "card_version": 1,
        "backbone": cfg.backbone.name,
        "layers": ckpt["extra"].get("layers"),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": commit(),  # of the code that shipped it (the run's own commit is in its MLflow runs)
        "preset": cfg.preset,
        "weights": {"file": "model.safetensors", "sha256": sha256_file(probe_dir / "model.safetensors"),
                    "bytes": (probe_dir / "model.safetensors").stat().st_size,
                    "n_parameters": (metrics.get("probe") or {}).get("n_parameters")},
        "calibration": ckpt["calibration"],
        "data": {"prompts": cfg.prompts.model_dump(mode="json"), "splits": split_sizes(paths),
                 "added_to_train": added_to_train(paths),
                 "test_split_file": "test_split.jsonl"},
        "teacher": {"generate": cfg.generate.model_dump(mode="json", exclude={"api_key_env", "server_url"}),
                    "decoding_recorded": check_config(cfg, paths),
                    "label": cfg.label.model_dump(mode="json"),
                    "label_report": label_report},
        "probe": cfg.probe.model_dump(mode="json"),
        "extract": cfg.extract.model_dump(mode="json"),
        "train": {"config": cfg.train.model_dump(mode="json"), "report": train_report},
        "evaluate": cfg.evaluate.model_dump(mode="json"),
        "metrics": {"split": metrics.get("split"), "n_responses": metrics.get("n_responses"),
                    "n_spans": metrics.get("n_spans"), "headline": headline(metrics["spanuq"]),
                    "spanuq": metrics["spanuq"]},
        "baselines": None if baselines is None else {
            "same_spans": True, "label_method": baselines.get("label_method"), "n_samples": baselines.get("n_samples"),
            "nli": baselines.get("nli"),
            "headline": {k: headline(v) for k, v in baselines.get("methods", {}).items() if "span" in v},
            "methods": baselines.get("methods", {}), "detectors": baselines.get("detectors", {})},
        "planted": planted_entry(planted),
        "mushroom": mushroom_entry(bench),
    }


def planted_entry(planted: dict | None) -> dict | None:
    """The card's planted-pair figures (`spanuq bench planted` record)."""
    return None if planted is None else {
        "probe_sha256": planted["probe"]["sha256"], "calibration_sha256": planted["probe"].get("calibration_sha256"),
        "sources": planted["sources"], "facts": planted["facts"], "summary": planted["summary"],
        "refine": planted.get("refine")}


def mushroom_entry(bench: dict | None) -> dict | None:
    """The card's Mu-SHROOM figures (`spanuq bench mushroom --split test` record)."""
    return None if bench is None else {
        "split": bench["split"], "n_items": bench["n_items"], "n_skipped": bench["n_skipped"],
        "test_read": bench.get("test_read"), "date": bench.get("date"), "probe_sha256": bench["probe"]["sha256"],
        "calibration_sha256": bench["probe"].get("calibration_sha256"),
        "rows": [{"key": r["key"], "name": r["name"], "iou": r["iou"], "cor": r["cor"],
                  "settings": r["settings"]} for r in bench["rows"]],
        "anchors": bench.get("anchors"), "record": bench}


def read_benches(args, probe: Path, same_as: Path | None = None) -> tuple[dict | None, dict | None]:
    """The Mu-SHROOM test record (``--bench``) and the planted-pair record (``--planted``), each
    checked to have scored this probe: its weights and its calibration (a recalibrated probe
    scores differently with the same weights). ``same_as``: a folder whose weights file holds the
    same tensors in other bytes (the shipped package's), whose sha256 counts as this probe's too."""
    from spanuq.model.checkpoint import calibration_sha256
    from spanuq.pipeline.files import read_json, sha256_file

    cal = calibration_sha256(probe)
    weights = {sha256_file(d / "model.safetensors") for d in (probe, same_as) if d is not None}
    records = []
    for path, what in ((args.bench, "Mu-SHROOM"), (args.planted, "planted")):
        rec = read_json(path) if path else None
        if rec is not None:
            if rec["probe"]["sha256"] not in weights:
                raise SystemExit(f"ship_probe: {path} scored another probe (sha256 {rec['probe']['sha256'][:12]})")
            if rec["probe"].get("calibration_sha256") != cal:
                raise SystemExit(f"ship_probe: {path} scored these weights with another calibration: "
                                 f"re-run `spanuq bench {'mushroom' if what == 'Mu-SHROOM' else 'planted'}`")
            if what == "Mu-SHROOM" and rec.get("split") != "test":
                raise SystemExit(f"ship_probe: {path} is the {rec.get('split')} split; the card shows the test "
                                 "split (`spanuq bench mushroom --split test`, settings chosen on val)")
        records.append(rec)
    return records[0], records[1]


def ship_recalibrated(args, out: Path) -> int:
    """``--recalibrated DIR``: the shipped weights with a calibration `spanuq recalibrate` refitted.
    The weights and the own-answer calibration must be the shipped ones, so the test split and its
    metrics stay; config.json and the card's calibration, planted and Mu-SHROOM entries are replaced."""
    from spanuq.pipeline.files import atomic_write_text, read_json, sha256_file, write_json
    from spanuq.score.shipped import CARD

    from spanuq.bench.run import commit

    from spanuq.model.checkpoint import same_weights

    new = Path(args.recalibrated)
    card = read_json(out / CARD)
    if (sha256_file(new / "model.safetensors") != card["weights"]["sha256"]
            and not same_weights(new / "model.safetensors", out / "model.safetensors")):
        raise SystemExit(f"ship_probe: {new} holds other weights than the shipped probe: ship a trained run with --run")
    from spanuq.model.calibration import Calibration

    cal = read_json(new / "config.json")["calibration"]

    def own(c: dict) -> dict:  # the own-answer part, defaults filled in (older files leave them out)
        return {k: v for k, v in Calibration.from_dict({k: v for k, v in c.items() if k not in ("given", "grounded")}
                                                       ).as_dict().items() if k not in ("given", "grounded")}

    if own(cal) != own(card["calibration"]):
        raise SystemExit("ship_probe: the own-answer calibration differs from the shipped one; its test metrics would "
                         "no longer hold: ship the run with --run")
    without_sources = {k: v for k, v in cal.items() if k != "grounded"}
    only_grounded = without_sources == {k: v for k, v in card["calibration"].items() if k != "grounded"}
    now = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "commit": commit()}
    if only_grounded:  # only the with-sources mapping changed: every figure read without sources still holds
        fitted, own = new / "grounded_calibration.json", new / "grounded_generated.json"
        card["grounded"] = {**now, "calibration": cal.get("grounded"),
                            "fit": read_json(fitted) if fitted.exists() else None,
                            "generated_fit": read_json(own) if own.exists() else None,
                            "bench": read_json(args.grounded_bench)["summary"] if args.grounded_bench else None}
    else:
        bench, planted = read_benches(args, new, same_as=out)  # the tensors are the same (checked above)
        if mapping(cal) != mapping(card["calibration"]):  # refitted (not only which spans of a given answer show)
            card["recalibrated"] = {**now, "given": (read_json(new / "recalibration.json")
                                                     if (new / "recalibration.json").exists() else {}).get("given")}
        card["planted"] = planted_entry(planted) if planted else card.get("planted")
        # which spans of a given answer are shown, and where that was chosen (`spanuq.bench.mushroom_given`)
        chosen = (read_json(new / "config.json").get("extra") or {}).get("given_validity")
        carried = (cal.get("given") or {}).get("validity_threshold")
        card["given_validity"] = chosen if chosen and carried == chosen["validity_threshold"] else None
        card["mushroom"] = mushroom_entry(bench) if bench else None  # the old figures were another calibration's
    card["calibration"] = cal
    shutil.copy2(new / "config.json", out / "config.json")
    write_json(out / CARD, card)
    atomic_write_text(out / "MODEL_CARD.md", render(card))
    for f in out.iterdir():
        f.chmod(0o644)
    print(f"ship_probe: {out}: recalibrated (given answers: {cal.get('given')})", file=sys.stderr)
    return 0


def ship_reader(args, out: Path) -> int:
    """``--reader DIR``: the with-sources reader beside the shipped probe (``out/reader``), and the card's entry."""
    from spanuq.bench.run import commit
    from spanuq.pipeline.files import atomic_write_text, read_json, sha256_file, write_json
    from spanuq.score.shipped import CARD

    src = Path(args.reader)
    card = read_json(out / CARD)
    dst = out / "reader"
    dst.mkdir(exist_ok=True)
    for name in ("model.safetensors", "config.json"):
        shutil.copy2(src / name, dst / name)
        (dst / name).chmod(0o644)
    config = read_json(src / "config.json")
    report = read_json(src / "report.json") if (src / "report.json").exists() else {}
    card["reader"] = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "commit": commit(),
                      "sha256": sha256_file(dst / "model.safetensors"), "features": config["features"],
                      "encoder": config["encoder"], "sets": config["extra"].get("sets"),
                      "calibration": config["extra"].get("calibration"), "dev": report.get("dev"),
                      "given_fit": report.get("given"), "generated_fit": report.get("generated"),
                      "bench": read_json(args.real_bench) if args.real_bench else None}
    write_json(out / CARD, card)
    atomic_write_text(out / "MODEL_CARD.md", render(card))
    for f in (out / CARD, out / "MODEL_CARD.md"):
        f.chmod(0o644)  # package data: readable by whoever installs it
    print(f"ship_probe: {dst}: the with-sources reader (sha256 {card['reader']['sha256'][:12]})", file=sys.stderr)
    return 0


def reader_lines(r: dict) -> list[str]:
    """The card's with-sources section."""
    from spanuq.bench.real_run import markdown as real_markdown

    cal = r.get("calibration") or {}
    lines = ["## With sources: the reader", "",
             f"Answers scored with `context` are read by the reader in `reader/` (sha256 `{r['sha256']}`, encoder "
             f"`{r['encoder']}`, {len(r['features'])} features per word; trained {r['date']} at `{r['commit']}` on "
             f"{r['sets']}; docs/grounded.md)."]
    for source in ("given", "generated"):
        if cal.get(source):
            lines.append(f"- {source_line(source, cal[source])}" + (
                f"; the answer's score a logistic regression over {', '.join(cal[source].get('seq_columns', []))} "
                f"(spanuq/reader/answer.py) fitted on the backbone's own answers to train questions, Platt-scaled on "
                f"dev (1/T {1 / cal[source]['seq_temperature']:.3f}, b {cal[source]['seq_bias']:.3f})"
                if "seq_temperature" in cal[source] else "") + ".")
    if r.get("dev"):
        lines.append(f"- Dev: {json.dumps(r['dev'])}.")
    if r.get("bench"):
        lines += ["", real_markdown(r["bench"]).split("\n", 2)[2]]
    return lines + [""]


def mapping(c: dict) -> dict:
    """A calibration without the given-answer validity threshold (`spanuq recalibrate --mushroom-val` sets it
    alone: the given mapping's fit, which the card's ``recalibrated`` entry records, is the same)."""
    given = {k: v for k, v in (c.get("given") or {}).items() if k != "validity_threshold"}
    return {**c, "given": given or None}


def source_line(name: str, c: dict) -> str:
    """One source's mapping and flag threshold, as the card states it."""
    span = (f" + {c.get('surprisal', 0.0):.3f}·S − {c.get('context', 0.0):.3f}·H₀ (the span's surprisal S, the "
            "entropy H₀ where it begins)") if c.get("surprisal") or c.get("context") else ""
    b = c.get("bias", 0.0)
    return (f"{name}: û = σ(logit(raw)/{c.get('temperature', 1.0):.3f} {'−' if b < 0 else '+'} {abs(b):.3f}{span}), shown as likely "
            f"wrong from {c.get('flag', 0.5):.3f}, refine margin {c.get('margin', 0.0):.3f}"
            + (f", subject unknown above entropy {c['unknown_entropy']:.3f}" if c.get("unknown_entropy") else "")
            + (", each name, date and number a span of its own" if c.get("fact_spans") else "")
            + (f", spans shown from validity {c['validity_threshold']:g}" if "validity_threshold" in c else ""))


def render(card: dict) -> str:
    """MODEL_CARD.md: the card's facts and the report's tables over the shipped run's test spans."""
    from spanuq.report.mushroom import mushroom_table
    from spanuq.report.render import table_markdown
    from spanuq.report.tables import detection_table, method_rows, sequence_table, span_table

    m, c, w = card["metrics"], card["calibration"], card["weights"]
    sp = card["data"]["splits"]
    g, lab = card["teacher"]["generate"], card["teacher"]["label"]
    evaluation = {"spanuq": m["spanuq"]}
    baselines = {"methods": (card["baselines"] or {}).get("methods", {}),
                 "detectors": (card["baselines"] or {}).get("detectors", {})}
    rows = method_rows(evaluation, baselines)
    split_line = "; ".join(f"{k} {v['labelled_answers']} labelled answers ({v['spans']} spans) of {v['answers']}"
                           for k, v in sorted(sp.items()))
    lines = [
        f"# SpanUQ probe for {card['backbone']} (shipped)", "",
        f"- Date {card['date']}, commit `{card['commit']}`, preset `{card['preset']}`; fused layers {card['layers']}.",
        f"- Weights `model.safetensors`: {w['bytes']:,} bytes, {w['n_parameters']:,} parameters, "
        f"sha256 `{w['sha256']}`.",
        f"- Data: {card['data']['prompts']['n_prompts']} {card['data']['prompts']['source']} prompts; {split_line}.",
        f"- Teacher: {lab['method']} labels from S = {g['n_samples']} samples at T = {g['temperature']} "
        f"(top-p {g['top_p']}, {g['sample_max_new_tokens']} new tokens), alignment {lab['alignment']}"
        + (f", the backbone's probability of each claim counted as {lab['likelihood_votes']:g} more votes"
           if lab.get("likelihood_votes") else "") + ".",
        f"- Calibration (fitted on dev): validity threshold {c['validity_threshold']:.3f}, duplicate IoU "
        f"{c['dup_iou']}; {source_line('the backbone’s own answers', {k: v for k, v in c.items() if k != 'validity_threshold'})}"
        + (f"; {source_line('given answers', c['given'])}" if c.get("given") else "; given answers: as its own")
        + (f"; given answers read with their sources (`context`): {source_line('', c['grounded']['given'])[2:]}, "
           "S and H₀ read after the sources (docs/grounded.md)" if (c.get("grounded") or {}).get("given") else "")
        + (f"; its own answers read with their sources: {source_line('', c['grounded']['generated'])[2:]} "
           "(docs/context.md)" if (c.get("grounded") or {}).get("generated") else "")
        + ".",
        f"- Test split: {m['n_responses']} answers, {m['n_spans']} labelled spans; every figure below is over every "
        "labelled test span of that run, the baselines on the same spans in the same run "
        "(`test_split.jsonl` holds the answers; tests/test_shipped_probe.py re-evaluates them).", "",
        table_markdown(span_table(rows)), table_markdown(sequence_table(rows)),
        table_markdown(detection_table(evaluation, baselines)),
    ]
    if card.get("planted"):
        from spanuq.bench.planted_run import markdown as planted_markdown

        lines.append("Planted-error pairs (`spanuq bench planted`: the same answer with one fact right and with it "
                     "swapped to a wrong value of the same kind; prompts no probe trains on):\n")
        lines.append(planted_markdown({"probe": {"source": "this probe"}, **card["planted"]}).split("\n", 2)[2])
    if card.get("given_validity"):
        gv = card["given_validity"]
        lines.append(f"Given answers show their spans from validity {gv['validity_threshold']:g}, chosen on "
                     f"{gv['chosen_on']} ({gv['n_items']} answers, `{gv['file']}`, sha256 {gv['sha256'][:12]}…) "
                     f"through the product's own output ({gv['rule']}; `spanuq recalibrate --mushroom-val`):\n")
        lines.append("| validity ≥ | IoU | Cor | spans | share at/above the red line |\n|---|---|---|---|---|\n" + "\n".join(
            f"| {r['validity_threshold']:g} | {r['iou']:.3f} | {r['cor']:.3f} | {r['spans']} | {r['share_flagged']:.2f} |"
            for r in gv["grid"]) + "\n")
    if card["mushroom"]:
        rec = card["mushroom"]["record"]
        lines.append(table_markdown(mushroom_table(rec)))
        lines.append(f"Test split read on {rec.get('date', '?')} at commit `{rec.get('commit', '?')}` "
                     "(the code that made the spans: later post-processing changes are not in these figures; "
                     "docs/results.md says what each changed on validation).\n")
    else:
        lines.append("Mu-SHROOM: not measured for this probe (`spanuq bench mushroom`, docs/mushroom.md).\n")
    if card.get("reader"):
        lines += reader_lines(card["reader"])
    lines.append("Re-ship after re-training (e.g. when the teacher changes): "
                 "`python scripts/ship_probe.py --run <data dir> [--bench <mushroom-test.json>]`.\n")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from spanuq.config import load_config
    from spanuq.pipeline.files import atomic_write_text, read_json, write_json, write_jsonl
    from spanuq.pipeline.paths import StagePaths
    from spanuq.score.shipped import CARD, PROBES, TEST_SPLIT

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", default=None, help="the data dir of a finished pipeline run (its paths.data)")
    ap.add_argument("--grounded-bench", default=None, metavar="JSON",
                    help="with --recalibrated, when only the with-sources calibration changed: the `spanuq bench "
                         "grounded` record of the recalibrated probe, summarised in the card")
    ap.add_argument("--recalibrated", default=None, metavar="PROBE_DIR",
                    help="the shipped weights with a calibration `spanuq recalibrate` refitted: replaces the shipped "
                         "config.json and the card's calibration, planted and Mu-SHROOM entries (no --run)")
    ap.add_argument("--bench", default=None, help="`spanuq bench mushroom --split test` result JSON of this probe")
    ap.add_argument("--planted", default=None, help="`spanuq bench planted` result JSON of this probe")
    ap.add_argument("--reader", default=None, metavar="READER_DIR",
                    help="a train-reader run's reader, shipped beside the probe (reader/) with its card entry (no --run)")
    ap.add_argument("--real-bench", default=None, metavar="JSON", help="with --reader: `spanuq bench real` of the "
                                                                      "shipped probe with that reader")
    ap.add_argument("-p", "--params", default="params.yaml")
    ap.add_argument("--preset", default=None)
    ap.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--out", default=str(PROBES), help="where the probe folders go (default: spanuq/probes)")
    args = ap.parse_args(argv)
    if args.reader:
        return ship_reader(args, Path(args.out) / load_config(args.params if Path(args.params).exists() else None,
                                                              args.override, args.preset).backbone.name)
    if args.recalibrated:
        return ship_recalibrated(args, Path(args.out) / load_config(args.params if Path(args.params).exists() else None,
                                                                    args.override, args.preset).backbone.name)
    if not args.run:
        ap.error("--run is required (or --recalibrated)")

    cfg = load_config(args.params if Path(args.params).exists() else None,
                      [*args.override, f"paths.data={args.run}"], args.preset)
    paths = StagePaths.from_config(cfg)
    probe = paths.probe
    for need in (probe / "config.json", probe / "model.safetensors", paths.metrics, paths.labels, paths.generations):
        if not need.exists():
            raise SystemExit(f"ship_probe: {need} is missing: finish the run (train, evaluate) first")
    backbone = (read_json(probe / "config.json").get("extra") or {}).get("backbone") or cfg.backbone.name
    if backbone != cfg.backbone.name:
        raise SystemExit(f"ship_probe: the probe reads {backbone}, the config names {cfg.backbone.name}")
    bench, planted = read_benches(args, probe)
    rows = test_rows(paths)
    card = build_card(cfg, paths, probe, bench, len(rows), planted)
    out = Path(args.out) / backbone
    tmp = out.with_name(out.name + ".new")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in ("model.safetensors", "config.json"):
        shutil.copy2(probe / name, tmp / name)
    write_jsonl(tmp / TEST_SPLIT, rows)
    write_json(tmp / CARD, card)
    atomic_write_text(tmp / "MODEL_CARD.md", render(card))
    for f in tmp.iterdir():
        f.chmod(0o644)  # package data: readable by whoever installs it (the run's files may be 0600)
    shutil.rmtree(out, ignore_errors=True)  # the folder is replaced as a whole
    tmp.rename(out)
    if (paths.reader / "model.safetensors").exists():  # the run's with-sources reader ships beside its probe
        ship_reader(argparse.Namespace(reader=paths.reader, real_bench=None), out)
    h = card["metrics"]["headline"]
    print(f"ship_probe: {out}: sha256 {card['weights']['sha256'][:12]}, test AUROC {h['auroc']} over "
          f"{h['n_spans']} spans ({h['negatives']} negatives), {len(rows)} test answers stored", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
