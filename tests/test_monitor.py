"""`spanuq monitor answers.jsonl`: a report over many answers, resumable after a crash, failures never cached."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spanuq.monitor.sample import write_answers

BAD = [b'{"prompt": "Who?", "response": "caf\xe9"}\n',  # not UTF-8
       {"prompt": "Who wrote Dune?"},  # no response
       {"prompt": "Who wrote Dune?", "response": ""},  # an empty answer: unverified, not an error
       {"prompt": "Qui a écrit Dune ?", "response": "Dune a été écrit par Frank Herbert en 1965, un roman de "
                                                     "science-fiction.", "domain": "books"},
       {"prompt": "x" * 20_000, "response": "Too long a prompt."},  # fails the prompt limit: an error row
       {"prompt": "Who wrote Dune?", "response": "Frank Herbert.", "answer_source": "a friend"}]  # given or generated


def test_report_counts_every_row_and_groups_by_metadata(scorer, tmp_path):
    from spanuq.monitor.run import run_monitor

    src = tmp_path / "answers.jsonl"
    n = write_answers(src, n_generated=16, n_templated=16, extra=BAD)
    report = run_monitor(scorer, src, tmp_path / "out", progress=False)
    m, o, st = report["meta"], report["overall"], report["status"]
    assert m["rows"] == n and m["errors"] == 4  # not UTF-8, no response, the prompt limit, who wrote it
    assert st["reasons"] == {"empty_answer": 1, "language": 1}
    assert o["scored"] + o["unverified"] == n - 4 and o["unverified"] == 2
    assert o["uncertain"] + o["clean"] == o["scored"]
    assert sum(report["histograms"]["u_seq"]["counts"]) == o["scored"]
    assert {g["value"] for g in report["groups"]["source"]} == {"generated", "templated", "(missing)"}
    assert {"domain", "variant"} <= set(report["groups"])
    top = report["doubtful"][0]
    assert top["max_u"] == max(s["u"] for s in top["spans"])
    assert all(top["answer"][s["start"]:s["end"]] == s["text"] for s in top["spans"])
    page = (tmp_path / "out" / "report.html").read_text()
    assert "The most doubtful answers" in page and "empty_answer" in page and "<svg" in page
    assert json.loads((tmp_path / "out" / "report.json").read_text())["meta"]["rows"] == n
    # failures are never cached: only results are, and a rerun scores nothing again but retries the failures
    lines = (tmp_path / "out" / "cache.jsonl").read_text().splitlines()
    assert len(lines) == n - 4
    # the sample's own generations say who wrote them and are scored as the API scores the backbone's answers
    sources = [json.loads(x)["result"]["answer_source"] for x in lines]
    assert sources.count("generated") == 16 and sources.count("given") == n - 4 - 16
    own = json.loads(src.read_bytes().splitlines()[0])
    assert own["answer_source"] == "generated"
    assert json.loads(lines[0])["result"]["u_seq"] == pytest.approx(
        scorer.score(own["prompt"], response=own["response"], answer_source="generated").u_seq, abs=1e-4)
    again = run_monitor(scorer, src, tmp_path / "out", progress=False)
    assert again["meta"]["cache_hits"] == n - 4 and again["meta"]["scored_now"] == 0
    assert again["meta"]["errors"] == 4 and again["overall"] == o


def test_a_row_with_sources_is_read_against_them_as_the_api_reads_it(scorer, tmp_path):
    """A retrieval app's log: each row carries the passages it retrieved (`context`), and the row is
    scored against them, as `SpanUQ.score(..., context=...)` scores it; sources the API refuses are
    that row's error, never cached."""
    from spanuq.monitor.run import run_monitor

    source = [{"id": "eiffel", "text": "The Eiffel Tower was completed in March 1889 for the World's Fair."}]
    row = {"prompt": "When was the Eiffel Tower finished?", "response": "It was finished in 1899."}
    src = tmp_path / "answers.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in [
        {**row, "context": source}, row, {**row, "context": "not a list"}, {**row, "context": []}]))
    report = run_monitor(scorer, src, tmp_path / "out", progress=False)
    assert report["meta"]["errors"] == 2 and report["overall"]["scored"] + report["overall"]["unverified"] == 2
    assert [e["line"] for e in report["error_rows"]] == [3, 4] and "empty list" in report["error_rows"][1]["error"]
    cached = [json.loads(x)["result"] for x in (tmp_path / "out" / "cache.jsonl").read_text().splitlines()]
    with_sources = next(r for r in cached if r["context"] is not None)
    want = scorer.score(row["prompt"], response=row["response"], context=source)
    assert [p["id"] for p in with_sources["context"]] == ["eiffel"]
    assert [(s["start"], s["end"]) for s in with_sources["spans"]] == [(s.start, s.end) for s in want.spans]
    assert [s["u"] for s in with_sources["spans"]] == pytest.approx([s.u for s in want.spans], abs=1e-4)
    assert with_sources["calibration_source"] == want.calibration_source and with_sources["status"] == want.status
    without = next(r for r in cached if r["context"] is None)
    assert without["context_windows"] == 0 and with_sources["context_windows"] == 1


