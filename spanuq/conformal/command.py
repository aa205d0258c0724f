"""`spanuq calibrate`: fit thresholds with a conformal guarantee on a labelled split, store them with the probe.

    spanuq calibrate --alpha 0.1                               # the shipped probe on its stored test split
    spanuq calibrate --alpha 0.05 0.1 0.2 --guarantee factuality fdr --delta 0.1
    spanuq calibrate --model data/smollm2-135m/probe --data data --split test
    spanuq calibrate --alpha 0.1 --check 200                   # held-out rates over 200 random 50/50 splits
    spanuq calibrate --alpha 0.1 --check-data data-unseen      # fitted here, measured on another labelled folder
    spanuq calibrate ... --doc docs/guarantees.md              # and write the tables into the docs

Writes ``conformal.json`` beside the probe's weights, or, for the probe shipped inside the installed
package (not the user's to write), to ``~/.local/share/spanuq/conformal/`` (`spanuq.score.guarantee.files`);
`spanuq score / serve / refine --conformal-alpha A` read it.  The guarantees are stated in docs/guarantees.md.
"""
from __future__ import annotations

import argparse
import json
import sys

from ..metrics.conformal import GUARANTEES, achieved, fit, outcome, split_check


def add_calibrate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, metavar="DIR|URI",
                   help="the probe (as `spanuq score --model`; default: data/<backbone>/probe, else the shipped one)")
    p.add_argument("--data", default="shipped", metavar="shipped|DIR",
                   help="labelled answers: `shipped` (the test split stored with a shipped probe) or a pipeline "
                        "data folder (paths.data) after its extract stage")
    p.add_argument("--split", default="test", help="the split of --data DIR (default test: a split the probe was "
                                                   "neither trained nor selected on)")
    p.add_argument("--alpha", type=float, nargs="+", default=[0.1], help="error levels α (default 0.1)")
    p.add_argument("--guarantee", nargs="+", choices=GUARANTEES, default=["factuality"],
                   help="factuality: every kept claim of an answer right w.p. >= 1-α; fdr: expected share of kept "
                        "claims wrong <= α w.p. >= 1-δ (docs/guarantees.md)")
    p.add_argument("--delta", type=float, default=0.1, help="fdr: the probability δ that the guarantee fails")
    p.add_argument("--out", default=None, help="the file to write (default: conformal.json beside the probe; for "
                                               "the shipped probe, ~/.local/share/spanuq/conformal/<backbone>-<sha>.json, "
                                               "which scoring reads first)")
    p.add_argument("--check", type=int, default=0, metavar="N",
                   help="also fit on random halves of the answers and measure on the other half, N times")
    p.add_argument("--check-data", default=None, metavar="DIR",
                   help="also measure the thresholds on the labelled --check-split of another data folder")
    p.add_argument("--check-split", default="test")
    p.add_argument("--doc", default=None, metavar="FILE",
                   help="also write the tables (fitted, held out, on --check-data) into FILE between its markers "
                        "(docs/guarantees.md)")
    p.add_argument("--limit", type=int, default=None, help="use the first N labelled answers only (a quick look)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the numbers as JSON")


def _examples(uq, cfg, data: str, split: str, limit: int | None = None, progress: bool = False):
    from .claims import folder_examples, shipped_examples

    if data == "shipped":
        return shipped_examples(uq, limit, progress), f"test split stored with the probe ({uq.checkpoint.name}/test_split.jsonl)"
    folder_cfg = cfg.model_copy(update={"paths": cfg.paths.model_copy(update={"data": data}),
                                        "backbone": uq.cfg.backbone})
    return folder_examples(folder_cfg, split, limit), f"{data} ({split} split)"


