"""`run_in_child`, the one process per GPU stage (spanuq/pipeline/child.py): its process group ends with
the call however the call ends, and its output arrives while it runs.  Real processes throughout: a
parent process, the child, a grandchild that stands for vLLM's EngineCore."""
from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"


@pytest.fixture(autouse=True)
def targets_importable(monkeypatch):
    """The child imports `child_targets` (tests/) by its name."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH")) if p))


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to reap it counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def wait_for(path: Path, seconds: float = 60) -> list[int]:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)
    return json.loads(path.read_text())


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


PARENT = """
import signal, sys
from spanuq.config import Config
from spanuq.pipeline.child import run_in_child

def fail(signum, frame):
    raise RuntimeError("the parent failed while its child ran")

signal.signal(signal.SIGUSR1, fail)
run_in_child("child_targets:sleeps_over_a_sleeping_grandchild", Config(), {"pids": sys.argv[1]}, capture=True)
"""


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGKILL],
                         ids=["ctrl-c", "cancelled (SIGTERM)", "raises", "killed"])
def test_a_stage_process_and_what_it_started_end_with_the_parent(tmp_path, how):
    """Ctrl-C (KeyboardInterrupt), a Prefect cancellation (SIGTERM to the flow-run process), an exception
    raised while waiting, or the parent killed outright: the child and its grandchild end too, so no
    EngineCore is left holding the card."""
    pids_file = tmp_path / "pids.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)])}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(pids_file)], env=env, cwd=tmp_path,
                              stderr=subprocess.PIPE)
    pids = []
    try:
        pids = wait_for(pids_file)
        assert all(alive(p) for p in pids)
        parent.send_signal(how)
        parent.wait(timeout=60)
        assert gone_within(pids, 20), f"left running after the parent ended: {[p for p in pids if alive(p)]}"
    finally:
        parent.kill()
        parent.wait()
        kill_all(pids)
    if how == signal.SIGUSR1:
        assert b"the parent failed while its child ran" in parent.stderr.read()


def test_the_childs_output_is_shown_while_it_runs(make_cfg, tmp_path):
    """A line the child prints reaches the parent's stdout (``print``: what Prefect's log_prints logs)
    while the child still runs, not when the stage ends."""
    from spanuq.pipeline.child import run_in_child

    seen = tmp_path / "seen"

    class Screen(io.StringIO):
        def write(self, s: str) -> int:
            if "progress: 1 of 2 prompts" in s:
                seen.touch()
            return super().write(s)

    screen = Screen()
    with contextlib.redirect_stdout(screen):
        out = run_in_child("child_targets:prints_then_waits_to_be_seen", make_cfg(), {"seen": str(seen)},
                           capture=True)
    assert out == "seen while running"
    assert screen.getvalue() == "progress: 1 of 2 prompts\n"


def test_a_grandchild_holding_the_pipe_does_not_keep_the_parent_waiting(make_cfg, tmp_path):
    """The child returns while a process it started (in a session of its own, out of reach of the group's
    end) keeps the pipe open: the call returns the child's result in seconds, its output shown."""
    from spanuq.pipeline.child import run_in_child

    pids_file, got = tmp_path / "pids.json", {}
    screen = io.StringIO()

    def call():
        with contextlib.redirect_stdout(screen):
            got["out"] = run_in_child("child_targets:returns_leaving_the_pipe_open", make_cfg(),
                                      {"pids": str(pids_file)}, capture=True)

    caller = threading.Thread(target=call, daemon=True)
    t0 = time.monotonic()
    caller.start()
    try:
        caller.join(timeout=30)
        assert not caller.is_alive(), "run_in_child waited for the end of a pipe a grandchild holds"
    finally:
        if pids_file.exists():
            kill_all(json.loads(pids_file.read_text())[1:])
        caller.join(timeout=30)
    assert got["out"] == "returned" and "the answer\n" in screen.getvalue()
    assert time.monotonic() - t0 < 30
