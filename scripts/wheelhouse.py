"""The wheels of the scoring install (`pip install ".[llamacpp]"`), gathered once so it can be installed offline.

    python scripts/wheelhouse.py [--dir ~/.cache/spanuq/wheels/light] [--check]

Walks the requirements of the installed ``spanuq`` (its core ``Requires-Dist`` and those of the
``llamacpp`` extra, the offline default backbone, which the README's CPU command installs through
requirements/torch-cpu.txt) through the distributions installed in this environment, and makes sure
the wheel of each, at the installed version, is in ``--dir`` (``pip download --no-deps name==version``,
from the indexes pip is configured with).  llama-cpp-python is left out: its portable wheel is built by
scripts/setup.sh into its own cache.  tests/test_install.py then installs the built spanuq
wheel into a fresh venv with ``pip install --no-index --find-links <dir> --find-links <llama
cache>``: no network.  ``--check`` only lists what is missing (exit 1 when something is).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.version import Version

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "spanuq" / "wheels"
LIGHT = CACHE / "light"
BUILT_APART = {"llama-cpp-python", "spanuq"}  # not downloaded: built here (scripts/setup.sh) or by the test
SCORING_EXTRAS = ("llamacpp",)  # the scoring install: spanuq's core and the offline default backbone


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(root: str = "spanuq", extras: tuple[str, ...] = SCORING_EXTRAS) -> dict[str, str]:
    """{canonical name: installed version} of ``root``'s core requirements and its ``extras``', transitively."""
    env = default_environment()
    todo, seen = [(root, frozenset(extras))], {}
    while todo:
        name, extras = todo.pop()
        key = canonical(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise SystemExit(f"{name} is not installed here: run `make setup` first") from None
        first = key not in seen
        seen[key] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            wanted = [{**env, "extra": e} for e in extras] if extras else [{**env, "extra": ""}]
            if req.marker is not None and not any(req.marker.evaluate(w) for w in wanted):
                continue
            if first or req.extras:
                todo.append((req.name, frozenset(req.extras)))
    return seen


def wheels(directory: Path) -> set[tuple[str, str]]:
    """(canonical name, version) of the wheels in ``directory``."""
    out = set()
    for f in directory.glob("*.whl") if directory.is_dir() else []:
        name, version = f.name[:-4].split("-")[:2]
        out.add((canonical(name), str(Version(version))))
    return out


def missing(directory: Path) -> dict[str, str]:
    """The closure's wheels not in ``directory``."""
    there = wheels(directory)
    return {n: v for n, v in closure().items() if n not in BUILT_APART and (n, str(Version(v))) not in there}


def build_wheel(repo: Path, out: Path) -> Path:
    """The spanuq wheel, built offline from a copy of what it packages (the repository stays clean)."""
    import shutil
    import subprocess
    import sys

    src = out / "src"
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (repo / name).exists():
            src.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / name, src / name)
    shutil.copytree(repo / "spanuq", src / "spanuq", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(out / "dist"), str(src)], check=True, capture_output=True, timeout=600)
    return next((out / "dist").glob("spanuq-*.whl"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=LIGHT)
    ap.add_argument("--check", action="store_true", help="only list the missing wheels")
    args = ap.parse_args()
    todo = missing(args.dir)
    if args.check or not todo:
        for n, v in sorted(todo.items()):
            print(f"missing: {n}=={v}")
        return 1 if todo else 0
    args.dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "download", "--quiet", "--no-deps",
           "--only-binary", ":all:", "-d", str(args.dir), *[f"{n}=={v}" for n, v in sorted(todo.items())]]
    out = subprocess.run(cmd)
    if out.returncode:  # one at a time, to name what failed (an sdist-only package is built into a wheel)
        for n, v in sorted(missing(args.dir).items()):
            r = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "wheel", "--quiet",
                                "--no-deps", "-w", str(args.dir), f"{n}=={v}"])
            if r.returncode:
                print(f"wheelhouse: could not get {n}=={v}", file=sys.stderr)
    left = missing(args.dir)
    print(f"wheelhouse: {len(closure()) - len(left)} wheels in {args.dir}" + (f", {len(left)} missing" if left else ""))
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
