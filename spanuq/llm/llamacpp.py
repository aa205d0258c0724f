"""Start and stop the real llama.cpp OpenAI-compatible server on the shipped GGUF.

``python -m llama_cpp.server`` from the PyPI package ``llama-cpp-python``
(``pip install 'llama-cpp-python[server]'``), started through `spanuq.llm.llamacpp_server` so that every
request is decoded from an empty KV cache: a greedy answer does not depend on what the server served
before.  Used by `spanuq llama-server`, the generate stage, the score API and the tests.

A server is trusted only once it has **proved itself**: ``/v1/models`` answering is not
enough (a llama.cpp build for another CPU answers it and then dies on the first prompt of
four tokens or more), so `start` also completes a real chat prompt of >= 20 tokens.  The
process is reaped the moment it exits (a watcher thread waits on it), so a crashed server
never lingers as a zombie, and `crash_report` says how it ended — exit status or signal and
the tail of its log (the server runs with Python's faulthandler, so a segfault leaves the
native and Python stacks there) — for callers to raise instead of "cannot reach".
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from ..pipeline.cpus import available_cpus

# A chat prompt of >= 20 tokens: the proof that the build can run a real forward pass here.
PROOF_MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant. Answer factually in one short sentence."},
    {"role": "user", "content": "Which river flows through the capital city of France, and which sea does it reach?"},
]


# `python -m llama_cpp.server` with each request decoded from an empty KV cache (that module's docstring)
SERVER_MODULE = "spanuq.llm.llamacpp_server"


def _child_env() -> dict:
    """This environment; run from a checkout, with the checkout first on the child's PYTHONPATH, so the server
    imports this spanuq (a process that put it on ``sys.path`` itself, as the benchmarks do, included)."""
    env, root = dict(os.environ), Path(__file__).resolve().parents[2]
    if root.name not in ("site-packages", "dist-packages"):
        env["PYTHONPATH"] = os.pathsep.join([str(root)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


class ServerCrashed(RuntimeError):
    """A llama.cpp server that this process started has died (exit status or signal + log tail)."""


def _die_with_parent() -> None:
    """In the child, before exec: Linux sends it SIGTERM when the process that started it dies,
    even by SIGKILL, so a killed `dvc repro` never leaves an orphaned server holding the CPU."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def describe_exit(returncode: int) -> str:
    """``exited with status 1`` / ``was killed by SIGSEGV (signal 11)``."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name} (signal {-returncode})"
    return f"exited with status {returncode}"


def log_tail(path: str | Path | None, lines: int = 15, chars: int = 2500) -> str:
    """The end of a server log.  After a fatal signal, faulthandler's report is what matters:
    the lines before it, its "Fatal Python error: ..." line and the crashing thread's top frames."""
    if not path or not Path(path).exists():
        return "(no log)"
    all_lines = Path(path).read_text(errors="replace").rstrip().splitlines()
    if not all_lines:
        return "(the log is empty)"
    fatal = [i for i, line in enumerate(all_lines) if line.startswith("Fatal Python error")]
    if fatal:
        i = fatal[-1]
        current = next((j for j in range(i, len(all_lines)) if all_lines[j].startswith("Current thread")), None)
        stack = all_lines[current: current + 7] if current is not None else []
        return "\n".join(all_lines[max(0, i - 4): i + 1] + stack)[-chars:]
    return "\n".join(all_lines[-lines:])[-chars:]


