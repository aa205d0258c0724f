"""benchmarks/gpu_path.py, the GPU script a borrowed card runs in minutes, tested without a GPU: its dry run
takes the same stages — each in a process of its own — on the CPU with every shape scaled down, and the
rule it exits by (a stage's memory released, the card back after it) reads its measurements."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def test_the_gpu_script_dry_run_extracts_and_trains_in_processes_of_their_own(tmp_path):
    out = subprocess.run([sys.executable, "benchmarks/gpu_path.py", "--dry-run", "--out", str(tmp_path)], cwd=REPO,
                         capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0] == "gpu_path on CPU: qwen3-14b, random weights, each stage in its own process"
    assert lines[1].split()[:3] == ["stage", "seconds", "process"] and lines[1].endswith("(GiB)")
    assert [line.split()[0] for line in lines[2:4]] == ["extract", "train"]
    extract, train = json.loads((tmp_path / "gpu_path.json").read_text())["stages"]
    assert extract["what"] == "qwen3-14b (scaled), d = 64, layers [2, 3], 8 answers x 24 tokens after 12, batch 4"
    assert train["what"].startswith("gpu-paper probe (scaled), 0.06M parameters, d = 64, batch 4, 4 steps")
    assert extract["peak_gib"] is None and train["card_after_gib"] is None  # no CUDA here: "-" in the table
    assert (tmp_path / "features.pt").exists()  # what extract handed to train


def test_a_stage_that_kept_memory_fails_the_gpu_script():
    from benchmarks.gpu_path import released, table

    row = {"stage": "extract", "seconds": 41.0, "process_s": 55.2, "weights_gib": 27.5, "peak_gib": 38.1,
           "estimate_gib": 40.2, "after_release_gib": 0.01, "card_before_gib": 0.5, "card_after_gib": 0.6,
           "what": "qwen3-14b", "rate": "9,000 answer tokens/s"}
    assert released(row)
    assert not released(row | {"after_release_gib": 27.5})  # the model still referenced after release
    assert not released(row | {"card_after_gib": 28.0})  # a process under the stage kept the card
    assert table([row]).splitlines()[1].split() == ["extract", "41.0", "55.2", "27.50", "38.10", "40.20", "0.01",
                                                    "0.50", "0.60"]