def _monitor(src: Path, out: Path, probe_dir: Path, env: dict, batch: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "spanuq.cli", "monitor", str(src), "-O", str(out), "--model", str(probe_dir),
           "--batch-size", str(batch), "--no-progress"]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def test_a_crash_mid_way_loses_nothing_and_the_rerun_resumes(probe_dir, tmp_path, repo_root):
    src = tmp_path / "answers.jsonl"
    n = write_answers(src, n_generated=24, n_templated=24)
    out = tmp_path / "report"
    env = {**os.environ, "PYTHONPATH": str(repo_root)}
    p = _monitor(src, out, probe_dir, env, batch=4)
    cache = out / "cache.jsonl"
    deadline = time.monotonic() + 600
    while not (cache.exists() and cache.read_bytes().count(b"\n") >= 8):
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.2)
    os.killpg(p.pid, signal.SIGKILL)  # a crash: no chance to clean up
    p.wait()
    kept = cache.read_bytes().count(b"\n")  # complete records (a record cut off by the kill has no newline)
    assert 8 <= kept < n
    p = _monitor(src, out, probe_dir, env, batch=16)
    _, err = p.communicate(timeout=900)
    assert p.returncode == 0, err
    report = json.loads((out / "report.json").read_text())
    assert report["meta"]["rows"] == n and report["meta"]["errors"] == 0
    assert report["meta"]["cache_hits"] == kept and report["meta"]["scored_now"] == n - kept
    assert f"{n} rows" in err and "from the cache" in err


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_five_hundred_answers_with_the_shipped_probe(tmp_path, repo_root):
    """≥ 500 answers through the command with the shipped probe, and the page in Chromium (its time:
    benchmarks/bench_monitor.py).  SPANUQ_SCREENSHOT_DIR=docs writes docs/monitor.png."""
    from browser import load

    src = tmp_path / "answers.jsonl"
    n = write_answers(src)
    assert n >= 500
    out = tmp_path / "report"
    env = {**os.environ, "PYTHONPATH": str(repo_root)}
    r = subprocess.run([sys.executable, "-m", "spanuq.cli", "monitor", str(src), "-O", str(out), "--model", "shipped",
                        "--no-progress"], env=env, capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["meta"]["rows"] == n and report["overall"]["scored"] + report["overall"]["unverified"] == n
    groups = {g["value"]: g for g in report["groups"]["variant"]}
    assert groups["reference"]["n"] + groups["other reference"]["n"] == n - 266
    shot = Path(os.environ.get("SPANUQ_SCREENSHOT_DIR", tmp_path)) / "monitor.png"
    page = load((out / "report.html").as_uri(), screenshot=shot, size=(1100, 2000))
    assert not page.console and "The most doubtful answers" in page.dom
