"""Stage functions for tests/test_child.py, run by `spanuq.pipeline.child.run_in_child` in its child
process: each stands for a GPU stage's shape (a process under the stage, output while it works)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

SLEEP = [sys.executable, "-c", "import time; time.sleep(300)"]


def _write_pids(path: str, grandchild: subprocess.Popen) -> None:
    tmp = Path(path + ".tmp")
    tmp.write_text(json.dumps([os.getpid(), grandchild.pid]))
    tmp.rename(path)  # whole, for the test that waits on it


def sleeps_over_a_sleeping_grandchild(cfg, pids: str) -> None:
    """A stage with a process under it that holds on (vLLM's EngineCore), both waiting for minutes."""
    _write_pids(pids, subprocess.Popen(SLEEP))
    time.sleep(300)


def prints_then_waits_to_be_seen(cfg, seen: str, wait_s: float = 20.0) -> str:
    """A stage's progress line, then the stage goes on until the parent has shown that line (the file
    ``seen`` appears) or ``wait_s`` passes."""
    print("progress: 1 of 2 prompts", flush=True)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if Path(seen).exists():
            return "seen while running"
        time.sleep(0.05)
    return "not seen while running"


def returns_leaving_the_pipe_open(cfg, pids: str) -> str:
    """A stage that returns while a process it started, in a session of its own, keeps its stdout and
    stderr open for minutes."""
    _write_pids(pids, subprocess.Popen(SLEEP, start_new_session=True))
    print("the answer", flush=True)
    return "returned"
