"""Real servers and workers for the orchestration tests, each stopped with its process group."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]
QUIET = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_TELEMETRY_ENABLE_RESOURCE_METRICS": "false",
         "PREFECT_LOGGING_LEVEL": "WARNING", "MLFLOW_DISABLE_TELEMETRY": "true", "PREFECT_WORKER_QUERY_SECONDS": "2",
         "PREFECT_WORKER_PREFETCH_SECONDS": "2"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float = 120, proc: subprocess.Popen | None = None, log: Path | None = None) -> bytes:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.read()
        except OSError:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{url}: server exited ({proc.returncode}): {log.read_text()[-2000:] if log else ''}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} not up after {timeout} s")
            time.sleep(0.5)


@contextmanager
def process(cmd: list[str], env: dict, log: Path, cwd: Path | None = None):
    """Start ``cmd`` in its own session; on exit SIGTERM its group, then SIGKILL what is left."""
    with open(log, "ab") as f:
        proc = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True)
    try:
        yield proc
    finally:
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
                os.killpg(proc.pid, signal.SIGKILL)  # workers leave flow-run children behind
            except (subprocess.TimeoutExpired, ProcessLookupError):
                continue
            break


def cli(args: list[str], env: dict, timeout: float = 600, cwd: Path | None = None) -> str:
    r = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if r.returncode:
        raise RuntimeError(f"{' '.join(args)} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r.stdout


@contextmanager
def prefect_server(home: Path, env: dict):
    port = free_port()
    env = {**env, **QUIET, "PREFECT_HOME": str(home), "PREFECT_API_URL": f"http://127.0.0.1:{port}/api"}
    home.mkdir(parents=True, exist_ok=True)
    log = home / "server.log"
    # started in the repository, as a user does: its pyproject.toml turns on log streaming (`--watch` prints logs)
    with process([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)], env, log,
                 cwd=REPO) as p:
        wait_http(f"http://127.0.0.1:{port}/api/health", 180, p, log)
        yield env


@contextmanager
def mlflow_server(root: Path, env: dict):
    port = free_port()
    root.mkdir(parents=True, exist_ok=True)
    log = root / "mlflow-server.log"
    cmd = [str(BIN / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
           "--artifacts-destination", str(root / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
           "--workers", "1"]
    with process(cmd, env, log, cwd=root) as p:
        wait_http(f"http://127.0.0.1:{port}/health", 180, p, log)
        yield f"http://127.0.0.1:{port}"


def run_json(args: list[str], env: dict) -> dict:
    return json.loads(cli(args, env))


@contextmanager
def scoring_service(uq, upstream=None, **score):
    """`spanuq serve`'s app around ``uq`` in a real uvicorn server on a free loopback port: yields (url, app).
    ``score``: settings of the service that differ from ``uq.cfg.score`` (``body_timeout_s=2``);
    ``upstream``: the OpenAI-compatible server that answers (`spanuq serve --upstream`)."""
    import threading

    import httpx
    import uvicorn

    from spanuq.score.service import create_app

    app = create_app(uq, uq.cfg.score.model_copy(update=score) if score else None, upstream=upstream)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.config.port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.2)
    try:
        yield url, app
    finally:
        server.should_exit = True
        thread.join(timeout=30)
