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
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from collections import deque
from importlib import import_module
from pathlib import Path
from typing import Any

from ..config import Config
from .kernels import pin_cpu_kernels

CODE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding this `spanuq` package


def code_env(**extra: str) -> dict[str, str]:
    """This process's environment, with this code first on ``PYTHONPATH`` (a child imports the code
    its parent runs, e.g. a flow run's clone, not the environment's copy)."""
    pythonpath = os.pathsep.join(p for p in (str(CODE_ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": pythonpath, **extra}


class ChildFailed(RuntimeError):
    """The child process exited with an error (its output says why)."""


def _relay(stream, tail: deque) -> None:
    """The child's stderr (logs, progress) passed on as it comes; its last lines kept for the error."""
    for line in stream:
        sys.stderr.write(line)
        tail.append(line)


def run_in_child(target: str, cfg: Config, kwargs: dict[str, Any] | None = None, capture: bool = False) -> Any:
    """``module:function(cfg, **kwargs)`` in a fresh process; its result, as JSON (a `Path` comes back as
    a string).  ``capture``: keep the child's stdout and print it here (Prefect's ``log_prints`` logs it);
    otherwise it goes straight to this process's stdout."""
    with tempfile.TemporaryDirectory(prefix="spanuq-child-") as tmp:
        job, result = Path(tmp) / "job.json", Path(tmp) / "result.json"
        job.write_text(json.dumps({"target": target, "config": cfg.model_dump(mode="json"),
                                   "kwargs": kwargs or {}, "result": str(result)}))
        proc = subprocess.Popen([sys.executable, "-m", "spanuq.pipeline.child", str(job)], env=code_env(),
                                stdout=subprocess.PIPE if capture else None, stderr=subprocess.PIPE, text=True)
        tail: deque[str] = deque(maxlen=20)
        relay = threading.Thread(target=_relay, args=(proc.stderr, tail), daemon=True)
        relay.start()
        out = proc.stdout.read() if capture else ""
        proc.wait()
        relay.join()
        if out:
            print(out, end="")
        if proc.returncode != 0:
            last = next((line.strip() for line in reversed(tail) if line.strip()), "(no output)")
            raise ChildFailed(f"{target} failed in its own process (exit status {proc.returncode}): {last}")
        return json.loads(result.read_text())


def main(argv: list[str] | None = None) -> int:
    import logging

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
