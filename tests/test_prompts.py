"""The prompts stage: the bundled set, a user's file, the hub loaders (on fixture rows), splits."""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from pydantic import ValidationError

from spanuq.config import load_config
from spanuq.data import hub
from spanuq.data.aliases import Entry, case_sensitive, check, parse_refs
from spanuq.data.bundled_build import build, sources_dir, write
from spanuq.data.prompts import (
    BIO_TEMPLATES,
    PAPER_N_PROMPTS,
    bundled_path,
    load_bundled,
    load_prompt_file,
    run_prompts,
    select_prompts,
)
from spanuq.data.splits import assign_splits, split_counts, split_targets
from spanuq.pipeline.files import read_json, read_records
from spanuq.pipeline.records import Prompt

FIXTURES = Path(__file__).parent / "fixtures" / "hub"
PAPER = {"longform_qa": 0.42, "triviaqa": 0.25, "eli5": 0.15, "biography": 0.10, "felm": 0.08}
FACTOID = ("longform_qa", "triviaqa", "felm")


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def bundled() -> list[Prompt]:
    return load_bundled()


# ------------------------------------------------------------------ the bundled set
def test_the_bundled_set_has_a_thousand_prompts_in_five_domains(bundled):
    assert len(bundled) >= 1000
    by_domain = Counter(p.domain for p in bundled)
    assert set(by_domain) == {"longform_qa", "triviaqa", "eli5", "biography", "felm"}
    for d, share in PAPER.items():  # close to the paper's mix
        assert abs(by_domain[d] / len(bundled) - share) < 0.06, (d, by_domain[d] / len(bundled))
    assert len({p.id for p in bundled}) == len(bundled)
    assert len({p.text.lower() for p in bundled}) == len(bundled)


def test_factoid_prompts_carry_reference_answers(bundled):
    factoid = [p for p in bundled if p.domain in FACTOID]
    assert sum(bool(p.references) for p in factoid) / len(factoid) > 0.95
    for p in factoid:
        assert all(r.strip() == r and r for r in p.references), p


def test_the_original_prompts_keep_their_ids(bundled):
    by_id = {p.id: p for p in bundled}
    assert by_id["bundled-longform_qa-0001"].text == "Who wrote the play Romeo and Juliet?"
    assert by_id["bundled-triviaqa-0001"].text == "What is the chemical symbol for gold?"
    assert by_id["bundled-biography-0001"].text == "Write a biography of Albert Einstein."
    assert by_id["bundled-felm-0030"].references == ["1/8", "0.125", "12.5%"]


def test_biographies_follow_factscore(bundled):
    bios = [p for p in bundled if p.domain == "biography"]
    pops = Counter(p.meta["popularity"] for p in bios)
    assert set(pops) == {"head", "torso", "tail"}
    for stratum, share in {"head": 0.3, "torso": 0.4, "tail": 0.3}.items():
        assert abs(pops[stratum] / len(bios) - share) < 0.05
    templates = Counter(next(i for i, t in enumerate(BIO_TEMPLATES) if p.text == t.format(p.meta["entity"]))
                        for p in bios)
    assert max(templates.values()) - min(templates.values()) <= 1
    assert all(p.references for p in bios)
    assert len({p.meta["entity"] for p in bios}) == len(bios)


