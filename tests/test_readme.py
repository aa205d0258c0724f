"""The README a newcomer reads: short, its example is what the command prints today, its links lead
somewhere, and only the results table and the example carry figures."""
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import readme_examples  # noqa: E402

README = (REPO / "README.md").read_text(encoding="utf-8")


def test_the_readme_is_a_page_not_a_log():
    assert len(README.splitlines()) <= 250
    assert not re.search(r"20\d\d-\d\d-\d\d", README.replace(readme_examples.readme_block(README), ""))


def test_the_readme_quotes_the_terminal_example_verbatim():
    assert readme_examples.readme_block(README) == (REPO / "docs" / "terminal.txt").read_text(encoding="utf-8")


def test_the_terminal_example_is_what_the_command_prints_now():
    """`spanuq score` on docs/examples/ with the shipped probe prints docs/terminal.txt: the same
    spans and text, every score within float noise of another CPU (scripts/readme_examples.py)."""
    now, then = readme_examples.terminal_text(), (REPO / "docs" / "terminal.txt").read_text(encoding="utf-8")
    assert readme_examples.same_output(now, then), f"the command prints now:\n{now}"


def test_the_grounded_example_marks_what_its_real_paragraph_does_not_back():
    """`spanuq score ... --context @source.txt` on docs/examples/grounded/ (an XQuAD test paragraph and the answer
    SmolLM2 wrote with it) with the shipped probe prints docs/terminal_grounded.txt: the name the paragraph does not
    give (it names John Elway) and the dates it never states are likely wrong; the question's own words are not."""
    now = readme_examples.terminal_text(grounded=True)
    then = (REPO / "docs" / "terminal_grounded.txt").read_text(encoding="utf-8")
    assert readme_examples.same_output(now, then), f"the command prints now:\n{now}"
    ranked = now.split("most doubtful first:\n", 1)[1].splitlines()
    flagged = [line for line in ranked if "likely wrong" in line]
    assert any("'Jared Scott'" in line for line in flagged) and any("2014" in line for line in flagged), now
    assert not any("General Manager" in line for line in flagged), now
    assert "[1] 'Peyton Manning became the first quarterback" in now  # the source it was read against


def test_the_example_is_data_the_script_reads():
    prompt, answer = readme_examples.example()
    assert prompt in README and (REPO / "docs" / "examples" / "answer.txt").exists()
    shown = readme_examples.readme_block(README)
    for bracket in "[]{}⟨⟩":
        shown = shown.replace(bracket, "")
    assert answer.split(".")[0] in shown


def test_other_code_blocks_carry_no_results():
    blocks = re.findall(r"```[a-z]*\n(.*?)```", README, flags=re.S)
    others = [b for b in blocks if b != readme_examples.readme_block(README)]
    assert others and not [b for b in others if re.search(r"\b0\.\d{2,}", b)]


@pytest.mark.parametrize("page", ["README.md", *sorted(p.relative_to(REPO).as_posix()
                                                       for p in (REPO / "docs").glob("*.md")),
                                  "experiments/README.md"])
def test_relative_links_lead_to_files_and_headings_that_exist(page):
    text = (REPO / page).read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    base = (REPO / page).parent
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        file = (base / path).resolve() if path else REPO / page
        assert file.exists(), f"{page}: link to {target}: no such file"
        if anchor and file.suffix == ".md":
            slugs = {_slug(h) for h in re.findall(r"^#+ (.*)$", file.read_text(encoding="utf-8"), flags=re.M)}
            assert anchor in slugs, f"{page}: link to {target}: no such heading"


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


CODE = ["spanuq", "benchmarks", "experiments", "scripts", "tests", "flows", "docs"]


def test_code_comments_and_params_carry_no_dates_or_issue_numbers():
    """Comments say what and why; dates, issue numbers and what was measured when are in docs/results.md."""
    files = [REPO / "params.yaml", REPO / "dvc.yaml", REPO / "prefect.yaml", REPO / "Makefile", REPO / "pyproject.toml"]
    for top in CODE:
        files += [p for ext in ("py", "yaml", "sh") for p in (REPO / top).rglob(f"*.{ext}") if "fixtures" not in p.parts]
    stale = re.compile(r"20\d\d-\d\d-\d\d|\bissue[ -]#?\d+", re.I)
    found = [f"{p.relative_to(REPO)}:{i}: {line.strip()}" for p in files if p.exists()
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if stale.search(line)]
    assert not found, "\n".join(found)


# ------------------------------------------------------------------- a newcomer's walk (scripts/readme_walk.py)
import readme_walk  # noqa: E402


def test_every_command_the_readme_shows_is_one_its_tool_accepts():
    shown = [c.line for c in readme_walk.commands(README)]
    assert {"pip install .", "make setup", "make repro", "make test", "make bench", "spanuq serve"} <= set(shown)
    assert shown.index("pip install .") < shown.index("make repro") < shown.index("make bench")  # top to bottom
    assert readme_walk.check(README) == []


@pytest.mark.parametrize("bad, why", [
    ("spanuq score \"Q?\" --answer @a.txt", "parser refuses"),
    ("make bench-all", "no make target"),
    ("dvc exp run -S label.methd=judge", "params.yaml refuses"),
    ("pip install \".[gpus]\"", "no extra"),
    ("python scripts/ship_probe.py --runs data", "has no ['--runs']"),
])
def test_the_walk_finds_a_command_its_tool_would_refuse(bad, why):
    readme = README.replace("```bash\nmake repro ", f"```bash\n{bad}\nmake repro ", 1)
    found = readme_walk.check(readme)
    assert len(found) == 1 and bad.replace("\"", "") in found[0].replace("\"", "") and why in found[0], found


def test_the_walk_finds_a_name_the_python_example_reads_that_the_result_lacks():
    readme = README.replace("r.u_seq ", "r.u_sequence ", 1)
    assert readme_walk.check(readme) == ["the Python example reads r.u_sequence"]


@pytest.mark.slow
def test_the_quick_start_runs_as_the_readme_shows_from_an_empty_folder(tmp_path):
    """Each quick-start command as shown, in an empty folder holding answer.txt, then the Python example."""
    (tmp_path / "empty").mkdir()
    readme_walk.run_quick_start(README, Path(sys.executable).parent, tmp_path / "empty")
