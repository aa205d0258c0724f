"""A newcomer's walk: the README's commands top to bottom, each checked against what the README shows.

    python scripts/readme_walk.py                  # every command is one its tool accepts (nothing loads)
    python scripts/readme_walk.py --run            # and the quick start, run from an empty folder
    python scripts/readme_walk.py --clone DIR      # all of it on a fresh clone of HEAD in DIR: make setup,
                                                   # the quick start, make repro against the results table

Accepted means: a ``spanuq`` command parses with spanuq's own parser, a ``make`` target exists,
``dvc exp run -S k=v`` keys validate against params.yaml, a ``pip install`` extra is declared, a
script exists and knows its flags, the Python example uses names `SpanUQ` and its results have.
The quick start (``--run``) runs each command as shown, in an empty folder holding ``answer.txt``:
``spanuq score`` (the backbone answers), ``--response @answer.txt`` against the README's terminal
block, ``--json`` against docs/score.schema.json, ``spanuq serve`` (health, score, page) and the
Python example.  ``--clone`` adds ``make setup`` and ``make repro`` on a clean clone and compares
the default run's test split with the README's results table: hours on a CPU.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOOLS = ("spanuq ", "make ", "dvc ", "pip install ", "python scripts/")


@dataclass
class Command:
    line: str  # as the README shows it (continuations joined, comment dropped)
    where: str  # "block" (a shell block) or "inline" (a code span in the text)


def _blocks_and_text(readme: str) -> list[tuple[str, str]]:
    """The README in order as (kind, text): ``bash``/``python``/other code blocks and the text between."""
    parts, pos = [], 0
    for m in re.finditer(r"^```(\w*)\n(.*?)^```\s*$", readme, flags=re.S | re.M):
        parts += [("text", readme[pos:m.start()]), (m.group(1) or "plain", m.group(2))]
        pos = m.end()
    return parts + [("text", readme[pos:])]


def commands(readme: str) -> list[Command]:
    """Every command the README shows a reader to type, in the order it shows them."""
    out: list[Command] = []
    for kind, text in _blocks_and_text(readme):
        if kind == "bash":
            for line in text.replace("\\\n", " ").splitlines():
                line = re.sub(r"\s+#.*$", "", line).strip()
                if line and not line.startswith(("#", "export ")):
                    out.append(Command(" ".join(line.split()), "block"))
        elif kind == "text":
            for span in re.findall(r"`([^`]+)`", text):
                span = " ".join(span.split())  # a code span may wrap
                span = re.sub(r"\s+\[[^\]]*\]", "", span)  # optional parts, as in `spanuq ablate [--cv K]`
                if span.startswith(TOOLS) and "|" not in span and "<" not in span:
                    out += [Command(part.strip(), "inline") for part in span.split(" && ")]  # `a && b`: two commands
    seen: set[str] = set()
    return [c for c in out if not (c.line in seen or seen.add(c.line))]  # each once, where it first appears


def python_example(readme: str) -> str:
    return next(text for kind, text in _blocks_and_text(readme) if kind == "python")


def _make_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(encoding="utf-8"), flags=re.M))


def _flags(argv: list[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in argv if a.startswith("-")]


def _parses(parser: argparse.ArgumentParser, argv: list[str]) -> bool:
    try:
        with open(os.devnull, "w") as quiet, contextlib.redirect_stderr(quiet):
            parser.parse_args(argv)
    except SystemExit:
        return False
    return True


def problem(cmd: Command) -> str | None:
    """Why the command's tool would not accept it as shown, or None."""
    argv = shlex.split(cmd.line)
    if argv[0] == "spanuq":
        from spanuq.cli import _parser

        # a command named in the text may leave out its prompt (`spanuq refine`): the parser gets one
        tries = [argv[1:]] + ([argv[1:] + ["PROMPT"]] if cmd.where == "inline" else [])
        if not any(_parses(_parser(), t) for t in tries):
            return "spanuq's parser refuses it"
    elif argv[0] == "make":
        missing = set(argv[1:]) - _make_targets()
        return f"no make target {sorted(missing)}" if missing else None
    elif argv[:2] == ["dvc", "repro"]:
        return None if (REPO / "dvc.yaml").exists() else "no dvc.yaml"
    elif argv[:3] == ["dvc", "exp", "run"]:
        from spanuq.config import load_config

        sets = [argv[i + 1] for i, a in enumerate(argv) if a == "-S"]
        try:
            load_config(REPO / "params.yaml", overrides=sets)
        except Exception as e:  # noqa: BLE001 - any refusal is the answer
            return f"params.yaml refuses {sets}: {e}"
    elif argv[:3] == ["pip", "install", "-r"]:
        return None if (REPO / argv[3]).is_file() else f"no {argv[3]}"
    elif argv[:3] == ["pip", "install", "--no-deps"]:
        project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
        declared = {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
        declared |= {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower()
                     for ds in project["optional-dependencies"].values() for d in ds}
        unknown = [a for a in argv[3:] if a.lower() not in declared]
        return f"not a package pyproject.toml names: {unknown}" if unknown else None
    elif argv[:2] == ["pip", "install"]:
        extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
        m = re.fullmatch(r"\.(?:\[([\w,]+)\])?", argv[2])
        if m is None:
            return f"not an install of this folder: {argv[2]}"
        unknown = set((m.group(1) or "").split(",")) - set(extras) - {""}
        return f"no extra {sorted(unknown)}" if unknown else None
    elif argv[0] == "python" and argv[1].startswith("scripts/"):
        script = REPO / argv[1]
        if not script.exists():
            return f"no {argv[1]}"
        helped = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, cwd=REPO)
        unknown = [f for f in _flags(argv[2:]) if f not in helped.stdout]
        return f"{argv[1]} has no {unknown}" if unknown or helped.returncode else None
    else:
        return f"no check for {argv[0]}"
    return None


