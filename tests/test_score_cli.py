"""`spanuq score`: JSON that validates against the published schema, the HTML page, files of rows,
and the terminal view (colour on a TTY only, NO_COLOR respected)."""
import json

import jsonschema
import pytest

from spanuq.cli import main
from spanuq.score.schema import json_schema
from spanuq.score.views import terminal_view, to_terminal

ANSWER = "\n Marie Curie (1867–1934) won the Nobel Prize in Physics in 1903 and in Chemistry in 1911."


def test_the_published_schema_is_the_result_models(repo_root):
    assert json.loads((repo_root / "docs" / "score.schema.json").read_text()) == json_schema()


def test_score_json_validates_against_the_published_schema_and_writes_html(probe_dir, repo_root, tmp_path, capsys):
    (tmp_path / "answer.txt").write_text(ANSWER, encoding="utf-8")
    page = tmp_path / "page.html"
    rc = main(["score", "Who was Marie Curie?", "--response", f"@{tmp_path / 'answer.txt'}", "--json",
               "--html", str(page), "--model", str(probe_dir), "--threshold", "0", "-p", str(repo_root / "params.yaml")])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    jsonschema.validate(out, json.loads((repo_root / "docs" / "score.schema.json").read_text()))
    assert out["answer"] == ANSWER and out["spans"]
    assert all(ANSWER[s["start"]:s["end"]] == s["text"] for s in out["spans"])
    html = page.read_text(encoding="utf-8")
    assert html.startswith("<!doctype html>") and html.count('class="uq-item"') == len(out["spans"])


def test_score_file_records_row_errors_and_scores_the_rest(probe_dir, repo_root, tmp_path, capsys):
    rows = tmp_path / "rows.jsonl"
    rows.write_bytes("\n".join([
        json.dumps({"id": "a", "prompt": "Who was Marie Curie?", "response": ANSWER}),
        '{"prompt": "unterminated',
        json.dumps({"id": "c", "prompt": ""}),
        json.dumps({"prompt": "Capital of Australia?", "response": "Canberra, since 1913."}),
    ]).encode("utf-8") + b"\n" + '{"prompt": "Qui est né à Varsovie ?"}\n'.encode("latin-1")
        + json.dumps({"prompt": "Qui était Marie Curie ?", "response": "Marie Curie était une physicienne et chimiste "
                      "née à Varsovie en 1867."}, ensure_ascii=False).encode("utf-8") + b"\n")
    out = tmp_path / "scored.jsonl"
    assert main(["score", "--file", str(rows), "--out", str(out), "--model", str(probe_dir), "--threshold", "0",
                 "--no-progress", "-p", str(repo_root / "params.yaml")]) == 0
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [g["line"] for g in got] == [1, 2, 3, 4, 5, 6]
    assert got[0]["id"] == "a" and got[0]["result"]["answer"] == ANSWER
    assert "JSONDecodeError" in got[1]["error"] and got[2] == {"line": 3, "id": "c", "error": "the prompt is empty"}
    assert got[3]["result"]["spans"] and got[3]["result"]["warnings"] == []
    assert got[4] == {"line": 5, "error": "not UTF-8 text (invalid continuation byte at byte 21 of the line)"}
    assert "French" in got[5]["result"]["warnings"][0]  # scored, and it says so
    assert got[5]["result"]["status"] == "unverified"
    assert "3 of 6 rows scored, 3 errors recorded, 1 unverified" in capsys.readouterr().err


def test_terminal_view_colours_only_when_asked(scorer):
    r = scorer.score("Who was Marie Curie?", response=ANSWER)
    plain, coloured = terminal_view(r, colour_on=False), terminal_view(r, colour_on=True)
    assert "\x1b[" not in plain and "\x1b[48;2;" in coloured
    assert plain.startswith(to_terminal(r.answer, [(s.start, s.end, s.u) for s in r.spans], colour_on=False))
    assert "likely wrong" in plain and f"û_seq = {r.u_seq:.2f}" in plain
    assert all(repr(s.text) in plain for s in r.spans)


def test_colour_is_off_for_pipes_and_with_no_color(monkeypatch):
    import io

    from spanuq.score.commands import use_colour

    class TTY(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    assert use_colour("auto", TTY()) and not use_colour("auto", io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_colour("auto", TTY()) and use_colour("always", io.StringIO())
    with pytest.raises(SystemExit):
        main(["score", "--color", "sometimes"])


def test_a_response_file_that_cannot_be_read_is_named_before_the_backbone_loads(tmp_path, capsys, monkeypatch):
    import spanuq.score.commands as commands

    def no_backbone(*a, **k):
        raise AssertionError("the backbone was loaded for a file that cannot be read")

    monkeypatch.setattr(commands, "load_uq", no_backbone)
    (tmp_path / "latin1.txt").write_bytes("Marie Curie est née à Varsovie.".encode("latin-1"))
    for arg, message in [(f"@{tmp_path / 'latin1.txt'}", "latin1.txt: cannot read as UTF-8 text"),
                         (f"@{tmp_path / 'missing.txt'}", "response file not found"),
                         (f"@{tmp_path}", "is a directory, not a response file")]:
        assert main(["score", "Who was Marie Curie?", "--response", arg]) != 0
        assert message in capsys.readouterr().err


def test_a_response_file_is_its_text_without_the_last_line_break(probe_dir, repo_root, tmp_path, capsys):
    """A file ends with a line break that is not part of the answer (as ``$(cat file)`` drops it): the
    answer scored from ``@file`` is the one ``POST /score`` gets with the same text."""
    (tmp_path / "answer.txt").write_text(ANSWER + "\n", encoding="utf-8")
    assert main(["score", "Who was Marie Curie?", "--response", f"@{tmp_path / 'answer.txt'}", "--json",
                 "--model", str(probe_dir), "--threshold", "0", "-p", str(repo_root / "params.yaml")]) == 0
    assert json.loads(capsys.readouterr().out)["answer"] == ANSWER


@pytest.mark.parametrize("argv, message", [
    (["score", "Who?", "--response", ""], "the response is empty"),
    (["score", "   ", "--response", "An answer."], "the prompt is empty"),
    (["score", "Who?", "--response", "x" * 100_001], "max_response_chars"),
    (["score", "   ", "--stream"], "the prompt is empty"),
    (["refine", "Who?", "--response", "  "], "the response is empty"),
])
def test_bad_input_is_refused_before_any_model_loads(monkeypatch, capsys, argv, message):
    from spanuq.score.scorer import SpanUQ

    def no_loading(*a, **kw):
        raise AssertionError("SpanUQ.load was called for input that cannot be scored")

    monkeypatch.setattr(SpanUQ, "load", no_loading)
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_the_generator_help_names_the_configured_default(capsys):
    from spanuq.config import ScoreConfig

    with pytest.raises(SystemExit):
        main(["score", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "{auto,llamacpp,hf}" in text and f"(default: {ScoreConfig().generator}," in text
    assert "llamacpp server + one teacher-forced pass (default)" not in text
