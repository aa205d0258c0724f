"""`make bench`: the product benchmarks, one after another, and one table of their headline figures.

    python benchmarks/run.py [--only score,serve] [--log bench.log] [--smoke]

Each benchmark runs in its own process with the quick settings below (run one by hand for its
options and full output); its own lines go to ``--log``, its headline figures (`table.report`)
into the table.  Timings depend on the machine and on what else runs: the load average is
printed before and after, say it beside any figure you quote.  ``make bench-gpu`` and
``make bench-install`` run the GPU and install benchmarks.  ``--smoke`` runs each at its
smallest sizes, to check that it runs at all (tests/test_bench.py), not to time it.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUICK = {  # benchmark -> its arguments in `make bench`
    "generate": ["--prompts", "8", "--samples", "5", "--max-new-tokens", "64", "--backends", "llamacpp,server,hf"],
    "extract": [],
    "probe": ["--repeats", "5"],
    "score": ["--n", "4"],
    "serve": ["--requests", "16", "--seconds", "60"],
    "stream": ["--n", "3"],
    "long_speed": ["--tokens", "128,2000"],
    "openai": ["--prompts", "4", "--rounds", "1", "--max-tokens", "32"],
    "monitor": ["--rows", "266"],
    "facts": ["--n", "20"],
    "grounded": ["--n", "4", "--repeats", "1", "--model", "shipped"],  # the shipped probe and its reader
}
SMOKE = {  # the same code at the smallest sizes: checks that `make bench` runs end to end, times nothing
    "generate": ["--prompts", "1", "--samples", "1", "--max-new-tokens", "8", "--backends", "llamacpp,server,hf"],
    "extract": ["--responses", "2", "--tokens", "16", "--batch", "2"],
    "probe": ["--tokens", "16", "--repeats", "1", "--train-batch", "2", "--train-tokens", "8", "--train-answers", "2"],
    "score": ["--n", "1", "--max-new-tokens", "8"],
    "serve": ["--requests", "2", "--seconds", "5"],
    "stream": ["--n", "1", "--max-new-tokens", "8"],
    "long_speed": ["--tokens", "128"],
    "openai": ["--prompts", "1", "--rounds", "1", "--max-tokens", "8"],
    "monitor": ["--rows", "266"],  # the shipped probe's generated answers: the smallest file it writes
    "facts": ["--n", "2"],
    "grounded": ["--n", "1", "--repeats", "1", "--context-tokens", "200", "--max-new-tokens", "8"],
}


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def table(rows: list[dict]) -> str:
    """The benchmarks' headline figures (`table.report`'s rows) as one Markdown table."""
    width = max([len(r["what"]) for r in rows] + [10])
    lines = [f"| {'benchmark':<11} | {'what':<{width}} | {'value':>10} | {'unit':<10} | note",
             f"|{'-' * 13}|{'-' * (width + 2)}|{'-' * 12}|{'-' * 12}|------"]
    lines += [f"| {r['bench']:<11} | {r['what']:<{width}} | {r['value']:>10.4g} | {r['unit']:<10} | {r['note']}"
              for r in rows]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=None, help=f"comma-separated, of {', '.join(QUICK)}")
    ap.add_argument("--log", type=Path, default=Path(tempfile.gettempdir()) / "spanuq-bench.log")
    ap.add_argument("--smoke", action="store_true", help="the smallest sizes: does every benchmark run? (no timings)")
    args = ap.parse_args()
    sizes = SMOKE if args.smoke else QUICK
    names = args.only.split(",") if args.only else list(sizes)
    unknown = sorted(set(names) - set(sizes))
    if unknown:
        ap.error(f"no benchmark {unknown}; there are {', '.join(sizes)}")
    rows_file = Path(tempfile.mkstemp(prefix="spanuq-bench-", suffix=".jsonl")[1])
    env = {**os.environ, "SPANUQ_BENCH_ROWS": str(rows_file)}
    failed, started = [], f"load average before: {load()} ({os.cpu_count()} CPUs)"
    with args.log.open("w", encoding="utf-8") as log:
        for name in names:
            print(f"bench {name} …", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            log.write(f"\n===== bench_{name}.py {' '.join(sizes[name])}\n")
            log.flush()
            r = subprocess.run([sys.executable, str(HERE / f"bench_{name}.py"), *sizes[name]], stdout=log,
                               stderr=subprocess.STDOUT, env=env, cwd=HERE.parent)
            log.write(f"===== {time.perf_counter() - t0:.0f} s, exit code {r.returncode}\n")
            if r.returncode:
                failed.append(name)
    rows = [json.loads(line) for line in rows_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows_file.unlink()
    print(started)
    print(table(rows))
    print(f"load average after: {load()}; each benchmark's own output: {args.log}")
    if failed:
        print(f"failed: {', '.join(failed)} (see {args.log})", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
