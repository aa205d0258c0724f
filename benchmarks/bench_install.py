"""Install size and time: the scoring install (`pip install .`) against the full one (`make setup`'s extras).

    python benchmarks/bench_install.py [--only light|full] [--keep DIR]

Each install goes into a fresh venv in a temporary folder, from the wheels at hand: the scoring
install offline from the wheels `make setup` gathered (scripts/wheelhouse.py) and its llama.cpp
build; the full install as scripts/setup.sh does it (the CPU torch wheel first, the portable
llama.cpp wheel, then ``.[pipeline,orchestration,dev]`` from the configured indexes: it may
download).  Prints, per install: seconds, the venv's size on disk, and how many distributions
it holds.  The spanuq wheel is built once first (not counted).
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from wheelhouse import LIGHT, build_wheel, missing  # noqa: E402


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def llama_wheel() -> Path:
    found = sorted(LIGHT.parent.glob("llama-cpp-python-*/llama_cpp_python-*.whl"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise SystemExit("no llama.cpp wheel cached: run `make setup` first")
    return found[-1]


def pip(py: Path, *args: str) -> None:
    subprocess.run([str(py), "-m", "pip", "--disable-pip-version-check", "install", "-q", *args], check=True)


def install(kind: str, wheel: Path, root: Path) -> dict:
    venv = root / f"venv-{kind}"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    t0 = time.perf_counter()
    if kind == "light":
        pip(py, "--no-index", "--find-links", str(LIGHT), "--find-links", str(llama_wheel().parent), str(wheel))
    else:
        if shutil.which("nvidia-smi") is None:
            pip(py, "torch==2.13.0")
        pip(py, "--no-deps", str(llama_wheel()))
        pip(py, f"{wheel}[pipeline,orchestration,dev]")
    seconds = time.perf_counter() - t0
    listed = subprocess.run([str(py), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True,
                            check=True).stdout.split()
    return {"install": kind, "seconds": seconds, "bytes": du(venv), "distributions": len(listed)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["light", "full"], default=None)
    ap.add_argument("--keep", type=Path, default=None, help="build the venvs here and keep them")
    args = ap.parse_args()
    if args.only != "full" and missing(LIGHT):
        raise SystemExit(f"the scoring install's wheels are not all in {LIGHT}: run `make setup` first")
    root = args.keep or Path(tempfile.mkdtemp(prefix="spanuq-install-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        wheel = build_wheel(REPO, root)
        rows = [install(kind, wheel, root) for kind in ("light", "full") if args.only in (None, kind)]
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{'install':<8} {'time':>8} {'size':>9} {'packages':>9}")
    for r in rows:
        print(f"{r['install']:<8} {r['seconds']:>7.0f}s {r['bytes'] / 2**30:>7.2f}GB {r['distributions']:>9}")


if __name__ == "__main__":
    main()
