"""Streaming scoring: `SpanUQ.score_stream`, `POST /score/stream` (Server-Sent Events), `spanuq score --stream`."""
import json
import re
import threading
import time

import httpx
import pytest

from servers import scoring_service

PROMPT = "Who was Marie Curie?"


def spans(result) -> list[tuple[int, int, float]]:
    return [(s.start, s.end, s.u) for s in result.spans]


def assert_same_scores(a, b) -> None:
    """Same answer, same spans (characters), û and û_seq within 1e-4."""
    assert a.answer == b.answer and a.n_tokens == b.n_tokens
    assert [(s.start, s.end) for s in a.spans] == [(s.start, s.end) for s in b.spans]
    for x, y in zip(a.spans, b.spans):
        assert x.u == pytest.approx(y.u, abs=1e-4) and x.validity == pytest.approx(y.validity, abs=1e-4)
    assert a.u_seq == pytest.approx(b.u_seq, abs=1e-4)


@pytest.mark.parametrize("generator", ["hf", "llamacpp"])
def test_the_last_streamed_update_equals_score_on_its_answer(scorer, generator):
    updates = list(scorer.score_stream(PROMPT, generator=generator, every=4))
    final = updates[-1]
    assert final.done and not any(u.done for u in updates[:-1]) and [u.seq for u in updates] == list(range(len(updates)))
    assert len(updates) >= 3  # 24 tokens, every 4: spans appear before the answer is complete
    r = final.result
    assert r.answer_source == "generated" and r.generator == generator and r.spans
    assert_same_scores(r, scorer.score(PROMPT, response=r.answer, answer_source="generated"))
    if generator == "hf":
        assert r.timings.backbone_s == 0  # the states were captured while generating: no second pass
    for u in updates[:-1]:  # each partial answer is a prefix of the final one, scored as score() scores it
        assert r.answer.startswith(u.result.answer) and 0 < u.result.n_tokens <= u.n_generated
        assert all(u.result.answer[s.start:s.end] == s.text for s in u.result.spans)
    assert [u.n_generated for u in updates] == sorted(u.n_generated for u in updates)


def test_a_partial_update_equals_score_on_the_partial_answer(scorer):
    first = next(iter(scorer.score_stream(PROMPT, generator="hf", every=6, at_clauses=False)))
    assert not first.done and first.n_generated == 6
    assert_same_scores(first.result, scorer.score(PROMPT, response=first.result.answer, answer_source="generated"))


@pytest.mark.parametrize("generator", ["hf", "llamacpp"])
def test_every_update_says_the_backbone_generated_the_answer_and_warns_of_nothing(scorer, generator):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        updates = list(scorer.score_stream(PROMPT, generator=generator, every=6))
    assert len(updates) >= 2
    assert {(u.result.answer_source, u.result.generator) for u in updates} == {("generated", generator)}
    assert [str(w.message) for w in caught if issubclass(w.category, (FutureWarning, DeprecationWarning))] == []


def test_cancel_stops_the_generation_at_the_next_token(scorer):
    cancel = threading.Event()
    stream = scorer.score_stream(PROMPT, generator="hf", every=2, at_clauses=False, cancel=cancel)
    first = next(stream)
    cancel.set()
    assert list(stream) == [] and first.n_generated == 2


def test_bad_input_is_refused_before_anything_is_generated(scorer):
    from spanuq import InputError

    with pytest.raises(InputError, match="empty"):
        next(scorer.score_stream("   "))
    with pytest.raises(ValueError, match="every"):
        next(scorer.score_stream(PROMPT, every=0))


# ---------------------------------------------------------------------------------- the service
@pytest.fixture(scope="module")
def app_url(scorer):
    """The real uvicorn server around the session's scorer; yields (url, the app's worker)."""
    with scoring_service(scorer) as (url, app):
        yield url, app.state.worker


def sse_events(response):
    """(event, data) of a Server-Sent Events response, as they arrive."""
    event, data = "message", []
    for line in response.iter_lines():
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line and data:
            yield event, json.loads("\n".join(data))
            event, data = "message", []


def test_the_stream_endpoint_ends_with_the_result_of_post_score(app_url):
    url, _ = app_url
    with httpx.stream("POST", f"{url}/score/stream", json={"prompt": PROMPT}, timeout=300) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = list(sse_events(r))
    assert {e for e, _ in events} == {"update"} and len(events) >= 2
    final = events[-1][1]
    assert final["done"] and not any(d["done"] for _, d in events[:-1])
    api = httpx.post(f"{url}/score", json={"prompt": PROMPT, "response": final["result"]["answer"]}, timeout=300).json()
    got = [(s["start"], s["end"]) for s in final["result"]["spans"]]
    assert got == [(s["start"], s["end"]) for s in api["spans"]] and got
    for s, t in zip(final["result"]["spans"], api["spans"]):
        assert s["u"] == pytest.approx(t["u"], abs=1e-4)


