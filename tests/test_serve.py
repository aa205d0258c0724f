"""`spanuq serve`, started by the tests on 127.0.0.1: the JSON API, bad input, concurrency, the web page."""
import asyncio
import json
import os
import time
from pathlib import Path

import httpx
import pytest

from servers import scoring_service

ANSWER = "Canberra is the capital of Australia. It was founded in 1913, and its lake is named after Walter Griffin."


@pytest.fixture(scope="module")
def service(scorer):
    """The real uvicorn server around the session's scorer, on a free loopback port."""
    with scoring_service(scorer) as (url, _):
        yield url


def test_score_answers_with_the_api_result_and_the_docs_are_served(service, scorer):
    r = httpx.post(f"{service}/score", json={"prompt": "What is the capital of Australia?", "response": ANSWER},
                   timeout=300)
    assert r.status_code == 200, r.text
    got = r.json()
    direct = scorer.score("What is the capital of Australia?", response=ANSWER)
    assert [(s["start"], s["end"]) for s in got["spans"]] == [(s.start, s.end) for s in direct.spans]
    assert [s["u"] for s in got["spans"]] == pytest.approx([s.u for s in direct.spans], abs=1e-4)
    health = httpx.get(f"{service}/health").json()
    assert health["backbone"] == "smollm2-135m" and health["probe"] == scorer.probe_source
    assert scorer.probe_source.startswith(f"probe {scorer.checkpoint}, sha256 ")  # a probe trained here, named
    assert "/score" in httpx.get(f"{service}/openapi.json").json()["paths"]
    assert httpx.get(f"{service}/docs").status_code == 200


@pytest.mark.parametrize("body, status, message", [
    ({"prompt": ""}, 422, "prompt is empty"),
    ({"prompt": "x" * 100_000}, 413, "max_prompt_chars"),
    (b'{"prompt": "Who', 400, "not valid JSON"),
    (b'{"prompt": "caf\xe9"}', 400, "not UTF-8"),
    ({"prompt": "Who?", "response": "word " * 25_000}, 413, "max_response_chars"),
    ({"prompt": "Who?", "colour": "red"}, 422, "colour: Extra inputs are not permitted"),
    ({"text": "Who?"}, 422, "prompt: Field required"),
    (b"x" * 600_000, 413, "larger than"),
    (b"[" * 10_000 + b"]" * 10_000, 400, "nests JSON too deeply"),
    (b'{"prompt": ' + b'{"a": ' * 10_000 + b"1" + b"}" * 10_001, 400, "nests JSON too deeply"),
])
def test_bad_requests_get_a_clear_4xx_and_the_service_stays_up(service, body, status, message):
    kw = {"content": body, "headers": {"content-type": "application/json"}} if isinstance(body, bytes) else {"json": body}
    r = httpx.post(f"{service}/score", timeout=300, **kw)
    assert r.status_code == status and message in r.json()["detail"], r.text
    assert httpx.get(f"{service}/health").json()["status"] == "ok"


@pytest.mark.parametrize("path", ["/render", "/score/batch"])
def test_deeply_nested_json_is_a_400_on_every_endpoint(service, path):
    r = httpx.post(f"{service}{path}", content=b"[" * 10_000 + b"]" * 10_000,
                   headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 400 and "nests JSON too deeply" in r.json()["detail"], r.text


def test_a_client_that_promises_a_body_and_hangs_up_costs_one_quiet_line(service, caplog):
    import logging
    import socket

    host, port = service.removeprefix("http://").split(":")
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            with socket.create_connection((host, int(port)), timeout=10) as s:
                s.sendall(b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: 5000\r\n\r\n{\"prompt\": \"Who")
            time.sleep(0.5)
        assert httpx.get(f"{service}/health").json()["status"] == "ok"
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
    quiet = [r for r in caplog.records if "disconnected before its request body arrived" in r.getMessage()]
    assert len(quiet) == 3 and all(r.levelno == logging.INFO and not r.exc_info for r in quiet)


@pytest.fixture(scope="module")
def quick_timeout_service(scorer):
    with scoring_service(scorer, body_timeout_s=2.0) as (url, _):
        yield url


def _raw(url: str, request: bytes, then=None, wait: float = 15) -> tuple[bytes, float]:
    """Send ``request`` on a raw socket, run ``then(sock)`` (e.g. trickle more bytes), read the answer;
    returns (the answer's bytes, seconds from the first byte sent to the answer's first byte)."""
    import socket

    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait) as s:
        t0 = time.monotonic()
        s.sendall(request)
        if then is not None:
            then(s)
        first = s.recv(65536)
        took = time.monotonic() - t0
        rest = b""
        try:
            while chunk := s.recv(65536):
                rest += chunk
        except OSError:
            pass
        return first + rest, took


HEAD = b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


def test_a_body_shorter_than_its_content_length_gets_a_408_after_the_body_timeout(quick_timeout_service):
    answer, took = _raw(quick_timeout_service, HEAD + b"Content-Length: 5000\r\n\r\n{\"prompt\": \"Who")
    assert answer.startswith(b"HTTP/1.1 408 ") and b"score.body_timeout_s" in answer, answer[:300]
    assert 1.5 < took < 8
    assert httpx.get(f"{quick_timeout_service}/health").json()["status"] == "ok"


def test_a_body_that_trickles_in_is_bounded_by_the_same_timeout(quick_timeout_service):
    def trickle(s):  # one byte every 0.4 s: never idle for long, never finished
        for _ in range(25):
            try:
                s.sendall(b" ")
            except OSError:
                return
            time.sleep(0.4)

    import threading

    def send(s):
        threading.Thread(target=trickle, args=(s,), daemon=True).start()

    answer, took = _raw(quick_timeout_service, HEAD + b"Content-Length: 400\r\n\r\n{\"prompt\": ", send)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:300]
    assert 1.5 < took < 8