class LlamaCppServer:
    """Context manager: ``with LlamaCppServer(gguf) as srv: srv.base_url``."""

    def __init__(self, model_path: str | Path, port: int | None = None, host: str = "127.0.0.1",
                 n_ctx: int = 2048, n_threads: int | None = None, model_alias: str = "smollm2",
                 log_path: str | Path | None = None, startup_timeout_s: float = 120.0):
        self.model_path = str(model_path)
        self.host, self.port = host, port or free_port()
        # one core is left to the client (tokenising, the stage itself): on a small machine llama.cpp
        # decodes faster with one thread fewer than the cores than with all of them
        self.n_ctx, self.n_threads = n_ctx, n_threads or max(1, available_cpus() - 1)
        self.model_alias = model_alias
        # a log always exists: it is what a crash report shows
        self._own_log = log_path is None  # a temporary log is removed when the server is stopped, kept when it crashed
        self.log_path = Path(log_path) if log_path else Path(tempfile.gettempdir()) / f"spanuq-llama-server-{os.getpid()}-{self.port}.log"
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen | None = None
        self._exited = threading.Event()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "LlamaCppServer":
        try:
            import llama_cpp  # noqa: F401
        except ImportError as e:
            raise RuntimeError("the llama.cpp server needs llama-cpp-python, which `pip install .` and the gpu extra "
                               "leave out: pip install 'spanuq[llamacpp]' (a CPU install)") from e
        cmd = [sys.executable, "-X", "faulthandler", "-m", SERVER_MODULE, "--model", self.model_path,
               "--host", self.host, "--port", str(self.port), "--n_ctx", str(self.n_ctx),
               "--n_threads", str(self.n_threads), "--model_alias", self.model_alias]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                         preexec_fn=_die_with_parent, env=_child_env())
        self._exited.clear()
        threading.Thread(target=self._reap, args=(self.proc,), name=f"reap-llama-{self.proc.pid}", daemon=True).start()
        try:
            self._wait_listening()
            self.prove()
        except BaseException:
            self.stop()
            raise
        return self

    def _reap(self, proc: subprocess.Popen) -> None:
        proc.wait()  # reaps the child the moment it exits: no zombie, whoever started it
        self._exited.set()

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            self.raise_if_dead()
            try:
                if httpx.get(f"{self.base_url}/models", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"llama.cpp server not listening after {self.startup_timeout_s}s; "
                           f"the end of its log {self.log_path}:\n{log_tail(self.log_path)}")

    def prove(self, timeout_s: float = 120.0) -> str:
        """Complete a real chat prompt of >= 20 tokens; the server's reply text.  Raises `ServerCrashed`
        if the process dies doing it, RuntimeError if it answers something else than a completion."""
        try:
            r = httpx.post(f"{self.base_url}/chat/completions", timeout=timeout_s, json={
                "model": self.model_alias, "messages": PROOF_MESSAGES, "max_tokens": 8, "temperature": 0.0})
        except httpx.TransportError as e:
            self.raise_if_dead(grace_s=5.0)
            raise RuntimeError(f"the llama.cpp server at {self.base_url} did not complete a chat prompt "
                               f"({type(e).__name__}); the end of its log {self.log_path}:\n{log_tail(self.log_path)}") from None
        if r.status_code != 200:
            raise RuntimeError(f"the llama.cpp server answered a chat prompt with HTTP {r.status_code}: {r.text[:300]}")
        data = r.json()
        usage = data.get("usage") or {}
        if int(usage.get("prompt_tokens") or 0) < 20 or not data.get("choices"):
            raise RuntimeError(f"the llama.cpp server's proof answer is not a completion of the prompt: {str(data)[:300]}")
        return data["choices"][0].get("message", {}).get("content") or ""

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        crashed = self._exited.is_set()
        if not crashed:
            for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                if self._exited.wait(wait):
                    break
        self._exited.wait(10)
        if self._own_log and not crashed:
            self.log_path.unlink(missing_ok=True)

    # ------------------------------------------------------------------ health
    @property
    def returncode(self) -> int | None:
        return self.proc.returncode if self.proc is not None and self._exited.is_set() else None

    def alive(self) -> bool:
        return self.proc is not None and not self._exited.is_set()

    def crash_report(self, grace_s: float = 0.0) -> str | None:
        """How the server ended, if it has (waiting up to ``grace_s`` for a dying one); None while it runs."""
        if self.proc is None or not self._exited.wait(grace_s):
            return None
        return (f"the llama.cpp server (pid {self.proc.pid}, {Path(self.model_path).name}) "
                f"{describe_exit(self.proc.returncode)}; the end of its log {self.log_path}:\n{log_tail(self.log_path)}")

    def raise_if_dead(self, grace_s: float = 0.0) -> None:
        """Raise `ServerCrashed` if the server has exited (a transport error often comes a moment
        before the exit is seen: ``grace_s`` waits that long for it)."""
        report = self.crash_report(grace_s)
        if report is not None:
            raise ServerCrashed(report)

    def __enter__(self) -> "LlamaCppServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def selfcheck(model_path: str | Path | None = None, n_threads: int = 1) -> int:
    """Start the server on the shipped GGUF, prove it, stop it; 0 if this machine runs the build.

    ``python -m spanuq.llm.llamacpp`` (scripts/setup.sh runs it after installing)."""
    if model_path is None:
        from .loading import gguf_path
        from .presets import get_preset

        model_path = gguf_path(get_preset("smollm2-135m"))
    t0 = time.perf_counter()
    try:
        with LlamaCppServer(model_path, n_threads=n_threads, startup_timeout_s=180) as srv:
            reply = srv.prove()
    except (ServerCrashed, RuntimeError, TimeoutError) as e:
        print(f"llama.cpp self-check FAILED: {e}", file=sys.stderr)
        return 1
    print(f"llama.cpp self-check: a {Path(model_path).name} server completed a chat prompt "
          f"({reply.strip()[:40]!r}…) in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(selfcheck(sys.argv[1] if len(sys.argv) > 1 else None))
