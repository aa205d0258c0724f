"""What keeps the test split honest: settings chosen on validation, and one test read per probe.

* ``mushroom-settings/<probe sha256>.json``: every method's settings chosen by the
  validation run of that probe; the test run reads them and chooses nothing.
* ``mushroom-test-reads.jsonl``: one row per test read (probe sha256, date, output).  A
  second read for the same probe weights is refused unless forced, and a forced read is
  recorded and named in the output ("test read 2 of this probe").
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from ..pipeline.files import atomic_write_text, iter_jsonl, read_json, write_json


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def settings_path(bench_dir: Path, probe_sha: str) -> Path:
    return Path(bench_dir) / "mushroom-settings" / f"{probe_sha}.json"


def write_settings(bench_dir: Path, probe_sha: str, record: dict) -> Path:
    path = settings_path(bench_dir, probe_sha)
    write_json(path, {"probe_sha256": probe_sha, "chosen": now(), **record})
    return path


def read_settings(bench_dir: Path, probe_sha: str) -> dict:
    path = settings_path(bench_dir, probe_sha)
    if not path.exists():
        raise FileNotFoundError(f"no settings chosen on the validation split for this probe "
                                f"(sha256 {probe_sha[:12]}…, "
                                f"expected {path}): run `spanuq bench mushroom --split val` with the same probe first")
    return read_json(path)


def reads_path(bench_dir: Path) -> Path:
    return Path(bench_dir) / "mushroom-test-reads.jsonl"


def past_test_reads(bench_dir: Path, probe_sha: str) -> list[dict]:
    path = reads_path(bench_dir)
    return [r for r in iter_jsonl(path) if r.get("probe_sha256") == probe_sha] if path.exists() else []


def check_test_read(bench_dir: Path, probe_sha: str, force: bool) -> int:
    """The number this test read will have (1 for the first); raises if the split was already
    read for this probe and ``force`` is not set."""
    done = past_test_reads(bench_dir, probe_sha)
    if done and not force:
        last = done[-1]
        raise RuntimeError(f"the Mu-SHROOM test split was already read for this probe (sha256 {probe_sha[:12]}…) "
                           f"on {last.get('date')} ({last.get('output')}); it is read once per probe, so settings "
                           "cannot be tuned on it. Pass --force to read it again (the read is recorded and shown)")
    return len(done) + 1


def record_test_read(bench_dir: Path, probe_sha: str, row: dict) -> None:
    path = reads_path(bench_dir)
    old = path.read_text() if path.exists() else ""
    atomic_write_text(path, old + json.dumps({"probe_sha256": probe_sha, "date": now(), **row}) + "\n")