def test_content_length_with_chunked_encoding_is_refused_at_once(quick_timeout_service):
    answer, took = _raw(quick_timeout_service, HEAD + b"Content-Length: 5000\r\nTransfer-Encoding: chunked\r\n\r\n"
                        b"10\r\n{\"prompt\": \"Who?\r\n")
    assert answer.startswith((b"HTTP/1.1 400 ", b"HTTP/1.1 408 ")), answer[:300]
    assert took < 8


def test_a_chunked_body_is_read_and_scored(quick_timeout_service):
    body = json.dumps({"prompt": "Capital?", "response": ANSWER}).encode()
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 40]), body[i:i + 40]) for i in range(0, len(body), 40))
    answer, _ = _raw(quick_timeout_service, HEAD + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                     + chunks + b"0\r\n\r\n", wait=300)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]


def test_one_context_size_everywhere_health_generation_and_errors(service, scorer):
    """/health, the llama.cpp server that generates and the error past it all say the backbone's context."""
    ctx = httpx.get(f"{service}/health").json()["limits"]["context_tokens"]
    assert ctx == scorer.max_context == scorer.model.config.max_position_embeddings
    httpx.post(f"{service}/score", json={"prompt": "Name a planet."}, timeout=300).raise_for_status()
    assert scorer.generation.server.n_ctx == ctx  # generation has the same room as the teacher-forced pass
    per_word = len(scorer.tok(" word" * 100, add_special_tokens=False)["input_ids"]) / 100
    limits = scorer.cfg.score.max_prompt_chars
    try:
        scorer.cfg.score.max_prompt_chars = 200_000
        too_long = "word " * int((ctx + 200) / per_word)
        r = httpx.post(f"{service}/score", json={"prompt": too_long}, timeout=600)
        assert r.status_code == 422 and f"context of {ctx:,} tokens" in r.json()["detail"], r.text
        assert "4,096" not in r.json()["detail"]
    finally:
        scorer.cfg.score.max_prompt_chars = limits


def test_batch_scores_every_item_and_reports_each_items_error(service):
    items = [{"prompt": "Capital?", "response": ANSWER}, {"prompt": "   "}, {"prompt": "Who?", "response": "Nobody knows."}]
    r = httpx.post(f"{service}/score/batch", json={"items": items}, timeout=300)
    res = r.json()["results"]
    assert r.status_code == 200 and len(res) == 3
    assert res[0]["answer"] == ANSWER and res[2]["answer"] == "Nobody knows."
    assert res[1] == {"status": 422, "error": "the prompt is empty"}
    assert httpx.post(f"{service}/score/batch", json={"items": items * 11}).status_code == 413


def test_fifty_concurrent_requests_are_all_answered(service):
    async def run():
        async with httpx.AsyncClient(timeout=600) as client:
            reqs = [client.post(f"{service}/score", json={"prompt": f"Question {i}?", "response": f"{ANSWER} ({i})"})
                    for i in range(50)]
            return await asyncio.gather(*reqs)

    before = httpx.get(f"{service}/health").json()["batches"]
    out = asyncio.run(run())
    assert [r.status_code for r in out] == [200] * 50
    assert sorted(r.json()["prompt"] for r in out) == sorted(f"Question {i}?" for i in range(50))
    assert all(r.json()["answer"].endswith(f"({r.json()['prompt'][9:-1]})") for r in out)  # each got its own answer
    batches = httpx.get(f"{service}/health").json()["batches"] - before
    assert batches < 50  # queued requests were scored together