@pytest.mark.parametrize("body, status, message", [
    ({"prompt": ""}, 422, "empty"),
    ({"prompt": "x" * 9_000}, 413, "max_prompt_chars"),
    ({"prompt": PROMPT, "response": "Paris."}, 422, "POST /score"),
    ({"question": PROMPT}, 422, "prompt"),
])
def test_bad_stream_requests_get_a_clear_4xx_before_any_event(app_url, body, status, message):
    url, worker = app_url
    before = dict(worker.streams)
    r = httpx.post(f"{url}/score/stream", json=body, timeout=30)
    assert r.status_code == status and message in r.json()["detail"]
    assert r.headers["content-type"].startswith("application/json") and worker.streams == before  # nothing ran


def test_a_client_that_leaves_mid_stream_stops_its_generation_and_the_service_goes_on(app_url, scorer, monkeypatch):
    url, worker = app_url
    # a long, slow answer (transformers, 128 tokens, an update per token), so the client leaves mid-answer
    monkeypatch.setattr(scorer, "generator", "hf")
    monkeypatch.setattr(scorer.cfg, "score", scorer.cfg.score.model_copy(update={
        "max_new_tokens": 128, "stream_every": 1}))
    before = dict(worker.streams)
    with httpx.stream("POST", f"{url}/score/stream", json={"prompt": "Tell me about the history of Rome."},
                      timeout=300) as r:
        event, first = next(sse_events(r))
        assert event == "update" and not first["done"]
    # the connection is closed here, after one update; the worker notices at the next token
    deadline = time.monotonic() + 60
    while worker.streams["cancelled"] == before["cancelled"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert worker.streams["cancelled"] == before["cancelled"] + 1 and worker.streams["done"] == before["done"]
    monkeypatch.undo()
    ok = httpx.post(f"{url}/score", json={"prompt": PROMPT, "response": "Marie Curie was a physicist."}, timeout=300)
    assert ok.status_code == 200 and ok.json()["spans"]
    health = httpx.get(f"{url}/health", timeout=10).json()
    assert health["status"] == "ok" and health["queued"] == 0


@pytest.mark.browser
def test_the_page_colours_spans_in_as_the_answer_streams_and_ends_with_post_score(app_url, tmp_path):
    import os
    from pathlib import Path

    from browser import chromium

    url, _ = app_url
    out = Path(os.environ.get("SPANUQ_ARTIFACTS", tmp_path))
    out.mkdir(parents=True, exist_ok=True)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1000, "height": 700})
        page.goto(url)
        page.fill("#prompt", PROMPT)
        assert page.is_checked("#stream")  # streaming is the default when the backbone answers
        page.click("#submit")
        page.wait_for_selector("#result li.uq-item", timeout=300_000)  # spans shown before the answer is complete
        page.wait_for_selector("#result[data-ready]", timeout=300_000)
        assert not page.inner_text("#status").endswith("…"), page.inner_text("#status")
        drawn = int(page.eval_on_selector("#result", "e => e.dataset.updates"))
        shown = page.eval_on_selector_all("li.uq-item", "els => els.map(e => [+e.dataset.i, +e.dataset.start, +e.dataset.end, +e.dataset.u])")
        covered = page.eval_on_selector_all("span.uq", "els => els.flatMap(e => e.dataset.spans.split(' ').map(Number))")
        answer = page.eval_on_selector("#result", "e => JSON.parse(e.dataset.json).answer")
        page.screenshot(path=str(out / "stream.png"), full_page=True)
    assert drawn >= 2  # the page was redrawn as the answer grew
    api = httpx.post(f"{url}/score", json={"prompt": PROMPT, "response": answer}, timeout=300).json()
    assert api["spans"] and len(shown) == len(api["spans"]) and set(covered) == set(range(len(api["spans"])))
    assert [u for *_, u in shown] == sorted((u for *_, u in shown), reverse=True)  # most doubtful first
    for i, start, end, u in shown:
        s = api["spans"][i]
        assert (start, end) == (s["start"], s["end"]) and u == pytest.approx(s["u"], abs=1e-4)
    assert (out / "stream.png").stat().st_size > 10_000


# ---------------------------------------------------------------------------------- the command line
def test_score_stream_prints_one_plain_line_per_update_when_piped(probe_dir, repo_root, capsys):
    from spanuq.cli import main

    assert main(["score", PROMPT, "--stream", "--generator", "hf", "--model", str(probe_dir), "--threshold", "0",
                 "-o", "score.max_new_tokens=16", "-o", "score.stream_every=4", "-p", str(repo_root / "params.yaml")]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if re.match(r"\[ *\d+ tokens", line)]
    assert "\x1b[" not in out and len(lines) >= 3 and lines[-1].startswith("[ 16 tokens") and ", done]" in lines[-1]
    assert not lines[-2].startswith("[ 16 tokens")  # the last token's update is the final one, not one more
    assert "û_seq = " in out  # the final answer's full view follows the lines


def test_the_live_view_redraws_over_the_rows_it_drew(monkeypatch):
    import io
    import os

    from spanuq.score.views import LiveTerminal

    monkeypatch.setattr("shutil.get_terminal_size", lambda *a: os.terminal_size((10, 24)))
    out = io.StringIO()
    live = LiveTerminal(out)
    live.draw("\x1b[48;2;1;2;3mabcdefghijkl\x1b[0m\nxy")  # 12 visible characters wrap onto 2 rows, + 1 row
    live.draw("done")
    second = out.getvalue().split("xy\n", 1)[1]
    assert second == "\x1b[3F\x1b[Jdone\n" and live.rows == 1
