"""`spanuq monitor`: argument parsing (spanuq/cli.py wires it in; the work is `run.run_monitor`)."""
from __future__ import annotations

import argparse
import sys


def add_monitor_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="JSONL rows {prompt, response, answer_source?, context?, domain?, id?, "
                                "metadata?: {...}}")
    p.add_argument("-O", "--out", default=None, help="output folder (default: <file>.monitor/): report.html, "
                                                     "report.json and the cache that makes reruns resume")
    p.add_argument("--by", default=None, help="comma-separated columns to break rates down by (default: domain and "
                                              "every metadata key with 2-50 values)")
    p.add_argument("--threshold", type=float, default=None,
                   help="a span is uncertain when its û is above this (default: score.refine_threshold, else the flag "
                        "threshold the probe stores for the answer's source)")
    p.add_argument("--batch-size", type=int, default=32, help="rows scored (and cached) together")
    p.add_argument("--top", type=int, default=20, help="doubtful answers shown")
    p.add_argument("--model", default=None, metavar="DIR|URI", help="the probe (as `spanuq score --model`)")
    p.add_argument("--conformal-alpha", type=float, default=None,
                   help="uncertain = above the probe's conformal threshold for this α (spanuq calibrate)")
    p.add_argument("--guarantee", choices=["factuality", "fdr"], default=None)
    p.add_argument("--delta", type=float, default=None, help="fdr: the δ of the fitted threshold")


def run_monitor_command(args, cfg) -> int:
    from ..score.commands import load_uq
    from .run import run_monitor, set_threads, summary

    threshold, source = args.threshold, None
    if args.conformal_alpha is not None and threshold is not None:
        raise ValueError("give --threshold or --conformal-alpha, not both")
    args.generator, args.threshold = None, None  # (the validity threshold stays the probe's)
    set_threads()
    with load_uq(args, cfg) as uq:
        g = uq.guarantee
        if g is not None:  # --conformal-alpha: uncertain means above the fitted threshold
            threshold = -1.0 if g.threshold is None else g.threshold
            source = f"conformal {g.guarantee}, α = {g.alpha}: {g.statement()}"
        report = run_monitor(uq, args.file, args.out, by=args.by.split(",") if args.by else None, threshold=threshold,
                             threshold_source=source, batch_size=args.batch_size, top=args.top,
                             progress=not args.no_progress)
    print(summary(report), file=sys.stderr)
    return 0
