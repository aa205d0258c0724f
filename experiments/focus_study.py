"""Long sources read in full or focused: the grounded bench's pairs with their passage among ~2,000 tokens of others.

    python experiments/focus_study.py [--subjects 12] [--tokens 2000] [--budgets 192] [--focus-only]
                                      [--pairs spanuq/label/grounded/pairs.jsonl --held-out]

``--pairs`` reads another pair file (the training pairs: ``--held-out`` keeps the subjects the with-sources
mapping is validated on, `spanuq.train.grounded_calibration.held_out`; ``--subjects 0``: every subject).

Each pair's sources are put in the middle of passages of other bench subjects that do not name its
subject, to ~--tokens tokens (one padding per subject, shuffled by the subject's name). Each twin is
scored through the public API with the shipped probe, as a given answer with ``context``:

  * bare:     the pair's own sources (the bench as shipped);
  * full:     the padded sources, every character read (``score.context_focus_tokens=0``);
  * focus B:  the padded sources focused on the question within B tokens (`spanuq.context.focus`).

Prints, per reading and case, pair accuracy (planted slot above correct, ties 0.5) and the shares of
right / wrong facts at û ≥ 0.5, with 95% bootstrap over subjects; and how often the focus kept the
pair's own passage. Numbers: docs/results.md.
"""
from __future__ import annotations

import argparse
import os
import random
import time
from dataclasses import replace

from spanuq import SpanUQ
from spanuq.bench.grounded import read_pairs
from spanuq.bench.grounded_run import Cache, score_reading, summarise
from spanuq.bench.planted_run import fmt
from spanuq.config import load_config
from spanuq.context.focus import focus
from spanuq.context.passages import Passage
from spanuq.context.render import count_tokens


def padded(pairs, tok, n_tokens: int) -> list:
    """The pairs with their sources in the middle of other subjects' passages (module docstring)."""
    passages = list(dict.fromkeys(c for p in pairs for c in p.context))
    out, padding = [], {}
    for p in pairs:
        if p.group not in padding:
            others = [c for c in passages if p.group.casefold() not in c.casefold()]
            random.Random(p.group).shuffle(others)
            chosen, n = [], 0
            for c in others:
                if n >= n_tokens:
                    break
                chosen.append(c)
                n += count_tokens(tok, c)
            padding[p.group] = chosen
        pad = padding[p.group]
        h = len(pad) // 2
        out.append(replace(p, context=tuple(pad[:h]) + p.context + tuple(pad[h:])))
    return out


def rows_of(pairs, values) -> list[dict]:
    rows = []
    for i, p in enumerate(pairs):
        a, b = values[2 * i], values[2 * i + 1]
        if isinstance(a, str) or isinstance(b, str):
            rows.append({"pair": p.as_dict(), "error": a if isinstance(a, str) else b})
            continue
        rows.append({"pair": p.as_dict(), **{name: {"context": v["u"], "context_detail": v}
                                              for name, v in (("correct", a), ("planted", b))}})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subjects", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--budgets", default="192")
    ap.add_argument("--focus-only", action="store_true", help="leave out the bare and full readings")
    ap.add_argument("--pairs", default=None, help="a pair file (default: the grounded bench's)")
    ap.add_argument("--held-out", action="store_true", help="only the subjects the with-sources mapping validates on")
    args = ap.parse_args()
    cfg = load_config("params.yaml")
    everything = read_pairs(args.pairs) if args.pairs else read_pairs()
    subjects = list(dict.fromkeys(p.group for p in everything))
    if args.held_out:
        from spanuq.train.grounded_calibration import held_out

        subjects = [g for g in subjects if held_out(g)]
    subjects = subjects[: args.subjects] if args.subjects else subjects
    with SpanUQ.load("shipped", cfg=cfg) as uq:
        pairs = [p for p in everything if p.group in subjects]
        long = padded([p for p in everything], uq.tok, args.tokens)
        long = [q for q in long if q.group in subjects]
        n_src = [sum(count_tokens(uq.tok, c) for c in q.context) for q in long[::19]]
        print(f"{len(pairs)} pairs of {len(subjects)} subjects; padded sources {min(n_src)}-{max(n_src)} tokens")
        kept = 0
        for p, q in zip(pairs, long):
            own = {i for i, c in enumerate(q.context, 1) if c in p.context}
            read = focus(uq.tok, [Passage(str(i), c) for i, c in enumerate(q.context, 1)], p.prompt,
                         int(args.budgets.split(",")[0]))
            kept += bool(own & {n for n, *_ in read})
        print(f"the focus ({args.budgets.split(',')[0]} tokens) kept the pair's own passage for {kept} of {len(pairs)}")
        arms = ([] if args.focus_only else [("bare", pairs, 0), ("full", long, 0)]) + [(f"focus {b}", long, int(b)) for b in args.budgets.split(",")]
        for name, ps, budget in arms:
            uq.cfg.score.context_focus_tokens = budget
            t0 = time.perf_counter()
            values = score_reading(uq, ps, "context", False, Cache(None))
            s = summarise(rows_of(ps, values), ("context",), ("context",), 1000, 0)
            print(f"\n## {name}: {s['scored_pairs']} of {s['pairs']} pairs scored in {time.perf_counter() - t0:.0f} s "
                  f"(load {os.getloadavg()[0]:.1f})")
            print("| case | pairs | pair accuracy | right at û ≥ 0.5 | wrong at û ≥ 0.5 |\n|---|---|---|---|---|")
            for r in s["table"]:
                if r["kind"] == "all":
                    print(f"| {r['case']} | {r['pairs']} | {fmt(r['context'])} | {fmt(r['right_u_ge_0.5']['context'])} "
                          f"| {fmt(r['wrong_u_ge_0.5']['context'])} |")


if __name__ == "__main__":
    main()
