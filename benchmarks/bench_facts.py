"""What showing each fact of a pasted answer on its own costs (`spanuq.score.facts`).

    python benchmarks/bench_facts.py [--model shipped] [--n 20]

Scores --n of the bundled pasted answers (`spanuq/bench/planted/pasted.jsonl`, ~100-word
encyclopaedic answers) as given answers with the probe's given calibration as stored and with
``fact_spans`` switched off, interleaved so that load changes hit both alike (spaCy loaded
before timing). Prints the mean seconds per answer each way, the added share, and how many spans
an answer shows each way.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from table import report  # benchmarks/table.py: make bench's one table

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="shipped")
    ap.add_argument("--n", type=int, default=20)
    args = ap.parse_args()

    from spanuq import SpanUQ
    from spanuq.label.units import load_spacy
    from spanuq.score.source import resolve_checkpoint
    from spanuq.config import load_config

    cfg = load_config(None)
    rows = [json.loads(x) for x in (REPO / "spanuq/bench/planted/pasted.jsonl").read_text().splitlines() if x.strip()]
    rows = rows[: args.n]
    with tempfile.TemporaryDirectory() as tmp:
        probes = {}
        for split in (True, False):
            d = Path(tmp) / f"facts-{split}"
            shutil.copytree(resolve_checkpoint(args.model, cfg), d)
            meta = json.loads((d / "config.json").read_text())
            if not meta["calibration"].get("given"):
                raise SystemExit(f"{args.model}: this probe has no given-answer calibration (spanuq recalibrate)")
            meta["calibration"]["given"]["fact_spans"] = split
            (d / "config.json").write_text(json.dumps(meta))
            probes[split] = SpanUQ.load(d, cfg=cfg)
        load_spacy(cfg.label.spacy_model)
        for uq in probes.values():  # warm-up
            uq.score(rows[0]["prompt"], response=rows[0]["answer"])
        secs, spans = {True: [], False: []}, {True: [], False: []}
        for r in rows:
            for split, uq in probes.items():
                t0 = time.perf_counter()
                res = uq.score(r["prompt"], response=r["answer"])
                secs[split].append(time.perf_counter() - t0)
                spans[split].append(len(res.spans))
        for uq in probes.values():
            uq.close()
    on, off = statistics.mean(secs[True]), statistics.mean(secs[False])
    print(f"{len(rows)} pasted answers, given-answer scoring (teacher-forced pass + probe):")
    print(f"  fact spans off: {off:.3f} s / answer, {statistics.mean(spans[False]):.1f} spans shown")
    print(f"  fact spans on:  {on:.3f} s / answer, {statistics.mean(spans[True]):.1f} spans shown")
    print(f"  added: {on - off:+.3f} s / answer ({100 * (on - off) / off:+.1f}%)")
    report("facts", "score(prompt, response), fact spans on vs off", 100 * (on - off) / off, "% added")


if __name__ == "__main__":
    main()