def run_calibrate(args, cfg) -> int:
    from ..score.commands import load_uq
    from ..score import guarantee as store
    from .claims import claims_of

    uq = load_uq(argparse.Namespace(model=args.model, generator=None, threshold=None, override=args.override), cfg)
    try:
        examples, source = _examples(uq, cfg, args.data, args.split, args.limit, not args.no_progress)
        answers = claims_of(uq, examples)
        other = None
        if args.check_data:
            other_ex, other_source = _examples(uq, cfg, args.check_data, args.check_split)
            other = (claims_of(uq, other_ex), other_source)
    finally:
        uq.close()
    counts = _counts(answers, source)
    n_claims, n_wrong = counts["n_claims"], counts["n_wrong"]
    fitted, rows = [], []
    for g in args.guarantee:
        for alpha in args.alpha:
            f = fit(answers, g, alpha, args.delta)
            cal = outcome(answers, f.threshold)
            fitted.append((f, cal))
            row = {"guarantee": g, "alpha": alpha, "delta": f.delta, "threshold": f.threshold, "bound": f.bound,
                   "calibration": cal}
            if args.check:
                row["splits"] = split_check(answers, g, alpha, args.delta, args.check, seed=args.seed)
            if other is not None:
                row["other"] = {"source": other[1], **outcome(other[0], f.threshold)}
            rows.append(row)
    ec = uq.cfg.evaluate
    path = store.write(uq.checkpoint, fitted, {"source": source, "n_answers": len(answers), "n_claims": n_claims,
                                               "n_wrong": n_wrong}, ec.positive_threshold, ec.iou_threshold, args.out)
    if args.doc:
        from ..pipeline.files import sha256_file
        from .doc import block, write_block

        write_block(args.doc, block(rows, counts, None if other is None else _counts(*other),
                                    sha256_file(uq.checkpoint / "model.safetensors")))
        print(f"calibrate: wrote the tables into {args.doc}", file=sys.stderr)
    if args.json:
        print(json.dumps({"file": str(path), "source": source, "n_answers": len(answers), "n_claims": n_claims,
                          "n_wrong": n_wrong, "rows": rows}, indent=2))
    else:
        print(table(rows, source, len(answers), n_claims, n_wrong))
        print(f"calibrate: wrote {path}", file=sys.stderr)
    return 0


def _counts(answers, source: str) -> dict:
    """How many answers, labelled claims and wrong claims, and answers with a wrong claim."""
    return {"source": source, "n_answers": len(answers), "n_claims": sum(len(a.scores) for a in answers),
            "n_wrong": int(sum(a.wrong.sum() for a in answers)),
            "n_answers_wrong": sum(bool(a.wrong.any()) for a in answers)}


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def table(rows: list[dict], source: str, n: int, n_claims: int, n_wrong: int) -> str:
    """One line per (guarantee, α): the threshold, the guaranteed bound and what it did."""
    lines = [f"fitted on {n} answers, {n_claims} labelled claims ({n_wrong} wrong) of the {source}", "",
             "guarantee   α     guaranteed                 λ̂       rate on the fitted answers  kept"]
    for r in rows:
        g = r["guarantee"]
        bound = (f"P(kept wrong) ≤ {r['bound']:.3f}" if g == "factuality"
                 else f"E[FDP] ≤ {r['alpha']:.2f} w.p. {1 - r['delta']:.2f}")
        lam = "none" if r["threshold"] is None else f"{r['threshold']:.4f}"
        rate = achieved(g, r["calibration"])
        lines.append(f"{g:<11} {r['alpha']:<5} {bound:<26} {lam:<8} {_pct(rate):<27} "
                     f"{_pct(r['calibration']['kept_share'])}")
    if any("splits" in r for r in rows):
        s0 = next(r["splits"] for r in rows if "splits" in r)
        lines += ["", f"held out: fitted on {s0['n_cal']} answers, measured on the other {s0['n_test']}, "
                      f"{s0['n_splits']} random splits (mean [5%, 95%])",
                  "guarantee   α     rate held out              splits with rate > α   kept"]
        for r in rows:
            s = r.get("splits")
            if s:
                lines.append(f"{r['guarantee']:<11} {r['alpha']:<5} {_pct(s['rate_mean'])} [{_pct(s['rate_q05'])}, "
                             f"{_pct(s['rate_q95'])}]{'':<4} {_pct(s['share_splits_above_alpha']):<22} "
                             f"{_pct(s['kept_mean'])} [{_pct(s['kept_q05'])}, {_pct(s['kept_q95'])}]")
    if any("other" in r for r in rows):
        o0 = next(r["other"] for r in rows if "other" in r)
        lines += ["", f"on {o0['source']}: {o0['n_answers']} answers, {o0['n_claims']} labelled claims",
                  "guarantee   α     rate              kept"]
        for r in rows:
            o = r.get("other")
            if o:
                lines.append(f"{r['guarantee']:<11} {r['alpha']:<5} {_pct(achieved(r['guarantee'], o)):<17} "
                             f"{_pct(o['kept_share'])}")
    return "\n".join(lines)
