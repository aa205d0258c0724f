"""One GPU stage, one process: a stage function called in a fresh Python process.

vLLM reserves a share of each card at start-up and refuses to start beside a model another
library holds; a transformers model's memory stays in torch's cache (and the CUDA context on
the card) until its process ends.  So whatever loads a backbone on behalf of a long-lived
process — a Prefect flow's stage tasks, the sweep coordinator's feature extraction, the
baselines' decoding timer — calls it through `run_in_child`, and the memory is the card's
again when the child exits.

    run_in_child("spanuq.features.stage:run_extract", cfg, {"progress": False})

The child gets the resolved `Config` (JSON) and keyword arguments (JSON), imports the code
this process runs (not another installed copy) and writes the function's result as JSON.

The child leads a process group of its own (a new session), and the group ends with the call: vLLM's
EngineCore and its workers are processes under the child, and one left running holds the card after
the stage.  Whatever way the call ends — the child's result, an exception raised here, Ctrl-C, a
Prefect cancellation (SIGTERM to this process) — the group gets SIGTERM, then SIGKILL after
``GRACE_S``; a child whose parent is killed outright (SIGKILL) ends its own group (`_watch_parent`).
Its output is passed on line by line as it comes (vLLM's progress while it decodes, not at the end),
until the child has exited: a grandchild that inherited the pipe does not keep this process waiting.
"""
from __future__ import annotations

import codecs
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from contextlib import contextmanager
from importlib import import_module
from pathlib import Path
from typing import Any, Callable, Iterator

from ..config import Config
from .kernels import pin_cpu_kernels

CODE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding this `spanuq` package
GRACE_S = 10.0  # SIGTERM to SIGKILL: vLLM's shutdown frees its engine's memory in a few seconds
DRAIN_S = 2.0  # after the child exits, how long its last output may take to be read
PARENT_POLL_S = 1.0  # how often a child looks whether its parent is still there


