"""Start and stop the real llama.cpp OpenAI-compatible server on the shipped GGUF.

``python -m llama_cpp.server`` from the PyPI package ``llama-cpp-python``
(``pip install 'spanuq[server]'``).  Used by `spanuq llama-server`, by the server
generation backend's tests and by the judge tests.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


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


class LlamaCppServer:
    """Context manager: ``with LlamaCppServer(gguf) as srv: srv.base_url``."""

    def __init__(self, model_path: str | Path, port: int | None = None, host: str = "127.0.0.1",
                 n_ctx: int = 2048, n_threads: int | None = None, model_alias: str = "smollm2",
                 log_path: str | Path | None = None, startup_timeout_s: float = 120.0):
        self.model_path = str(model_path)
        self.host, self.port = host, port or free_port()
        # one core is left to the client (tokenising, the stage itself): on 2 cores llama.cpp
        # decodes 50 tok/s with 1 thread and 31 tok/s with 2 (benchmarks, 2026-11)
        self.n_ctx, self.n_threads = n_ctx, n_threads or max(1, (os.cpu_count() or 2) - 1)
        self.model_alias = model_alias
        self.log_path = log_path
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> "LlamaCppServer":
        try:
            import llama_cpp  # noqa: F401
        except ImportError as e:
            raise RuntimeError("the llama.cpp server needs `pip install 'spanuq[server]'`") from e
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", self.model_path,
               "--host", self.host, "--port", str(self.port), "--n_ctx", str(self.n_ctx),
               "--n_threads", str(self.n_threads), "--model_alias", self.model_alias]
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=_die_with_parent)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited with code {self.proc.returncode}: {' '.join(cmd)}")
            try:
                if httpx.get(f"{self.base_url}/models", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"llama.cpp server not healthy after {self.startup_timeout_s}s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def __enter__(self) -> "LlamaCppServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