def test_a_given_answer_is_scored_while_a_generation_waits_for_its_server(scorer):
    """The generation lane is busy with a job that waits (as a generation waits on the llama.cpp server,
    holding no model lock): a given answer's `/score` is answered meanwhile, from its own lane, and a
    prompt alone waits its turn behind the generation."""
    import threading

    release = threading.Event()
    with scoring_service(scorer) as (url, app):
        busy = app.state.worker.call(lambda m: release.wait(120))  # a generation, waiting on its server
        try:
            t0 = time.perf_counter()
            r = httpx.post(f"{url}/score", json={"prompt": "What is the capital of Australia?", "response": ANSWER},
                           timeout=60)
            assert r.status_code == 200 and r.json()["answer_source"] == "given"
            assert time.perf_counter() - t0 < 30 and not busy.done()
            health = httpx.get(f"{url}/health").json()
            assert health["lanes"] == {"answers": 0, "generate": 0}
            with pytest.raises(httpx.ReadTimeout):  # a prompt alone is a generation: it waits in that lane
                httpx.post(f"{url}/score", json={"prompt": "What is the capital of Australia?"}, timeout=3)
        finally:
            release.set()
        assert busy.result(timeout=30) is True


def test_the_page_has_an_icon(service):
    """A browser asks for /favicon.ico: the trial's console showed a 404."""
    page = httpx.get(service).text
    assert '<link rel="icon" href="/favicon.svg" type="image/svg+xml">' in page
    for path in ("/favicon.svg", "/favicon.ico"):
        r = httpx.get(f"{service}{path}")
        assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg+xml"), (path, r.status_code)
        assert r.text.lstrip().startswith("<svg") and "</svg>" in r.text


@pytest.mark.browser
def test_the_page_loads_in_a_browser_without_console_errors(service):
    """Chromium loads the page and its icon: no failed request, no console error or warning."""
    from browser import chromium

    with chromium() as browser:
        page = browser.new_page()
        console, failed = [], []
        page.on("console", lambda m: console.append(m.text) if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: console.append(str(e)))
        page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        page.goto(service, wait_until="load")
        page.wait_for_timeout(2000)  # the icon is asked for after the load event
    assert console == [] and failed == [], (console, failed)


@pytest.mark.browser
def test_the_web_page_shows_the_spans_and_scores_of_the_json_api(service, tmp_path):
    from browser import chromium

    prompt = "Who was Marie Curie?"
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1000, "height": 760})
        page.goto(service)
        page.fill("#prompt", prompt)
        page.uncheck("#stream")  # POST /score (tests/test_stream.py tests the streamed page)
        page.click("#submit")
        page.wait_for_selector("#result[data-ready]", timeout=300_000)
        assert page.inner_text("#status").endswith("s"), page.inner_text("#status")
        shown = page.eval_on_selector_all("li.uq-item", "els => els.map(e => [+e.dataset.i, +e.dataset.start, +e.dataset.end, +e.dataset.u])")
        covered = page.eval_on_selector_all("span.uq", "els => els.flatMap(e => e.dataset.spans.split(' ').map(Number))")
        titles = page.eval_on_selector_all("span.uq", "els => els.map(e => e.title)")
        answer = page.eval_on_selector("#result", "e => JSON.parse(e.dataset.json).answer")
        out = Path(os.environ.get("SPANUQ_ARTIFACTS", tmp_path))
        out.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out / "web.png"), full_page=True)
    api = httpx.post(f"{service}/score", json={"prompt": prompt}, timeout=300).json()
    assert answer == api["answer"] and api["spans"]
    assert len(shown) == len(api["spans"]) and set(covered) == set(range(len(api["spans"])))
    assert [u for *_, u in shown] == sorted((u for *_, u in shown), reverse=True)  # most doubtful first
    for i, start, end, u in shown:
        s = api["spans"][i]
        assert (start, end) == (s["start"], s["end"]) and u == pytest.approx(s["u"], abs=1e-4)
    assert all(t.startswith("û = ") and ": chance the backbone would not say this again" in t
               for t in titles)  # hover shows the score and what it is
    assert (out / "web.png").stat().st_size > 10_000