def code_env(**extra: str) -> dict[str, str]:
    """This process's environment, with this code first on ``PYTHONPATH`` (a child imports the code
    its parent runs, e.g. a flow run's clone, not the environment's copy)."""
    pythonpath = os.pathsep.join(p for p in (str(CODE_ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": pythonpath, **extra}


class ChildFailed(RuntimeError):
    """The child process exited with an error (its output says why)."""


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of the group belongs to someone else: still there
        return True
    return True


def end_group(proc: subprocess.Popen, grace_s: float = GRACE_S) -> None:
    """SIGTERM to every process of the child's group (the child leads it), SIGKILL to what is left after
    ``grace_s``; the child is reaped.  Nothing to do when the group has ended."""
    pgid = proc.pid
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        proc.poll()
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()  # the child reaped: a zombie still counts as a member of the group
        if not _group_alive(pgid):
            return
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


@contextmanager
def _sigterm_raises(proc: subprocess.Popen) -> Iterator[None]:
    """SIGTERM to this process ends the child's group first.  Python's default on SIGTERM is to die
    on the spot, no ``finally`` run, so the handler raises ``SystemExit`` instead (or calls the handler
    that was there: Prefect's).  Signal handlers belong to the main thread: elsewhere nothing changes."""
    previous = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread() or previous is signal.SIG_IGN:
        yield
        return

    def on_sigterm(signum, frame):
        end_group(proc)
        if callable(previous):
            return previous(signum, frame)
        raise SystemExit(128 + signum)  # the exit status SIGTERM's default gives, after the finally blocks

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _Lines:
    """One of the child's pipes, read without blocking and passed on a whole line at a time."""

    def __init__(self, stream, sink: Callable[[str], None]):
        self.fd, self.sink = stream.fileno(), sink
        self.decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode
        self.pending = ""
        os.set_blocking(self.fd, False)

    def read(self) -> bool:
        """Pass on the complete lines that have arrived; False at the end of the stream."""
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return True
        text = self.pending + self.decode(data, final=not data)
        *lines, self.pending = text.split("\n")
        for line in lines:
            self.sink(line + "\n")
        if not data:
            self.flush()
        return bool(data)

    def flush(self) -> None:
        if self.pending:
            self.sink(self.pending)
            self.pending = ""


def _pump(proc: subprocess.Popen, pipes: list[_Lines]) -> None:
    """The child's output passed on as it comes, until the child exits; then what it had written is
    read (at most ``DRAIN_S``), not the end of the stream, which a grandchild may hold open."""
    sel = selectors.DefaultSelector()
    for p in pipes:
        sel.register(p.fd, selectors.EVENT_READ, p)
    try:
        while sel.get_map() and proc.poll() is None:
            for key, _ in sel.select(timeout=0.1):
                if not key.data.read():
                    sel.unregister(key.fd)
        deadline = time.monotonic() + DRAIN_S
        while sel.get_map() and time.monotonic() < deadline:
            ready = sel.select(timeout=0)
            if not ready:
                break
            for key, _ in ready:
                if not key.data.read():
                    sel.unregister(key.fd)
        proc.wait()
    finally:
        sel.close()
        for p in pipes:
            p.flush()


def _to_stderr(tail: deque) -> Callable[[str], None]:
    def sink(line: str) -> None:
        sys.stderr.write(line)
        sys.stderr.flush()
        tail.append(line)
    return sink


def _printed(line: str) -> None:
    print(line, end="", flush=True)  # print: Prefect's log_prints logs each line


def run_in_child(target: str, cfg: Config, kwargs: dict[str, Any] | None = None, capture: bool = False) -> Any:
    """``module:function(cfg, **kwargs)`` in a fresh process; its result, as JSON (a `Path` comes back as
    a string).  ``capture``: the child's stdout printed here line by line (Prefect's ``log_prints`` logs
    it); otherwise it goes straight to this process's stdout.  Its stderr is passed on as it comes."""
    with tempfile.TemporaryDirectory(prefix="spanuq-child-") as tmp:
        job, result = Path(tmp) / "job.json", Path(tmp) / "result.json"
        job.write_text(json.dumps({"target": target, "config": cfg.model_dump(mode="json"),
                                   "kwargs": kwargs or {}, "result": str(result)}))
        proc = subprocess.Popen([sys.executable, "-m", "spanuq.pipeline.child", str(job)], env=code_env(),
                                stdout=subprocess.PIPE if capture else None, stderr=subprocess.PIPE,
                                start_new_session=True)
        tail: deque[str] = deque(maxlen=20)
        try:
            with _sigterm_raises(proc):
                pipes = [_Lines(proc.stderr, _to_stderr(tail))]
                if capture:
                    pipes.append(_Lines(proc.stdout, _printed))
                _pump(proc, pipes)
        finally:
            end_group(proc)  # what the child left behind, or the child itself when this call was interrupted
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        if proc.returncode != 0:
            last = next((line.strip() for line in reversed(tail) if line.strip()), "(no output)")
            raise ChildFailed(f"{target} failed in its own process (exit status {proc.returncode}): {last}")
        return json.loads(result.read_text())


def _watch_parent(parent: int) -> None:
    """A daemon thread: when the parent is gone (killed outright, no chance to end this group), this
    process ends its own group — vLLM's EngineCore under it included."""
    def watch():
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os.killpg(0, signal.SIGTERM)

    if os.getpgid(0) != os.getpid():  # not the leader of its own group (not started by `run_in_child`)
        return
    threading.Thread(target=watch, name="spanuq-parent-watch", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    import logging

    _watch_parent(os.getppid())
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    job = json.loads(Path((argv or sys.argv[1:])[0]).read_text())
    module, fn = job["target"].split(":")
    cfg = Config.model_validate(job["config"])
    pin_cpu_kernels(cfg.backbone.cpu_kernels)  # before the stage's first tensor operation
    out = getattr(import_module(module), fn)(cfg, **job["kwargs"])
    Path(job["result"]).write_text(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