def example_names_exist(code: str) -> list[str]:
    """The attributes the Python example reads that `SpanUQ`, its result or its spans lack."""
    from spanuq import SpanUQ
    from spanuq.score.schema import ScoredSpan, ScoreResult

    compile(code, "README.md", "exec")
    owners = {"uq": set(dir(SpanUQ)), "r": set(ScoreResult.model_fields), "s": set(ScoredSpan.model_fields),
              "SpanUQ": set(dir(SpanUQ))}
    return [f"{o}.{a}" for o, a in re.findall(r"\b(uq|r|s|SpanUQ)\.(\w+)", code) if a not in owners[o]]


def check(readme: str, shown=None) -> list[str]:
    """Every problem of the walk's static part: commands the tools refuse, names the example lacks;
    ``shown``: called with a line per command as it is checked."""
    found = []
    for c in commands(readme):
        p = problem(c)
        if shown is not None:
            shown(f"{'ok ' if p is None else 'BAD'} {c.line}")
        if p is not None:
            found.append(f"{c.line}: {p}")
    return found + [f"the Python example reads {n}" for n in example_names_exist(python_example(readme))]


# ------------------------------------------------------------------------------------ running it
def section(readme: str, heading: str) -> str:
    """The README's ``## heading`` section, up to the next ``## ``."""
    return readme.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def run_quick_start(readme: str, bin_dir: Path, folder: Path) -> None:
    """The quick start's commands as shown, then its Python example, from ``folder`` (empty but for
    answer.txt; the README's "…" prompt is its example prompt); raises at the first mismatch."""
    sys.path.insert(0, str(REPO / "scripts"))
    sys.path.insert(0, str(REPO / "tests"))
    import httpx
    import jsonschema
    from readme_examples import EXAMPLES, readme_block, same_output
    from servers import free_port, process, wait_http

    prompt = (EXAMPLES / "prompt.txt").read_text(encoding="utf-8").strip()
    (folder / "answer.txt").write_text((EXAMPLES / "answer.txt").read_text(encoding="utf-8"), encoding="utf-8")
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "NO_COLOR": "1"}
    record = None
    for c in commands(section(readme, "Quick start")):
        if c.where != "block":
            continue
        argv = [a.replace("…", prompt) for a in shlex.split(c.line)]
        argv[0] = str(bin_dir / "spanuq")
        if argv[1] == "serve":
            assert record is not None, "the walk scores with --json before it serves"
            log = folder.parent / "serve.log"
            with process([*argv, "--port", str(port := free_port())], env, log, cwd=folder) as p:
                url = f"http://127.0.0.1:{port}"
                health = json.loads(wait_http(f"{url}/health", timeout=600, proc=p, log=log))
                served = httpx.post(f"{url}/score", timeout=600, json={
                    "prompt": record["prompt"], "response": record["answer"], "answer_source": "generated"}).json()
                page = httpx.get(url, timeout=30).text
            assert health["status"] == "ok" and "<textarea" in page, (health, page[:300])
            assert [(s["start"], s["end"]) for s in served["spans"]] == [(s["start"], s["end"]) for s in record["spans"]]
            print(f"ok  {c.line}: /health, POST /score gives the CLI's spans, the page")
            continue
        r = subprocess.run(argv, capture_output=True, text=True, cwd=folder, env=env, timeout=900)
        assert r.returncode == 0, f"{c.line} failed:\n{r.stderr[-3000:]}"
        if "--json" in argv:
            record = json.loads(r.stdout)
            jsonschema.validate(record, json.loads((REPO / "docs" / "score.schema.json").read_text()))
            print(f"ok  {c.line}: a record of docs/score.schema.json")
        elif "--response" in argv:
            shown = readme_block(readme).split("\n", 1)[1]
            assert same_output(r.stdout, shown), f"the README shows\n{shown}\nthe command prints\n{r.stdout}"
            print(f"ok  {c.line}: the README's terminal block, its spans and scores")
        else:
            assert "probe: " in r.stdout and "û" in r.stdout, r.stdout  # the probe that scored is named
            print(f"ok  {c.line}: the backbone's answer, scored, the probe named")
    code = f"answer = open('answer.txt', encoding='utf-8').read().rstrip(chr(10))\n{python_example(readme)}\n" \
           "assert r.spans and all(answer[s.start:s.end] == s.text for s in r.spans) and 0 <= r.u_seq <= 1\n"
    r = subprocess.run([str(bin_dir / "python"), "-c", code], capture_output=True, text=True, cwd=folder, env=env,
                       timeout=900)
    assert r.returncode == 0, f"the Python example failed:\n{r.stderr[-3000:]}"
    print("ok  the Python example: spans whose offsets slice the answer, and u_seq")


