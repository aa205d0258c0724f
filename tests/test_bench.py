"""`make bench`: every product benchmark runs under benchmarks/run.py and puts its figures into one table."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import run  # noqa: E402  (benchmarks/run.py)

OWN_TARGETS = {"gpu": "make bench-gpu", "install": "make bench-install",  # need a GPU / build venvs
               "lanes": "make bench-lanes"}  # a soak of 6,000 requests: longer than make bench


def test_every_product_benchmark_is_in_make_bench_and_reports_into_its_table():
    scripts = {p.stem.removeprefix("bench_") for p in (REPO / "benchmarks").glob("bench_*.py")}
    assert set(run.QUICK) == set(run.SMOKE) == scripts - set(OWN_TARGETS)
    for name in run.QUICK:
        assert "report(" in (REPO / "benchmarks" / f"bench_{name}.py").read_text(encoding="utf-8"), name
    make = (REPO / "Makefile").read_text(encoding="utf-8")
    assert "\tpython benchmarks/run.py\n" in make and all(f"{t.split()[1]}:" in make for t in OWN_TARGETS.values())


def test_the_table_has_a_row_per_reported_figure():
    rows = [{"bench": "probe", "what": "forward, T = 16", "value": 3.14159, "unit": "ms", "note": ""},
            {"bench": "serve", "what": "4 clients", "value": 12.5, "unit": "answers/s", "note": "p95 1.00 s"}]
    lines = run.table(rows).splitlines()
    assert len(lines) == 4 and lines[0].startswith("| benchmark") and set(lines[1]) <= {"|", "-"}
    assert "| probe " in lines[2] and "3.142" in lines[2] and "p95 1.00 s" in lines[3]


def _bench(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "run.py"), "--smoke", "--log",
                           str(tmp_path / "bench.log"), *args], capture_output=True, text=True, cwd=REPO, timeout=3000)


def test_make_bench_runs_a_benchmark_in_its_own_process_and_prints_one_table(tmp_path):
    out = _bench("--only", "probe", tmp_path=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:] + (tmp_path / "bench.log").read_text()[-3000:]
    table = [line for line in out.stdout.splitlines() if line.startswith("|")]
    assert table[0].startswith("| benchmark") and len(table) >= 3
    assert all(re.match(r"\| probe +\| .+ \| +[\d.e+-]+ \| (ms|%) ", line) for line in table[2:]), table
    assert "===== bench_probe.py" in (tmp_path / "bench.log").read_text()


def test_a_benchmark_make_bench_does_not_know_is_refused(tmp_path):
    out = _bench("--only", "probes", tmp_path=tmp_path)
    assert out.returncode == 2 and "no benchmark ['probes']" in out.stderr


@pytest.mark.slow
def test_every_benchmark_runs_end_to_end_at_its_smallest_sizes(tmp_path):
    out = _bench(tmp_path=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:] + (tmp_path / "bench.log").read_text()[-5000:]
    benches = {line.split("|")[1].strip() for line in out.stdout.splitlines()[3:] if line.startswith("| ")}
    assert len(benches) == len(run.SMOKE), benches
