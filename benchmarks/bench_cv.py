"""Choosing a probe setting when the dev split is too small to choose: k-fold cross-validation on train.

The default run's dev split has 29 answers (~120 spans): two settings 0.02 AUROC apart are a
coin toss there.  This script scores each named ``ablate.rows`` entry (and the surface prior,
the floor every margin is read against) on every training answer once: the train split's
answers are cut into ``--folds`` folds by prompt (a prompt's sample answers stay in its fold);
for each fold, every row is trained on the other folds with the run's own dev split for early
stopping and calibration, exactly as the train stage does, and scores the held-out fold's greedy
answers as the evaluate stage does (every labelled span; a span no kept prediction overlaps gets
û_seq).  Sample answers (`label.sample_answers`) train but are never scored, so runs with and
without them are read on the same spans; a row trains on the first ``label.sample_answers`` of
them its own config keeps (0: greedy answers only).  The test split is never read.

Prints, per row, the pooled AUROC / pair accuracy over every training span (95% cluster-bootstrap
intervals, the negatives beside them), the per-fold AUROC and detection F1, and each row's
difference to the first row and to the surface prior with a paired bootstrap over answers.
Results are written after every (fold, row), so a killed run resumes where it stopped.

    python benchmarks/bench_cv.py data --rows default "span skip off" --out /tmp/cv.json

A row is an ``ablate.rows`` name or inline overrides, e.g. on a run labelled with two sample
answers a prompt: ``--set label.sample_answers=2 --rows default label.sample_answers=0``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from spanuq.config import apply_overrides, load_config  # noqa: E402


def fold_of(prompt_ids: list[str], folds: int) -> dict[str, int]:
    """Each parent prompt's fold: prompts sorted by a hash of their id, dealt round-robin
    within each domain prefix, so every fold gets a share of every style."""
    by_domain: dict[str, list[str]] = {}
    for pid in sorted(set(prompt_ids)):
        by_domain.setdefault(pid.rsplit("-", 1)[0], []).append(pid)
    out, k = {}, 0
    for dom in sorted(by_domain):
        for pid in sorted(by_domain[dom], key=lambda p: hashlib.sha256(p.encode()).hexdigest()):
            out[pid], k = k % folds, k + 1
    return out


def paired_diff(y, a, b, groups, n_boot: int, threshold: float, gap: float, seed: int = 0) -> dict[str, tuple[float, list[float] | None]]:
    """AUROC(a) − AUROC(b) and pair accuracy(a) − pair accuracy(b) on the same spans, each with a
    cluster bootstrap over answers (the same resamples for both methods)."""
    from spanuq.metrics.uq import Undefined, _auroc_fn, _pair_accuracy_fn, percentile_ci, resample_indices

    fns = {"auroc": _auroc_fn(threshold), "pair": _pair_accuracy_fn(gap)}
    out = {}
    for name, fn in fns.items():
        boots = []
        for idx, draws in resample_indices(groups, len(y), n_boot, seed):
            try:
                boots.append(fn(y[idx], a[idx], draws) - fn(y[idx], b[idx], draws))
            except Undefined:
                continue
        out[name] = (fn(y, a, groups) - fn(y, b, groups), percentile_ci(boots))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path, help="the run's data folder (features + labels.jsonl)")
    ap.add_argument("--rows", nargs="+", default=["default", "span skip off"],
                    help="ablate.rows names or inline overrides 'key=value,key=value' (first = reference)")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--preset", default=None, help="the run's preset (e.g. cpu-full)")
    ap.add_argument("--set", action="append", default=[], help="extra dotted overrides for every row (key=value)")
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--out", type=Path, required=True, help="results JSON (resumed if it exists)")
    args = ap.parse_args()

    import torch

    from spanuq.baselines.surface_prior import SurfacePrior
    from spanuq.evaluate.stage import evaluate_probe
    from spanuq.features.dataset import answers, load_examples, training_examples
    from spanuq.config import AblateRow, _parse_value
    from spanuq.label.sample_answers import parent_id, parse
    from spanuq.llm.loading import load_tokenizer
    from spanuq.metrics.uq import metric_value, negatives, span_metrics
    from spanuq.pipeline.paths import StagePaths
    from spanuq.train.stage import calibrate_on_dev, train_probe

    torch.set_num_threads(os.cpu_count() or 1)
    cfg = load_config(REPO / "params.yaml", overrides=[f"paths.data={args.data}", *args.set], preset=args.preset)
    rows = {r.name: r for r in cfg.ablate.rows}
    for n in args.rows:  # inline rows: "key=value,key=value", values parsed as on the command line
        if n not in rows and "=" in n:
            pairs = (kv.split("=", 1) for kv in n.split(","))
            rows[n] = AblateRow(name=n, set={k.strip(): _parse_value(v.strip()) for k, v in pairs})
    missing = [n for n in args.rows if n not in rows]
    if missing:
        raise SystemExit(f"no ablate.rows named {missing}; params.yaml has {sorted(rows)}")
    paths = StagePaths.from_config(cfg)
    train, _ = training_examples(paths.features, paths.labels)
    dev = load_examples(paths.features, paths.labels, ("dev",))
    tokenizer = load_tokenizer(cfg)
    # a sample answer's rank among its prompt's (0, 1, …): a row keeps those below its label.sample_answers
    taken: dict[str, list[tuple[int, str]]] = {}
    for e in train:
        if (p := parse(e.prompt_id)) is not None:
            taken.setdefault(p[0], []).append((p[1], e.prompt_id))
    sample_rank = {a: r for kids in taken.values() for r, (_, a) in enumerate(sorted(kids))}
    folds = fold_of([parent_id(e.prompt_id) for e in train], args.folds)
    fold = np.array([folds[parent_id(e.prompt_id)] for e in train])
    meta = {"data": str(args.data.resolve()), "preset": args.preset, "folds": args.folds, "set": args.set,
            "n_train": len(train), "n_dev": len(dev), "train_ids": sorted(e.prompt_id for e in train)}
    done = {}
    if args.out.exists() and (prev := json.loads(args.out.read_text())).get("meta") == meta:
        done = prev["results"]
    prior = SurfacePrior.from_config(cfg)
    dev_answers = answers(tokenizer, dev)
    print(f"{args.data}: {len(train)} training answers in {args.folds} folds "
          f"({np.bincount(fold).tolist()} answers), dev {len(dev)} answers; rows {args.rows}", flush=True)
    for k in range(args.folds):
        tr = [e for e, f in zip(train, fold) if f != k]
        held = [e for e, f in zip(train, fold) if f == k and parent_id(e.prompt_id) == e.prompt_id]
        held_answers = answers(tokenizer, held)
        key = f"{k}/surface prior"
        if key not in done:
            prior.fit(tr, dev)
            done[key] = {"u": np.concatenate(prior.score(held)).tolist()}
        for name in args.rows:
            key = f"{k}/{name}"
            if key in done:
                continue
            rcfg = apply_overrides(cfg, rows[name].set)
            tr_row = [e for e in tr if sample_rank.get(e.prompt_id, -1) < rcfg.label.sample_answers]
            t0 = time.perf_counter()
            model, info = train_probe(rcfg, tr_row, dev, progress=False)
            calibration, _ = calibrate_on_dev(model, dev, rcfg, "cpu", dev_answers)
            metrics, _, sc = evaluate_probe(rcfg, model, calibration, held, "cpu", held_answers,
                                            window=rcfg.generate.max_new_tokens)
            done[key] = {"u": sc["u"].tolist(), "auroc": metric_value(metrics, "span", "auroc"),
                         "pair": metric_value(metrics, "span", "pair_accuracy"),
                         "f1": metric_value(metrics, "detection", "f1"), "epochs": info["epochs_run"],
                         "seconds": round(time.perf_counter() - t0, 1)}
            print(f"fold {k} {name}: AUROC {done[key]['auroc']:.3f} pair {done[key]['pair']:.3f} "
                  f"F1 {done[key]['f1']:.3f} ({len(tr_row)} training answers, {done[key]['seconds']:.0f} s)", flush=True)
            args.out.write_text(json.dumps({"meta": meta, "results": done}))
        args.out.write_text(json.dumps({"meta": meta, "results": done}))

    # pooled over every training span, in fold order
    greedy = np.array([parent_id(e.prompt_id) == e.prompt_id for e in train])
    order = [i for k in range(args.folds) for i in np.flatnonzero((fold == k) & greedy)]
    y = np.concatenate([train[i].u.numpy() for i in order])
    groups = np.concatenate([[train[i].prompt_id] * len(train[i].u) for i in order])
    pooled = {n: np.concatenate([done[f"{k}/{n}"]["u"] for k in range(args.folds)])
              for n in ["surface prior", *args.rows]}
    print(f"\nEvery greedy training answer's span scored once by a probe that did not train on it: "
          f"{len(y)} spans, {len(order)} answers\n")
    print("| row | pooled AUROC | neg | pair acc | per-fold AUROC (mean) | per-fold F1 (mean) | "
          f"Δ AUROC / Δ pair acc vs {args.rows[0]} | Δ AUROC / Δ pair acc vs surface prior |\n"
          "|---|---|---|---|---|---|---|---|")
    ec = cfg.evaluate
    cut = (ec.positive_threshold, ec.pair_gap)
    for n, s in pooled.items():
        m = span_metrics(y, s, ec.positive_threshold, groups=groups, bootstrap=args.bootstrap, pair_gap=ec.pair_gap)
        cell = lambda k: f"{m[k]['value']:.3f} [{m[k]['ci'][0]:.2f}, {m[k]['ci'][1]:.2f}]"  # noqa: E731
        per = [done[f"{k}/{n}"] for k in range(args.folds)]
        fa = " / ".join(f"{p['auroc']:.3f}" for p in per) + f" ({np.mean([p['auroc'] for p in per]):.3f})" \
            if "auroc" in per[0] else "—"
        ff = f"{np.mean([p['f1'] for p in per]):.3f}" if "f1" in per[0] else "—"
        d0 = paired_diff(y, s, pooled[args.rows[0]], groups, args.bootstrap, *cut) if n != args.rows[0] else None
        dp = paired_diff(y, s, pooled["surface prior"], groups, args.bootstrap, *cut) if n != "surface prior" else None
        one = lambda v: f"{v[0]:+.3f} [{v[1][0]:+.2f}, {v[1][1]:+.2f}]"  # noqa: E731
        fmt = lambda d: f"{one(d['auroc'])} / {one(d['pair'])}" if d else "—"  # noqa: E731
        print(f"| {n} | {cell('auroc')} | {negatives(m)} | {cell('pair_accuracy')} | {fa} | {ff} | "
              f"{fmt(d0)} | {fmt(dp)} |")


if __name__ == "__main__":
    main()
