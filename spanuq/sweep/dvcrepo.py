"""The DVC repository of a checkout, driven as a user drives it: ``dvc status / pull / push / commit``
through this Python's DVC (``python -m dvc``), ``dvc.lock`` and ``.dvc`` files read as YAML."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml


def dvc(args: list[str], root: Path, check: bool = True) -> subprocess.CompletedProcess:
    """``dvc ARGS`` in ``root`` with this Python's DVC (``python -m dvc``)."""
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    r = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=root, env=env, capture_output=True, text=True)
    if check and r.returncode:
        raise RuntimeError(f"`dvc {' '.join(args)}` failed in {root} ({r.returncode}): {(r.stderr or r.stdout).strip()[-2000:]}")
    return r


def status(args: list[str], root: Path) -> dict[str, Any]:
    r = dvc(["status", "--json", *args], root)
    return json.loads(r.stdout or "{}")


def cloud_status(root: Path, targets: list[str]) -> dict[str, str]:
    """``dvc status -c TARGETS``: {path: new | deleted | missing} for what differs from the remote; {} when clean."""
    return status(["-c", *targets], root) if targets else {}


def repo_root(start: Path | None = None) -> Path | None:
    """The DVC repository holding ``start`` (default: the working directory), or None."""
    p = (start or Path.cwd()).resolve()
    for d in (p, *p.parents):
        if (d / ".dvc").is_dir() and (d / "dvc.yaml").exists():
            return d
    return None


@lru_cache(maxsize=None)
def default_remote(root: Path) -> tuple[str, str] | None:
    """(name, url) of the repository's default DVC remote, or None (read once per process)."""
    name = dvc(["remote", "default"], root, check=False).stdout.strip()
    if not name:
        return None
    url = dvc(["config", f"remote.{name}.url"], root, check=False).stdout.strip()
    return name, url


def lock_outs(root: Path) -> dict[str, dict[str, Any]]:
    """Every output ``dvc.lock`` records: {path: {md5, size, nfiles, stage}}."""
    lock = root / "dvc.lock"
    if not lock.exists():
        return {}
    outs = {}
    for stage, entry in (yaml.safe_load(lock.read_text()) or {}).get("stages", {}).items():
        for o in entry.get("outs", []):
            outs[o["path"]] = {"md5": o.get("md5"), "size": o.get("size"), "nfiles": o.get("nfiles"), "stage": stage}
    return outs


def dvcfile_outs(path: Path) -> dict[str, Any]:
    return (yaml.safe_load(path.read_text()) or {}).get("outs", [{}])[0]


def files_size(root: Path, paths: list[str]) -> tuple[int, int]:
    """(files, bytes) of the files among ``paths`` (dvc status lists a folder and its files)."""
    files = [root / p for p in paths if (root / p).is_file()]
    return len(files), sum(f.stat().st_size for f in files)
