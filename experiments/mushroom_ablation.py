"""What moves the probe on human labels?  Probes trained differently, compared on the
Mu-SHROOM English **validation** split (the test split is read only by `spanuq bench mushroom`,
once per shipped probe).

    python experiments/mushroom_ablation.py \
        --row "shipped=spanuq/probes/smollm2-135m" \
        --row "+ other systems' answers=runA/probe@foldA.jsonl,runB/probe@foldB.jsonl" \
        [--out data/mushroom_ablation.json]

A row is one probe, or several probes each named with the prompt file it trained on
(``probe@prompts.jsonl``): each validation answer is then scored by the first probe of the row
whose training questions do not include its question (cross-fitting: the task's unlabelled
train split asks the validation split's questions, `spanuq.bench.mushroom_train`).  An answer
no probe of the row may read is an error.

Every row gets the probe row's free settings of `spanuq bench mushroom` (how spans become
character scores, the validity cut, the hard threshold), chosen on these same answers — the
figures are in-sample alike for every row (the same candidates), so rows compare with each
other, not with test figures.  Also printed per row: how much of the human-marked text the
probe's spans cover and the IoU of an oracle that keeps exactly the spans people marked
(the ceiling of choosing among these spans), and the mean IoU/Cor of the entity/number tagger
on the same answers.  Intervals: 95% bootstrap over answers, paired against the first row.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def parse_row(spec: str) -> tuple[str, list[tuple[str, str | None]]]:
    name, _, probes = spec.rpartition("=")  # the name may hold "=" ("S = 7"), a path seldom does
    if not probes:
        raise SystemExit(f"--row {spec!r}: expected NAME=PROBE[@PROMPTS][,PROBE@PROMPTS...]")
    out = []
    for p in probes.split(","):
        path, _, prompts = p.partition("@")
        out.append((path, prompts or None))
    return name.strip(), out


def row_results(cfg, items, probes, progress: bool) -> list:
    """Each item's `ScoreResult` from the first probe that never trained on its question."""
    from spanuq import SpanUQ
    from spanuq.bench.mushroom_train import question_key, questions_of
    from spanuq.bench.run import score_items

    seen = [questions_of(f) if f else set() for _, f in probes]
    owner = []
    for x in items:
        k = next((i for i, s in enumerate(seen) if question_key(x.model_input) not in s), None)
        if k is None:
            raise SystemExit(f"{x.id}: every probe of the row trained on its question")
        owner.append(k)
    results = [None] * len(items)
    for k, (path, _) in enumerate(probes):
        idx = [i for i, o in enumerate(owner) if o == k]
        if not idx:
            continue
        with SpanUQ.load(path, cfg=cfg, threshold=0.0) as uq:
            out, skipped = score_items(uq, [items[i] for i in idx], progress)
            stored = uq.fitted.validity_threshold
        for i, r in zip(idx, out):
            results[i] = r
    return results, stored, [sum(o == k for o in owner) for k in range(len(probes))]


def span_ceiling(items, results, v_min: float) -> tuple[float, float]:
    """(share of human-marked characters inside some span, IoU of keeping exactly the spans
    whose characters people mostly marked)."""
    cover, ious = [], []
    for x, r in zip(items, results):
        ref = np.zeros(x.text_len, bool)
        for s, e in x.hard_labels:
            ref[s:e] = True
        anyv, keep = np.zeros_like(ref), np.zeros_like(ref)
        for s in (r.spans if r is not None else []):
            if s.validity < v_min or s.end <= s.start:
                continue
            anyv[s.start:s.end] = True
            if ref[s.start:s.end].mean() > 0.5:
                keep[s.start:s.end] = True
        if ref.any():
            cover.append(anyv[ref].mean())
        union = np.count_nonzero(ref | keep)
        ious.append(1.0 if union == 0 else np.count_nonzero(ref & keep) / union)
    return float(np.mean(cover)), float(np.mean(ious))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--row", action="append", required=True, help="NAME=PROBE[@PROMPTS][,PROBE@PROMPTS...]")
    ap.add_argument("--data", nargs="+", default=None, help="the Mu-SHROOM files (default: the cached split)")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--out", default="data/mushroom_ablation.json")
    args = ap.parse_args()

    from spanuq.bench import controls
    from spanuq.bench.metrics import item_scores, mean_ci
    from spanuq.bench.mushroom import load_split
    from spanuq.bench.probe_chars import probe_variants, variant_v_min
    from spanuq.bench.select import Method, choose, predictions
    from spanuq.config import load_config
    from spanuq.label.units import load_spacy

    cfg = load_config(args.params)
    items, info = load_split("val", cfg.paths.cache, args.data)
    refs = [x.reference() for x in items]
    tagger = Method("entities_numbers", "entities + numbers", "",
                    {"binary": controls.entities_numbers(load_spacy(cfg.label.spacy_model),
                                                         [x.model_output_text for x in items])}, thresholds=(0.5,))
    ti, tc = item_scores(refs, predictions(tagger, choose(tagger, refs)))
    rows, first = [], None
    for spec in args.row:
        name, probes = parse_row(spec)
        results, stored, counts = row_results(cfg, items, probes, progress=False)
        m = Method("spanuq", name, "", probe_variants(results, [x.model_output_text for x in items], stored), kind="probe")
        settings = choose(m, refs)
        i, c = item_scores(refs, predictions(m, settings))
        v_min = variant_v_min(settings["hard"]["variant"])
        cover, ceiling = span_ceiling(items, results, v_min)
        row = {"row": name, "probes": [{"probe": p, "trained_on": f, "answers": n} for (p, f), n in zip(probes, counts)],
               "iou": mean_ci(i, args.bootstrap), "cor": mean_ci(c, args.bootstrap), "settings": settings,
               "human_chars_covered": cover, "oracle_span_iou": ceiling,
               "delta_vs_tagger": {"iou": mean_ci(i - ti, args.bootstrap), "cor": mean_ci(c - tc, args.bootstrap)}}
        if first is None:
            first = (i, c)
        else:
            row["delta_vs_first"] = {"iou": mean_ci(i - first[0], args.bootstrap),
                                     "cor": mean_ci(c - first[1], args.bootstrap)}
        rows.append(row)
        print(f"{name}: IoU {row['iou']['value']:.3f} Cor {row['cor']['value']:.3f} "
              f"(cover {cover:.2f}, oracle-span IoU {ceiling:.3f}; {settings['hard']})", flush=True)
    out = {"split": "val", "n_items": len(items), "data_sha256": info["sha256"],
           "tagger": {"iou": float(ti.mean()), "cor": float(tc.mean())}, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2, default=float))
    fmt = lambda d: f"{d['value']:+.3f} [{d['ci'][0]:+.2f}, {d['ci'][1]:+.2f}]" if d.get("ci") else f"{d['value']:+.3f}"
    print(f"\n| row | val IoU | val Cor | Δ IoU / Cor vs first row | spans cover | oracle-span IoU |\n|---|---|---|---|---|---|")
    for r in rows:
        d = r.get("delta_vs_first")
        print(f"| {r['row']} | {r['iou']['value']:.3f} | {r['cor']['value']:.3f} | "
              f"{fmt(d['iou']) + ' / ' + fmt(d['cor']) if d else '–'} | {r['human_chars_covered']:.2f} | "
              f"{r['oracle_span_iou']:.3f} |")
    print(f"| entities + numbers (tagger) | {ti.mean():.3f} | {tc.mean():.3f} | | | |")
    print(f"{len(items)} validation answers; settings chosen on them for every row (in-sample alike)")


if __name__ == "__main__":
    main()
