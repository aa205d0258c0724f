"""`spanuq monitor` on ≥ 500 answers: how long the report takes on this machine.

    python benchmarks/bench_monitor.py [--rows 526] [--keep DIR]

Builds the sample answers file (`spanuq.monitor.sample`: the shipped probe's 266 generated test
answers and templated answers to bundled prompts), runs the command with the shipped probe into a
fresh folder (no cache), then again (everything from the cache), and prints the wall time (model
load included), the process's CPU time, answers per second and the machine's load.  Say the load
beside the numbers: on a shared machine the wall time measures the neighbours too.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from table import report  # benchmarks/table.py: make bench's one table


def run(src: Path, out: Path) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "spanuq.cli", "monitor", str(src), "-O", str(out), "--model", "shipped",
                    "--no-progress"], check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    from spanuq.monitor.sample import write_answers

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=526, help="rows (266 generated + the rest templated)")
    ap.add_argument("--keep", default=None, metavar="DIR", help="write the answers and the report here (kept)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(args.keep or tmp)
        where.mkdir(parents=True, exist_ok=True)
        src = where / "answers.jsonl"
        n = write_answers(src, n_templated=max(0, args.rows - 266))
        if (where / "report").exists():
            shutil.rmtree(where / "report")  # a fresh folder: nothing from an earlier run's cache
        load0 = os.getloadavg()[0]
        cold, cold_cpu = run(src, where / "report")
        warm, warm_cpu = run(src, where / "report")
        load1 = os.getloadavg()[0]
    print(f"\nspanuq monitor, {n} answers, shipped probe, {os.cpu_count()} cores, load average {load0:.2f} -> {load1:.2f}")
    print("| run | wall | CPU time | answers/s (wall) |")
    print("|---|---|---|---|")
    print(f"| fresh folder | {cold:.1f} s | {cold_cpu:.1f} s | {n / cold:.2f} |")
    print(f"| rerun (all from the cache) | {warm:.1f} s | {warm_cpu:.1f} s | {n / warm:.2f} |")
    report("monitor", f"{n} answers, fresh folder", n / cold, "answers/s", f"rerun from the cache {n / warm:.1f}/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