# ------------------------------------------------------------------ the bundled set's data files
def test_the_generator_reproduces_the_committed_prompt_file(tmp_path, repo_root):
    out = write(build(), tmp_path / "prompts.jsonl")
    assert out.read_bytes() == bundled_path().read_bytes()
    path = repo_root / "scripts" / "make_bundled_prompts.py"
    spec = importlib.util.spec_from_file_location("make_bundled_prompts", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main(["--check"]) == 0


def test_references_name_one_answer_and_keep_their_case(bundled):
    by_id = {p.id: p for p in bundled}
    gold = by_id["bundled-triviaqa-0001"]
    assert gold.references == ["Au"] and case_sensitive(gold.meta) == {"Au"}
    assert case_sensitive(by_id["bundled-longform_qa-0001"].meta) == set()
    assert by_id["bundled-triviaqa-0290"].text == "Which currency is used in Norway?"
    assert by_id["bundled-triviaqa-0290"].references == ["Norwegian krone", "NOK"]
    assert by_id["bundled-triviaqa-0291"].references == ["Danish krone", "DKK"]
    assert by_id["bundled-longform_qa-0002"].references == ["Leonardo da Vinci", "da Vinci"]
    loose = {"krone", "krona", "peso", "won", "pound", "franc", "rupee", "He", "No", "Yes", "Leonardo", "Bell"}
    assert not [(p.id, r) for p in bundled for r in p.references if r in loose]
    yes_no = [p for p in bundled if "answer" in p.meta]  # a yes/no answer is kept, but not as a matchable alias
    assert len(yes_no) > 40 and {p.meta["answer"] for p in yes_no} <= {"yes", "no", "same"}


@pytest.mark.parametrize("cell, rule", [
    ("He", "stop-word"),  # helium's symbol is the pronoun, whatever its case
    ("case:He", "stop-word"),
    ("No", "stop-word"),
    ("Au", "too-short"),  # two letters match only with their case
    ("Mexican peso | peso", "currency-unit"),
    ("South Korean won | won", "currency-unit"),
    ("Alexander Graham Bell | Bell", "common-word"),  # a surname that is a common word
    ("Grant Wood | Wood", "common-word"),
    ("Leonardo da Vinci | Leonardo", "first-word"),  # a bare first name
    ("Bering Strait | Bering", "first-word"),
])
def test_the_validator_rejects_an_ambiguous_alias(cell, rule):
    problems = check([Entry("t.tsv:2", "t", parse_refs(cell))])
    assert len(problems) == 1 and problems[0].startswith("t.tsv:2:") and problems[0].endswith(f"({rule})"), problems


def test_the_validator_rejects_a_short_alias_two_answers_share():
    rows = [Entry("books.tsv:9", "books", parse_refs("Charlotte Brontë | Brontë")),
            Entry("books.tsv:10", "books", parse_refs("Emily Brontë | Bronte"))]
    problems = check(rows)
    assert len(problems) == 2 and all("(shared: also a reference at books.tsv:" in p for p in problems), problems
    # the same alias for the same answer, or in another table, is fine
    assert check([Entry("books.tsv:2", "books", parse_refs("Leo Tolstoy | Tolstoy")),
                  Entry("books.tsv:3", "books", parse_refs("Leo Tolstoy | Tolstoy"))]) == []
    assert check([rows[0], Entry("x.tsv:2", "x", parse_refs("Emily Brontë | Bronte"))]) == []


def test_the_validator_accepts_precise_aliases_numbers_and_key_facts():
    entries = [
        Entry("c.tsv:2", "c", parse_refs("Danish krone | case:DKK")),
        Entry("t.tsv:2", "t", parse_refs("case:Au")),
        Entry("t.tsv:3", "t", parse_refs("8 | eight")),
        Entry("t.tsv:4", "t", parse_refs("Queen")),  # the answer itself may be a common word
        Entry("t.tsv:5", "t", parse_refs("Galileo Galilei | ok:Galileo")),  # checked by hand
        Entry("b.tsv:2", "b", parse_refs("physicist | relativity"), key_facts=True),
        Entry("b.tsv:3", "b", parse_refs("chemist | physicist | radioactivity"), key_facts=True),
    ]
    assert check(entries) == []
    assert parse_refs("ok:case:Xy | Z")[0].case_sensitive and parse_refs("ok:case:Xy")[0].checked


@pytest.mark.parametrize("table, line, message", [
    ("currencies.tsv", "Argentina\tArgentine peso | peso", r"currencies\.tsv:{n}: 'peso' \(currency-unit\)"),
    ("longform_qa.tsv", "Who painted The Starry Night?\tVincent van Gogh", r"longform_qa\.tsv:{n}: the same prompt as"),
    ("films.tsv", "Alien\t1979\tRidley Scott\textra", r"films\.tsv:{n}: 4 cells, the header has 3"),
])
def test_a_bad_line_in_a_data_file_stops_the_generator_naming_file_and_line(tmp_path, table, line, message):
    src = tmp_path / "sources"
    shutil.copytree(sources_dir(), src)
    path = src / table
    path.write_text(path.read_text(encoding="utf-8") + line + "\n", encoding="utf-8")
    n = len(path.read_text(encoding="utf-8").splitlines())
    with pytest.raises(ValueError, match=message.format(n=n)):
        build(src)


# ------------------------------------------------------------------ selection
def test_a_selection_follows_the_domain_proportions(bundled):
    for n in (20, 100, 333, 1000):
        got = Counter(p.domain for p in select_prompts(bundled, n, PAPER, seed=0))
        assert sum(got.values()) == n
        for d, share in PAPER.items():
            assert abs(got[d] - n * share) <= 1, (n, d, got)


def test_a_smaller_run_is_a_prefix_of_a_larger_one(bundled):
    small = select_prompts(bundled, 50, PAPER, seed=7)
    large = select_prompts(bundled, 400, PAPER, seed=7)
    assert [p.id for p in small] == [p.id for p in large[:50]]
    assert [p.id for p in small] == [p.id for p in select_prompts(bundled, 50, PAPER, seed=7)]
    assert {p.id for p in small} != {p.id for p in select_prompts(bundled, 50, PAPER, seed=8)}


def test_small_runs_mix_famous_and_obscure_subjects(bundled):
    chosen = select_prompts(bundled, 60, PAPER, seed=0)
    bios = [p for p in chosen if p.domain == "biography"]
    assert len(bios) == 6 and {p.meta["popularity"] for p in bios} == {"head", "torso", "tail"}
    felm_kinds = {p.meta["kind"] for p in chosen if p.domain == "felm"}
    assert len(felm_kinds) >= 3  # misconceptions, math, reasoning... not just one kind


def test_a_short_domain_is_filled_from_the_others(bundled):
    few = [p for p in bundled if p.domain != "biography"] + [p for p in bundled if p.domain == "biography"][:3]
    got = Counter(p.domain for p in select_prompts(few, 200, PAPER, seed=0))
    assert sum(got.values()) == 200 and got["biography"] == 3


# ------------------------------------------------------------------ the stage
def test_run_prompts_writes_prompts_and_a_report(make_cfg):
    cfg = make_cfg("prompts.grounded=0", "prompts.n_prompts=120", "prompts.seed=3", "prompts.split_fractions={train: 0.6, dev: 0.15, test: 0.25}")
    out = run_prompts(cfg, progress=False)
    assert out == Path(cfg.paths.data) / "prompts.jsonl"
    prompts = read_records(out, Prompt)
    assert len(prompts) == 120 and len({p.id for p in prompts}) == 120
    report = read_json(out.with_name("prompts_report.json"))
    assert report["n_prompts"] == 120 and report["source"] == "bundled"
    assert report["per_domain"] == {"biography": 12, "longform_qa": 50, "triviaqa": 30, "eli5": 18, "felm": 10}
    assert report["per_split"] == {"train": 72, "dev": 18, "test": 30}
    assert report["with_references"] + report["without_references"] == 120
    for d, row in report["per_domain_split"].items():  # provisional splits are stratified by domain
        n = report["per_domain"][d]
        for s, f in {"train": 0.6, "dev": 0.15, "test": 0.25}.items():
            assert abs(row.get(s, 0) - n * f) < 1, (d, row)


def test_split_sizes_are_honoured_exactly(make_cfg):
    cfg = make_cfg("prompts.grounded=0", "prompts.n_prompts=200", "prompts.split_sizes={train: 150, dev: 10, test: 40}")
    prompts = read_records(run_prompts(cfg, progress=False), Prompt)
    assert Counter(p.split for p in prompts) == {"train": 150, "dev": 10, "test": 40}


def test_cpu_full_draws_every_bundled_prompt_over_1000_training_answers(make_cfg, bundled):
    cfg = make_cfg("prompts.grounded=0", "preset=cpu-full")
    prompts = read_records(run_prompts(cfg, progress=False), Prompt)
    assert len(prompts) == 1499 == len(bundled)
    assert sum(p.split == "train" for p in prompts) == 1079 and sum(p.split == "test" for p in prompts) == 270
    assert len({p.domain for p in prompts}) == len({p.domain for p in bundled})  # every domain style


def test_the_cli_runs_the_prompts_stage_without_torch(tmp_path, repo_root):
    code = (
        "import sys; from spanuq.cli import main; "
        f"rc = main(['prompts', '--no-progress', '-p', {str(repo_root / 'params.yaml')!r}, "
        f"'-o', 'paths.data={tmp_path / 'data'}', '-o', 'prompts.n_prompts=30', '-o', 'prompts.grounded=0']); "
        "print('TORCH', 'torch' in sys.modules); sys.exit(rc)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "TORCH False" in res.stdout and "prompts: wrote" in res.stdout
    assert len((tmp_path / "data" / "prompts.jsonl").read_text().splitlines()) == 30
    assert (tmp_path / "data" / "prompts_report.json").exists()


def test_the_cli_reports_a_bad_file_as_an_error(tmp_path, repo_root, capsys):
    from spanuq.cli import main

    bad = tmp_path / "mine.jsonl"
    bad.write_text('{"text": "fine"}\n{"domain": "triviaqa"}\n')
    rc = main(["prompts", "--no-progress", "-p", str(repo_root / "params.yaml"), "-o", f"paths.data={tmp_path}",
               "-o", "prompts.source=file", "-o", f"prompts.file={bad}"])
    assert rc == 2 and f"{bad}:2: missing `text`" in capsys.readouterr().err


# ------------------------------------------------------------------ a user's file
def test_a_users_csv_with_references_becomes_prompts(tmp_path):
    f = tmp_path / "mine.csv"
    f.write_text(
        "text,domain,references,split,topic\n"
        "Who wrote Faust?,triviaqa,Goethe|Johann Wolfgang von Goethe,test,literature\n"
        "Wer entdeckte die Röntgenstrahlung?,,\"[\"\"Wilhelm Röntgen\"\", \"\"Röntgen\"\"]\",,physics\n"
        "\"Tell me about Ada Lovelace, please.\",biography,,,\n"
        "日本の首都はどこですか？,longform_qa,東京|Tokyo,,\n",
        encoding="utf-8",
    )
    ps = load_prompt_file(f)
    assert [p.domain for p in ps] == ["triviaqa", "custom", "biography", "longform_qa"]
    assert ps[0].references == ["Goethe", "Johann Wolfgang von Goethe"] and ps[0].split == "test"
    assert ps[1].references == ["Wilhelm Röntgen", "Röntgen"] and ps[1].split is None
    assert ps[2].text == "Tell me about Ada Lovelace, please." and ps[2].references == []
    assert ps[3].references == ["東京", "Tokyo"]
    assert ps[0].meta["topic"] == "literature" and ps[0].meta["source"] == "file"
    assert all(p.id.startswith("file-") and len(p.id) == 17 for p in ps)
    assert [p.id for p in load_prompt_file(f)] == [p.id for p in ps]  # content ids are stable


def test_a_users_jsonl_keeps_ids_splits_and_extra_fields(tmp_path):
    f = tmp_path / "mine.jsonl"
    f.write_text(
        '{"id": "q1", "text": "Who painted Guernica?", "references": ["Picasso"], "split": "dev", "level": 2}\n'
        "\n"
        '{"id": 7, "text": "Why is the sky blue?", "domain": "eli5", "references": "Rayleigh scattering"}\n',
        encoding="utf-8",
    )
    a, b = load_prompt_file(f)
    assert (a.id, a.domain, a.references, a.split, a.meta["level"]) == ("q1", "custom", ["Picasso"], "dev", "2")
    assert (b.id, b.domain, b.references) == ("7", "eli5", ["Rayleigh scattering"])


def test_a_file_of_answers_written_elsewhere_gives_one_prompt_per_answer(tmp_path):
    """Several systems' answers to one question (``response``): each its own prompt, kept as given."""
    f = tmp_path / "answers.jsonl"
    f.write_text('{"text": "Who painted Guernica?", "response": " Pablo Picasso, in 1937."}\n'
                 '{"text": "Who painted Guernica?", "response": "Salvador Dal\u00ed."}\n'
                 '{"text": "Who painted Guernica?"}\n', encoding="utf-8")
    a, b, c = load_prompt_file(f)
    assert (a.response, b.response, c.response) == (" Pablo Picasso, in 1937.", "Salvador Dalí.", None)
    assert len({a.id, b.id, c.id}) == 3


@pytest.mark.parametrize("name, content, message", [
    ("a.jsonl", '{"text": "ok", "response": "  "}\n', "a.jsonl:1: `response` is only whitespace"),
    ("a.jsonl", '{"text": "ok", "response": ["a"]}\n', "a.jsonl:1: `response` must be a string"),
    ("a.jsonl", '{"text": "ok", "response": "' + "x" * 20_001 + '"}\n', "a.jsonl:1: `response` has 20,001"),
    ("a.jsonl", '{"text": "ok"}\n{"domain": "eli5"}\n', "a.jsonl:2: missing `text`"),
    ("a.jsonl", '{"text": "   "}\n', "a.jsonl:1: empty `text`"),
    ("a.jsonl", '{"text": "ok", "domain": "poetry"}\n', "a.jsonl:1: domain 'poetry' is not one of"),
    ("a.jsonl", '{"id": "x", "text": "a"}\n{"id": "x", "text": "b"}\n', "a.jsonl:2: duplicate id 'x', first seen on line 1"),
    ("a.jsonl", '{"text": "same"}\n{"text": "same"}\n', "a.jsonl:2: duplicate prompt"),
    ("a.jsonl", '{"text": "ok"}\n{"text": oops}\n', "a.jsonl:2: not valid JSON"),
    ("a.jsonl", '["just", "a", "list"]\n', "a.jsonl:1: each line must be a JSON object"),
    ("a.jsonl", '{"text": "ok", "split": "validation"}\n', "a.jsonl:1: split 'validation' is not one of"),
    ("a.jsonl", '{"text": "ok", "references": {"a": 1}}\n', "a.jsonl:1: `references` must be a list"),
    ("a.jsonl", '{"text": "' + "x" * 20_001 + '"}\n', "a.jsonl:1: `text` has 20,001 characters"),
    ("a.jsonl", "", "a.jsonl: no prompts found"),
    ("a.csv", "question,domain\nWhy?,eli5\n", "a.csv:1: no `text` column (columns: question, domain)"),
    ("a.csv", "text,domain\nok,eli5\n,eli5\n", "a.csv:3: empty `text`"),
    ("a.csv", "text,domain\nok,eli5,extra\n", "a.csv:2: 3 cells but the header has 2 columns"),
    ("a.csv", "text,references\nok,\"[not json\"\n", "a.csv:2: `references` looks like a JSON list"),
    ("a.txt", "text\nok\n", "unsupported file type '.txt'"),
])
def test_a_bad_users_file_names_the_file_and_line(tmp_path, name, content, message):
    f = tmp_path / name
    f.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError) as e:
        load_prompt_file(f)
    assert message in str(e.value)


def test_an_unreadable_or_missing_file_is_a_clear_error(tmp_path):
    f = tmp_path / "latin1.csv"
    f.write_bytes("text\nCaf\xe9 au lait?\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.csv: cannot read as UTF-8"):
        load_prompt_file(f)
    with pytest.raises(FileNotFoundError, match="prompts file not found"):
        load_prompt_file(tmp_path / "nope.jsonl")
    (tmp_path / "dir.jsonl").mkdir()
    with pytest.raises(ValueError, match="is a directory"):
        load_prompt_file(tmp_path / "dir.jsonl")


def test_run_prompts_on_a_users_file_keeps_its_splits(make_cfg, tmp_path):
    f = tmp_path / "mine.jsonl"
    lines = [{"text": f"Question number {i}?", "domain": "triviaqa" if i % 2 else "eli5"} for i in range(40)]
    lines[0]["split"] = "test"
    f.write_text("\n".join(json.dumps(x) for x in lines), encoding="utf-8")
    prompts = read_records(run_prompts(make_cfg("prompts.grounded=0", "prompts.source=file", f"prompts.file={f}",
                                                "prompts.n_prompts=null"), progress=False), Prompt)
    assert [p.text for p in prompts] == [x["text"] for x in lines]  # the whole file, in file order
    assert prompts[0].split == "test" and all(p.split for p in prompts)
    sub = read_records(run_prompts(make_cfg("prompts.grounded=0", "prompts.source=file", f"prompts.file={f}", "prompts.n_prompts=10"),
                                   progress=False), Prompt)
    assert Counter(p.domain for p in sub) == {"triviaqa": 5, "eli5": 5}  # the file's own mix
    with pytest.raises(ValueError, match="prompts.file"):
        run_prompts(make_cfg("prompts.grounded=0", "prompts.source=file"), progress=False)


# ------------------------------------------------------------------ splits
def test_splits_respect_proportions_in_every_stratum_for_20000_items():
    keys = [f"{d}|{b}" for d, b in zip(["bio", "lfqa", "tqa", "eli5", "felm"] * 4000,
                                       (["low"] * 7 + ["mid"] * 2 + ["high"]) * 2000)]
    target = {"train": 0.6, "dev": 0.15, "test": 0.25}
    items = [{"id": f"p{i}"} for i in range(len(keys))]
    splits = assign_splits(items, keys, target, 0)
    assert split_counts(splits) == {"train": 12000, "dev": 3000, "test": 5000}
    sizes = Counter(keys)
    for k, row in split_counts(splits, keys).items():
        for s, f in target.items():
            assert abs(row.get(s, 0) - sizes[k] * f) <= 1, (k, row)
    assert splits == assign_splits(items, keys, target, 0)  # deterministic
    assert splits != assign_splits(items, keys, target, 1)  # the seed matters


def test_splits_with_exact_sizes_and_the_label_stage_short_form():
    keys = [f"d{i % 5}|b{i % 3}" for i in range(19_994)]
    splits = assign_splits(keys, {"train": 17494, "dev": 500, "test": 2000}, 0)  # (keys, target, seed)
    assert split_counts(splits) == {"train": 17494, "dev": 500, "test": 2000}
    for k, row in split_counts(splits, keys).items():
        n = keys.count(k)
        assert all(abs(row.get(s, 0) - n * t / 19_994) < 1 for s, t in (("dev", 500), ("test", 2000)))


def test_splits_work_for_five_items_and_tiny_strata():
    five = assign_splits(["a", "b", "c", "d", "e"], ["x", "x", "x", "y", "y"], {"train": 0.6, "dev": 0.2, "test": 0.2}, 0)
    assert Counter(five) == {"train": 3, "dev": 1, "test": 1}
    singles = assign_splits(list(range(50)), list(range(50)), {"train": 0.8, "test": 0.2}, 0)  # 50 strata of 1
    assert Counter(singles) == {"train": 40, "test": 10}
    assert assign_splits([], [], {"train": 1.0}, 0) == []
    one = assign_splits(["only"], None, {"train": 0.6, "dev": 0.15, "test": 0.25}, 0)
    assert one == ["train"]


def test_each_stratum_is_spread_over_every_split():
    keys = ["easy"] * 40 + ["hard"] * 20 + ["odd"] * 8
    splits = assign_splits(list(range(len(keys))), keys, {"train": 0.6, "dev": 0.15, "test": 0.25}, 5)
    for k, row in split_counts(splits, keys).items():
        assert set(row) == {"train", "dev", "test"}, (k, row)


def test_split_targets_and_bad_split_names():
    assert split_targets(10, {"train": 0.6, "dev": 0.15, "test": 0.25}) == {"train": 6, "dev": 2, "test": 2}
    assert sum(split_targets(20_000, {"train": 17494, "dev": 500, "test": 2000}).values()) == 20_000  # rescaled
    with pytest.raises(ValueError, match="unknown split"):
        assign_splits([1, 2], None, {"train": 0.5, "valid": 0.5}, 0)
    with pytest.raises(ValueError, match="2 strata keys for 3 items"):
        assign_splits([1, 2, 3], ["a", "b"], {"train": 1.0}, 0)


# ------------------------------------------------------------------ hub loaders on fixture rows
def test_nq_open_rows_become_long_form_questions():
    ps = hub.nq_open_prompts(rows("nq_open.jsonl"))
    assert len(ps) == 4  # the repeated question is kept once
    assert ps[0].text == "Where did they film hot tub time machine?"
    assert ps[0].references == ["Fernie Alpine Resort"] and ps[0].domain == "longform_qa"
    assert ps[1].references == ["Bobby Scott", "Bob Russell"] and ps[1].meta["source"] == "nq_open"


def test_triviaqa_rows_keep_the_answer_and_its_aliases():
    ps = hub.triviaqa_prompts(rows("trivia_qa_unfiltered_nocontext.jsonl"))
    by_id = {p.id: p for p in ps}
    assert by_id["triviaqa-tc_33"].references[0] == "Sunset Boulevard"
    assert "Sunset Blvd" in by_id["triviaqa-tc_33"].references
    assert by_id["triviaqa-tc_40"].references[:2] == ["Campbell-Bannerman", "Sir Henry Campbell-Bannerman"]
    assert by_id["triviaqa-tc_test_1"].references == []  # test-split rows have no answer
    assert all(p.domain == "triviaqa" for p in ps)


def test_eli5_rows_become_title_questions_without_references():
    ps = hub.eli5_prompts(rows("eli5_pair.jsonl"))
    assert [p.text for p in ps] == ["Why do we get goosebumps when we are cold or scared?",
                                    "How do noise cancelling headphones work?", "How does a credit score work?"]
    assert all(p.references == [] and p.domain == "eli5" for p in ps)
    assert hub.eli5_prompts([{"title": "ELI5 - why is water wet?", "q_id": "abc"}])[0].text == "Why is water wet?"


def test_popqa_people_become_biography_entities_with_popularity():
    ents = {e.name: e for e in hub.popqa_entities(rows("popqa.jsonl"))}
    assert set(ents) == {"George Rankin", "Marie Curie", "Ada Lovelace", "Inge Lehmann", "Pelé"}  # no "Paris"
    assert ents["Marie Curie"].popularity == "head" and ents["Ada Lovelace"].popularity == "torso"
    assert ents["Inge Lehmann"].popularity == "tail" and ents["George Rankin"].popularity == "tail"
    assert ents["Marie Curie"].references == ["physicist", "chemist", "Warsaw"]  # facts of both rows
    assert ents["Pelé"].references == ["association football"]


def test_biography_prompts_use_the_three_templates_in_turn():
    ents = hub.popqa_entities(rows("popqa.jsonl"))
    ps = hub.biography_prompts(ents, seed=0)
    assert {p.meta["popularity"] for p in ps[:3]} == {"head", "torso", "tail"}  # strata interleaved
    for i, p in enumerate(ps):
        assert p.text == BIO_TEMPLATES[i % 3].format(p.meta["entity"])
        assert p.domain == "biography" and p.meta["source"] == "popqa"
    assert [p.id for p in ps] == [p.id for p in hub.biography_prompts(ents, seed=0)]


def test_a_file_of_entities_replaces_popqa(tmp_path):
    f = tmp_path / "people.csv"
    f.write_text("name,popularity,references\nAda Lovelace,torso,mathematician|Analytical Engine\n"
                 "Inge Lehmann,2500,seismologist\nAlbert Einstein,head,\n", encoding="utf-8")
    ents = hub.entities_from_file(f)
    assert [(e.name, e.popularity) for e in ents] == [("Ada Lovelace", "torso"), ("Inge Lehmann", "tail"),
                                                      ("Albert Einstein", "head")]
    assert ents[0].references == ["mathematician", "Analytical Engine"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"name": "X", "popularity": "famous"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1: popularity 'famous'"):
        hub.entities_from_file(bad)


def test_felm_truthfulqa_and_halueval_rows_become_felm_prompts():
    felm = hub.felm_prompts(rows("felm_wk.jsonl"), "wk") + hub.felm_prompts(rows("felm_math.jsonl"), "math")
    assert [p.id for p in felm] == ["felm-wk-0", "felm-wk-1", "felm-math-0", "felm-math-1"]
    assert all(p.references == [] and p.meta["source"] == "felm" for p in felm)
    assert felm[2].meta == {"source": "felm", "kind": "math", "origin": "gsm8k"}
    tqa = hub.truthfulqa_prompts(rows("truthful_qa_generation.jsonl"))
    assert tqa[0].references[0] == "The watermelon seeds pass through your digestive system"
    assert "Nothing happens" in tqa[0].references
    assert all("I have no comment" not in p.references for p in tqa)
    assert tqa[1].meta["category"] == "Misconceptions"
    halu = hub.halueval_prompts(rows("halueval_qa.jsonl"))
    assert [p.references for p in halu] == [["Arthur's Magazine"], ["Delhi"]]
    assert all(p.domain == "felm" for p in tqa + halu)


def test_the_felm_mix_follows_its_inner_proportions():
    def fake(n: int, source: str) -> list[Prompt]:
        return [Prompt(id=f"{source}-{i}", domain="felm", text=f"{source} question {i}", meta={"source": source})
                for i in range(n)]

    pools = {"felm": fake(300, "felm"), "truthfulqa": fake(300, "truthfulqa"), "halueval": fake(300, "halueval")}
    mixed = hub.mix_felm(pools, {"felm": 0.53, "truthfulqa": 0.45, "halueval": 0.02}, seed=0)[:200]
    assert Counter(p.meta["source"] for p in mixed) == {"felm": 106, "truthfulqa": 90, "halueval": 4}


def test_the_domain_mixer_hits_the_proportions_and_fills_a_short_domain():
    def pool(domain: str, n: int) -> list[Prompt]:
        return [Prompt(id=f"{domain}-{i}", domain=domain, text=f"{domain} {i}") for i in range(n)]

    pools = {d: pool(d, 1000) for d in PAPER}
    got = Counter(p.domain for p in hub.mix_domains(pools, PAPER, 500, seed=0))
    assert got == {"longform_qa": 210, "triviaqa": 125, "eli5": 75, "biography": 50, "felm": 40}
    pools["biography"] = pool("biography", 20)
    got = Counter(p.domain for p in hub.mix_domains(pools, PAPER, 500, seed=0))
    assert sum(got.values()) == 500 and got["biography"] == 20


FIXTURE_FILES = {
    "google-research-datasets/nq_open": "nq_open.jsonl",
    "mandarjoshi/trivia_qa": "trivia_qa_unfiltered_nocontext.jsonl",
    "sentence-transformers/eli5": "eli5_pair.jsonl",
    "akariasai/PopQA": "popqa.jsonl",
    "truthfulqa/truthful_qa": "truthful_qa_generation.jsonl",
    "pminervini/HaluEval": "halueval_qa.jsonl",
}


def test_run_prompts_from_the_hub_with_fixture_rows(make_cfg, monkeypatch):
    calls = []

    def fake_load_rows(ds, cache_dir=None, name=None, progress=True):
        calls.append((ds.path, name or ds.name, ds.split, ds.revision))
        if ds.path == "hkust-nlp/felm":
            return rows(f"felm_{name}.jsonl") if (FIXTURES / f"felm_{name}.jsonl").exists() else []
        return rows(FIXTURE_FILES[ds.path])

    monkeypatch.setattr(hub, "load_rows", fake_load_rows)
    cfg = make_cfg("prompts.grounded=0", "prompts.source=hub", "prompts.n_prompts=20")
    prompts = read_records(run_prompts(cfg, progress=False), Prompt)
    assert len(prompts) == 20 and all(p.split for p in prompts)
    assert ("mandarjoshi/trivia_qa", "unfiltered.nocontext", "train", None) in calls
    assert ("hkust-nlp/felm", "math", "test", "refs/convert/parquet") in calls
    report = read_json(Path(cfg.paths.data) / "prompts_report.json")
    assert report["source"] == "hub" and set(report["per_domain"]) == set(PAPER)
    assert {"nq_open", "trivia_qa", "eli5", "popqa"} <= set(report["sources"])


def test_the_hub_offline_error_points_to_the_bundled_set(make_cfg, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    cfg = make_cfg("prompts.grounded=0", "prompts.source=hub", "prompts.n_prompts=10", f"prompts.hub.cache_dir={tmp_path / 'hf'}")
    with pytest.raises(RuntimeError) as e:
        run_prompts(cfg, progress=False)
    assert "google-research-datasets/nq_open" in str(e.value) and "prompts.source=bundled" in str(e.value)


def test_hub_dataset_ids_are_params_and_typos_are_errors(repo_root):
    cfg = load_config(repo_root / "params.yaml", ["prompts.hub.eli5.path=someone/eli5-copy",
                                                  "prompts.hub.felm_mix={felm: 1.0}"])
    assert cfg.prompts.hub.eli5.path == "someone/eli5-copy" and cfg.prompts.hub.eli5.name == "pair"
    assert load_config(repo_root / "params.yaml", preset="gpu-paper").prompts.n_prompts == PAPER_N_PROMPTS
    with pytest.raises(ValidationError):
        load_config(repo_root / "params.yaml", ["prompts.hub.nq.path=x"])


def test_prompts_added_to_train_stay_there_and_leave_the_runs_own_split_unchanged(make_cfg, tmp_path):
    """`prompts.add_train`: other systems' answers join training only; the run's own prompts
    are chosen, and later split by the label stage, exactly as without them."""
    from spanuq.label.stage import assign_label_splits
    from spanuq.pipeline.records import LabeledResponse

    extra = tmp_path / "others.jsonl"
    extra.write_text("".join(json.dumps({"id": f"other-{i}", "text": "Who painted Guernica?", "split": "test",
                                         "response": f"Answer {i}: Picasso."}) + "\n" for i in range(6)))
    base = ("prompts.n_prompts=40", "prompts.split_fractions={train: 0.6, dev: 0.15, test: 0.25}")
    without = read_records(run_prompts(make_cfg("prompts.grounded=0", *base), progress=False), Prompt)
    cfg = make_cfg("prompts.grounded=0", *base, f"prompts.add_train=[{extra}]")
    with_added = read_records(run_prompts(cfg, progress=False), Prompt)
    assert with_added[:40] == without and len(with_added) == 46
    assert {p.split for p in with_added[40:]} == {"train"}  # the file said test: train only wins

    def labelled(prompts):
        return [LabeledResponse(prompt_id=p.id, domain=p.domain, split="train", response="x", n_tokens=1, spans=[],
                                u_seq=(i % 7) / 7) for i, p in enumerate(prompts)]

    a, b = labelled(without), labelled(with_added)
    assign_label_splits(cfg, a, {p.id: p for p in without})
    assign_label_splits(cfg, b, {p.id: p for p in with_added})
    assert [r.split for r in b[:40]] == [r.split for r in a] and {r.split for r in b[40:]} == {"train"}
    with pytest.raises(ValueError, match="appears twice"):
        run_prompts(make_cfg("prompts.grounded=0", *base, f"prompts.add_train=[{extra},{extra}]"), progress=False)
