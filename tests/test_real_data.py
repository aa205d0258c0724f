"""Public sets with real sources: `spanuq import-real` fetches each pinned file, checks it, normalises it into
real/<set>.jsonl.gz; a file that differs or cannot be had is a clear error naming it, never skipped."""
import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from spanuq.cli import main
from spanuq.data import real
from spanuq.data.real import RealDataError, import_set, load_items

FIXTURES = Path(__file__).parent / "fixtures" / "real"
FILES = {"wice": {"data/non_supported_tokens/test.jsonl": "wice_test.jsonl"},
         "xquad": {"xquad.en.json": "xquad.en.json"},
         "summedits": {"data/summedits/summedits_news.json": "summedits_news.json"}}


@pytest.fixture()
def upstream(tmp_path, monkeypatch):
    """A git repository holding the fixture files at the sets' paths, and a catalog pinning them."""
    repo = tmp_path / "upstream"
    for paths in FILES.values():
        for path, name in paths.items():
            (repo / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(FIXTURES / name, repo / path)
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "fixtures"], check=True)
    commit = subprocess.run(git + ["rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    cat = {"split_shares": {"train": 60, "dev": 15, "test": 25}, "sets": {
        name: {"title": name, "repository": f"example/{name}", "commit": commit, "license": "test",
               "files": {p: hashlib.sha256((FIXTURES / f).read_bytes()).hexdigest() for p, f in paths.items()}}
        for name, paths in FILES.items()}}
    monkeypatch.setattr(real, "catalog", lambda: cat)
    return repo


def test_each_set_is_read_from_a_local_copy_checked_and_normalised(upstream, tmp_path):
    out = tmp_path / "real"
    for name in FILES:
        import_set(name, out, source=upstream / ".git")  # a git directory: the file at the pinned commit
    wice = load_items("wice", real_dir=out)
    claim = wice[0]
    assert [claim.answer[s:e] for s, e in claim.marks] == ["born Beulah Irene Herwick"]
    assert claim.split == "test" and claim.article == "Irene Hervey" and claim.question == "Tell me about Irene Hervey."
    assert claim.sources[0]["text"].startswith("(meta data) TITLE: Irene Hervey")
    xq = load_items("xquad", real_dir=out)
    assert [q.references for q in xq] == [["Joseph Strauss"], ["Irving Morrow"]]
    assert len({q.split for q in xq}) == 1  # one article: one split
    se = {it.id.rsplit("/", 1)[-1]: it for it in load_items("summedits", real_dir=out)}
    assert se["doc1_og"].label == "supported" and se["doc1_og"].marks == []
    edited = se["doc1_e1"]
    assert edited.label == "not_supported" and [edited.answer[s:e] for s, e in edited.marks] == ["cut"]
    assert (out / "wice.provenance.json").read_text().count(hashlib.sha256((FIXTURES / "wice_test.jsonl").read_bytes()).hexdigest()) == 1


def test_the_same_files_give_the_same_bytes_from_a_checkout_or_a_git_directory(upstream, tmp_path):
    a = import_set("xquad", tmp_path / "a", source=upstream)  # a working tree
    b = import_set("xquad", tmp_path / "b", source=upstream / ".git")
    assert a.read_bytes() == b.read_bytes()


def test_a_file_that_differs_or_is_missing_is_an_error_naming_it(upstream, tmp_path):
    (upstream / "xquad.en.json").write_text('{"data": []}')  # the working tree no longer holds the pinned file
    with pytest.raises(RealDataError, match=r"example/xquad@.*xquad.en.json from .* has SHA-256 .* the catalog pins"):
        import_set("xquad", tmp_path / "out", source=upstream)
    with pytest.raises(RealDataError, match="holds neither the file nor a git directory"):
        import_set("wice", tmp_path / "out", source=tmp_path / "nowhere")
    assert not (tmp_path / "out" / "wice.jsonl.gz").exists()


def test_import_real_on_the_command_line_says_what_it_wrote_or_why_not(upstream, tmp_path, capsys):
    assert main(["import-real", "summedits", "--from", str(upstream), "--out", str(tmp_path)]) == 0
    assert "summedits.jsonl.gz" in capsys.readouterr().out
    assert main(["import-real", "nothing"]) == 2
    assert "no set 'nothing'" in capsys.readouterr().err
    assert main(["import-real", "wice", "xquad", "--from", str(upstream)]) == 2
    assert "name the one set" in capsys.readouterr().err


def test_the_committed_sets_are_split_by_article_and_name_their_source():
    for name in ("wice", "xquad", "summedits"):
        items = load_items(name)
        splits: dict[str, set] = {}
        for it in items:
            splits.setdefault(it.article, set()).add(it.split)
        assert all(len(s) == 1 for s in splits.values()), f"{name}: an article in two splits"
        assert {it.split for it in items} == {"train", "dev", "test"}
        assert (real.REAL_DIR / f"{name}.provenance.json").is_file()
    wice_test = load_items("wice", "test")
    assert len(wice_test) == 105 and all(it.marks for it in wice_test)
