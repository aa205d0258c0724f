"""The README's examples, made by running them: `docs/terminal.txt` (and its block in README.md) and `docs/web.png`;
the grounded example (an answer checked against its source): `docs/terminal_grounded.txt` and `docs/web_grounded.png`.

    python scripts/readme_examples.py [--no-picture]

The grounded example is ``docs/examples/grounded/`` (prompt, answer, source): a question of XQuAD's test split, its
Wikipedia paragraph and the answer SmolLM2 wrote with it, scored as ``spanuq score ... --response @answer.txt
--context @source.txt``, and the page with the paragraph pasted as the sources.

The example is data: ``docs/examples/prompt.txt`` (the question) and ``docs/examples/answer.txt``
(the answer to score, as a user pastes one).  The terminal example is ``spanuq score`` on them
with the shipped probe, piped (plain text, spans in brackets), run from an empty folder as a
new user would; the picture is the page of ``spanuq serve`` (shipped probe) in headless
Chromium with the same prompt and answer.  The README quotes docs/terminal.txt verbatim;
tests/test_readme.py checks that it does and that the command still prints it.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "docs" / "examples"
TERMINAL = REPO / "docs" / "terminal.txt"
PICTURE = REPO / "docs" / "web.png"
GROUNDED = EXAMPLES / "grounded"
TERMINAL_GROUNDED = REPO / "docs" / "terminal_grounded.txt"
PICTURE_GROUNDED = REPO / "docs" / "web_grounded.png"
README = REPO / "README.md"
MARK = "<!-- docs/terminal.txt, written by scripts/readme_examples.py: do not edit here -->"


def readme_block(readme: str) -> str:
    """The README's terminal example: the text block after `MARK`."""
    rest = readme.split(MARK + "\n```text\n", 1)[1]
    return rest.split("```\n", 1)[0]


def with_block(readme: str, text: str) -> str:
    """The README with its terminal example replaced by ``text``."""
    return readme.replace(MARK + "\n```text\n" + readme_block(readme), MARK + "\n```text\n" + text, 1)


def example(folder: Path = EXAMPLES) -> tuple[str, str]:
    """(prompt, answer) of the README's example (``GROUNDED``: of the grounded one)."""
    prompt = (folder / "prompt.txt").read_text(encoding="utf-8").strip()
    answer = (folder / "answer.txt").read_text(encoding="utf-8").rstrip("\n")
    return prompt, answer


def source() -> str:
    """The grounded example's source passage."""
    return (GROUNDED / "source.txt").read_text(encoding="utf-8").rstrip("\n")


def command(grounded: bool = False) -> list[str]:
    """The command the README shows, run from the repository."""
    if grounded:
        return ["spanuq", "score", example(GROUNDED)[0], "--response", "@docs/examples/grounded/answer.txt",
                "--context", "@docs/examples/grounded/source.txt", "--model", "shipped"]
    return ["spanuq", "score", example()[0], "--response", "@docs/examples/answer.txt", "--model", "shipped"]


def terminal_text(grounded: bool = False) -> str:
    """What the command prints, piped (``$ command`` first); run in an empty folder with the example's files."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = GROUNDED if grounded else EXAMPLES
        into = Path(tmp) / folder.relative_to(REPO)
        into.mkdir(parents=True)
        for name in ("answer.txt", "source.txt") if grounded else ("answer.txt",):
            (into / name).write_text((folder / name).read_text(encoding="utf-8"), encoding="utf-8")
        env = {**os.environ, "NO_COLOR": "1"}
        exe = Path(sys.executable).parent / "spanuq"
        out = subprocess.run([str(exe), *command(grounded)[1:]], capture_output=True, text=True, cwd=tmp, env=env,
                             timeout=600)
        if out.returncode:
            raise SystemExit(f"spanuq score failed:\n{out.stderr[-3000:]}")
    shown = " ".join(shlex.quote(a) if " " in a else a for a in command(grounded))
    return f"$ {shown}\n{out.stdout.rstrip()}\n"


def same_output(printed: str, shown: str) -> bool:
    """``printed`` is ``shown`` up to float noise of another CPU: the same text and spans, every
    number within 0.011 (or 2%) of the one shown."""
    number = re.compile(r"\d+(?:\.\d+)?")
    a, b = [float(x) for x in number.findall(printed)], [float(x) for x in number.findall(shown)]
    return number.sub("#", printed.strip()) == number.sub("#", shown.strip()) and len(a) == len(b) and all(
        abs(x - y) <= max(0.011, 0.02 * abs(y)) for x, y in zip(a, b))


def picture(path: Path, grounded: bool = False) -> None:
    """The page of `spanuq serve` with the example scored, as a PNG (headless Chromium); ``grounded``: the
    grounded example, its source pasted as the sources."""
    import httpx
    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(REPO / "tests"))
    from browser import CHROMIUM_ARGS
    from servers import free_port

    prompt, answer = example(GROUNDED if grounded else EXAMPLES)
    port = free_port()
    exe = Path(sys.executable).parent / "spanuq"
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen([str(exe), "serve", "--model", "shipped", "--port", str(port)], cwd=tmp,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(300):
                try:
                    if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(1)
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1200 if grounded else 1000, "height": 760})
                page.goto(url)
                page.fill("#prompt", prompt)
                page.fill("#response", answer)
                if grounded:
                    page.fill("#context", source())
                page.uncheck("#stream")
                page.click("#submit")
                page.wait_for_selector("#result[data-ready]", timeout=300_000)
                page.screenshot(path=str(path), full_page=True)
                browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-picture", action="store_true", help="only docs/terminal.txt")
    args = ap.parse_args()
    text = terminal_text()
    TERMINAL.write_text(text, encoding="utf-8")
    README.write_text(with_block(README.read_text(encoding="utf-8"), text), encoding="utf-8")
    print(f"wrote {TERMINAL} and its block in {README}")
    TERMINAL_GROUNDED.write_text(terminal_text(grounded=True), encoding="utf-8")
    print(f"wrote {TERMINAL_GROUNDED}")
    if not args.no_picture:
        picture(PICTURE)
        print(f"wrote {PICTURE}")
        picture(PICTURE_GROUNDED, grounded=True)
        print(f"wrote {PICTURE_GROUNDED}")


if __name__ == "__main__":
    main()
