"""How much does the backbone know beyond one reading? The planted pairs re-read under other contexts.

    python scripts/planted_readings.py data/smollm2-135m/bench/planted.json [--model shipped]

`spanuq bench planted`'s surprisal control reads each twin's slot after the chat-templated question.
This reads it again after each context of ``planted_readings.json`` (no question, a plain or
few-shot question-answer frame, a system prompt) and prints the pair accuracy (planted slot more
surprising than the correct one; ties 0.5) of

* each reading alone,
* its sum with the bench's reading (two passes, an ensemble), and
* the bench's reading minus λ times it, S − λ·S_ctx: with a context without the question this is
  the slot's pointwise mutual information with the question, λ = 1 (a value's base rate removed),

over all pairs, by kind and by source: the ceiling of what the backbone's likelihood of a slot can
tell, whichever way it is asked (measured: docs/results.md).
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

READINGS = Path(__file__).with_name("planted_readings.json")
LAMBDAS = (0.25, 0.5, 1.0)


def context(uq, question: str, reading: dict) -> str:
    """The string the backbone reads before a twin's answer under ``reading``."""
    from spanuq.llm.loading import chat_prompt

    if "plain" in reading:
        return reading["plain"].format(question=question)
    return chat_prompt(uq.tok, reading["chat"].format(question=question), reading.get("system"))


def accuracy(items: list[dict], score) -> dict[str, float]:
    """Pair accuracy of ``score(i, twin)`` (twin 0 correct, 1 planted) over all pairs, by kind, by source."""
    from spanuq.bench.planted_run import outcome

    cells = defaultdict(list)
    for i, x in enumerate(items):
        won = outcome(score(i, 1), score(i, 0))
        for key in ("all", x["pair"]["kind"], x["pair"]["source"]):
            cells[key].append(won)
    return {k: float(np.mean(v)) for k, v in cells.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("planted", type=Path, help="a planted.json written by `spanuq bench planted`")
    ap.add_argument("--model", default="shipped", help="the probe whose backbone reads (default: shipped)")
    args = ap.parse_args()

    from spanuq import SpanUQ
    from spanuq.bench.planted import Twin
    from spanuq.bench.planted_run import slot_nll

    items = [x for x in json.loads(args.planted.read_text())["items"] if "error" not in x]
    readings = {k: v for k, v in json.loads(READINGS.read_text()).items() if not k.startswith("_")}
    twins = [Twin(x["pair"][n]["text"], tuple(x["pair"][n]["slot"])) for x in items for n in ("correct", "planted")]
    questions = [x["pair"]["prompt"] for x in items for _ in (0, 1)]
    bench = lambda i, j: items[i]["planted" if j else "correct"]["surprisal_sum"]  # noqa: E731
    rows = {"chat template, the question (the bench's control)": accuracy(items, bench)}
    with SpanUQ.load(args.model) as uq:
        for name, reading in readings.items():
            s = [nll for nll, _ in slot_nll(uq, [context(uq, q, reading) for q in questions], twins)]
            rows[name] = accuracy(items, lambda i, j: s[2 * i + j])
            rows[f"control + {name}"] = accuracy(items, lambda i, j: bench(i, j) + s[2 * i + j])
            for lam in LAMBDAS:
                rows[f"control − {lam}·{name}"] = accuracy(items, lambda i, j: bench(i, j) - lam * s[2 * i + j])
            print(f"read: {name}", flush=True)
    keys = ["all", "year", "number", "person", "place", "entity", "templated", "own", "pasted"]
    print(f"\n{len(items)} pairs of {args.planted}; pair accuracy of the slot's surprisal\n")
    print("| reading | " + " | ".join(keys) + " |\n|---|" + "---|" * len(keys))
    for name, acc in rows.items():
        print(f"| {name} | " + " | ".join(f"{acc[k]:.3f}" if k in acc else "–" for k in keys) + " |")


if __name__ == "__main__":
    main()
