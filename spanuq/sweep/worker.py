"""What a worker machine runs: which checkout the code comes from, and whether its Python has what that checkout needs.

A Prefect flow run of a deployment starts in a fresh clone of the repository at the
deployment's commit (``prefect.yaml``'s ``git_clone`` pull step); the clone comes first on
``sys.path``, so ``spanuq`` is imported from it, whatever copy the worker's environment holds.
The environment must hold the clone's dependencies: the install pull step
(``flows/worker_install.sh``) installs what `unmet` lists, or — with ``SPANUQ_REUSE_VENV`` —
only checks it.

    python -m spanuq.sweep.worker check          # exit 1 with the missing requirements and the fix
    python -m spanuq.sweep.worker requirements   # the checkout's requirements, one a line (pip -r)
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

CODE_ROOT = Path(__file__).resolve().parents[2]  # the checkout this module was imported from
WORKER_EXTRAS = ("orchestration", "llamacpp")  # flows, the sweep, the study's PostgreSQL client; the CPU backbone


def worker_extras() -> tuple[str, ...]:
    """The extras a worker installs: ``$SPANUQ_WORKER_EXTRAS`` (comma-separated; ``gpu`` on a GPU machine:
    vLLM and everything orchestration needs), else `WORKER_EXTRAS`."""
    env = os.environ.get("SPANUQ_WORKER_EXTRAS", "")
    return tuple(e.strip() for e in env.split(",") if e.strip()) or WORKER_EXTRAS


def requirements(root: Path = CODE_ROOT, extras: tuple[str, ...] | None = None) -> list[str]:
    """The checkout's dependencies (``pyproject.toml``) plus those of ``extras`` (default `worker_extras`),
    an extra that names others (``spanuq[pipeline]``) expanded into theirs."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    optional = project.get("optional-dependencies", {})
    reqs, todo, seen = list(project.get("dependencies", [])), list(extras or worker_extras()), set()
    while todo:
        extra = todo.pop(0)
        if extra in seen:
            continue
        seen.add(extra)
        if extra not in optional:
            raise ValueError(f"pyproject.toml has no extra {extra!r}; extras: {', '.join(optional)}")
        for text in optional[extra]:
            req = Requirement(text)
            if req.name == project["name"]:
                todo += sorted(req.extras)
            else:
                reqs.append(text)
    return list(dict.fromkeys(reqs))


def unmet(reqs: list[str]) -> list[str]:
    """The requirements this Python does not satisfy: ``"torch>=2.4 (installed: none)"``."""
    out = []
    for text in reqs:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate():
            continue
        try:
            have = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            out.append(f"{text} (installed: none)")
            continue
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            out.append(f"{text} (installed: {have})")
    return out


def git_commit(root: Path = CODE_ROOT) -> str | None:
    """The commit checked out at ``root`` (None outside a git checkout)."""
    r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def describe() -> dict[str, Any]:
    """Where this process's code and Python come from (logged at the start of every sweep flow run)."""
    import spanuq

    return {"spanuq": str(Path(spanuq.__file__).resolve()), "checkout": str(CODE_ROOT), "commit": git_commit(),
            "python": sys.executable, "unmet": unmet(requirements())}


def check_environment() -> dict[str, Any]:
    """`describe`, or a `RuntimeError` naming what this Python lacks and the command that installs it."""
    info = describe()
    if info["unmet"]:
        raise RuntimeError(
            f"this worker's Python ({sys.executable}) lacks what commit {info['commit']} needs: "
            f"{'; '.join(info['unmet'])}. Install it: `{sys.executable} -m spanuq.sweep.worker requirements | "
            f"{sys.executable} -m pip install -r /dev/stdin` (prefect.yaml's install step does this unless "
            "SPANUQ_REUSE_VENV is set)")
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m spanuq.sweep.worker", description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["check", "requirements"])
    args = ap.parse_args(argv)
    if args.command == "requirements":
        print("\n".join(requirements()))
        return 0
    try:
        info = check_environment()
    except RuntimeError as e:
        print(f"spanuq worker: {e}", file=sys.stderr)
        return 1
    print(f"spanuq worker: code {info['spanuq']} (commit {info['commit']}), python {info['python']}: "
          "every requirement met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
