"""The one table `make bench` prints: each product benchmark reports its headline figures here.

    from table import report
    report("extract", "teacher-forced pass", n_tok / seconds, "tokens/s")

``report`` prints nothing: it appends one JSON line to the file named by ``$SPANUQ_BENCH_ROWS``
when `benchmarks/run.py` runs the benchmark (a benchmark run by hand prints only its own lines).
"""
from __future__ import annotations

import json
import os


def report(bench: str, what: str, value: float, unit: str, note: str = "") -> None:
    path = os.environ.get("SPANUQ_BENCH_ROWS")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"bench": bench, "what": what, "value": value, "unit": unit, "note": note}) + "\n")