def readme_default_run(readme: str) -> dict:
    """The README results table's default-run column: test answers / spans / negatives and SpanUQ's AUROC."""
    head = re.search(r"^\| method \| the default run \(.*?test: ([\d,]+) answers, ([\d,]+) spans, ([\d,]+) negatives",
                     readme, flags=re.M)
    row = re.search(r"^\| \*\*SpanUQ\*\*[^|]*\| \*\*([\d.]+)\*\*", readme, flags=re.M)
    n = [int(x.replace(",", "")) for x in head.groups()]
    return {"n_responses": n[0], "n_spans": n[1], "n_negatives": n[2], "span_auroc": float(row.group(1))}


def walk_clone(readme: str, where: Path) -> None:
    """The README on a clean clone of HEAD: make setup, the quick start, make repro against the table."""
    clone = where / "spanuq"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    subprocess.run(["make", "setup"], cwd=clone, check=True)
    folder = where / "empty"
    folder.mkdir()
    run_quick_start(readme, clone / ".venv" / "bin", folder)
    t0 = time.monotonic()
    out = subprocess.run(["make", "repro"], cwd=clone, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    print(out.stdout[-3000:])
    got = subprocess.run([str(clone / ".venv" / "bin" / "python"), "-c", (
        "import json; from spanuq.config import load_config; from spanuq.pipeline.paths import StagePaths; "
        "from spanuq.report.stage import read_metrics; from spanuq.metrics.uq import metric_value; "
        "e, _ = read_metrics(StagePaths.from_config(load_config())); "
        "print(json.dumps({'n_responses': e['n_responses'], 'n_spans': e['n_spans'], "
        "'span_auroc': metric_value(e['spanuq'], 'span', 'auroc')}))")],
        cwd=clone, capture_output=True, text=True, check=True)
    got, want = json.loads(got.stdout), readme_default_run(readme)
    print(f"make repro: {time.monotonic() - t0:.0f} s; it gives {got}; the README shows {want}")
    assert (got["n_responses"], got["n_spans"]) == (want["n_responses"], want["n_spans"]), (got, want)
    assert round(got["span_auroc"], 3) == want["span_auroc"], (got, want)
    print("ok  make repro: the README table's test split and SpanUQ's span AUROC")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", action="store_true", help="also run the quick start from an empty folder")
    ap.add_argument("--clone", type=Path, default=None, help="walk a fresh clone of HEAD in this folder (hours)")
    args = ap.parse_args()
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    found = check(readme, shown=print)
    if found:
        print("\n".join(found), file=sys.stderr)
        return 1
    if args.clone is not None:
        args.clone.mkdir(parents=True, exist_ok=True)
        walk_clone(readme, args.clone)
    elif args.run:
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "empty").mkdir()
            run_quick_start(readme, Path(sys.executable).parent, Path(tmp) / "empty")
    return 0


if __name__ == "__main__":
    sys.exit(main())
