"""`spanuq serve`'s OpenAI-compatible endpoints, driven by the official `openai` client (sync, async,
streaming) as an application would: the backbone answering, and an upstream llama.cpp server
answering (`--upstream`), each reading spans whose characters slice ``message.content``."""
import asyncio
import json

import httpx
import pytest

from servers import scoring_service

openai = pytest.importorskip("openai", reason="needs `pip install openai` (the dev extra)")

PROMPT = "What is the capital of Australia?"
BACKBONE = "smollm2-135m"


def check_spans(content: str, ext: dict) -> None:
    """The extension's spans index the content they came with, character for character."""
    assert ext["content_chars"] <= len(content)
    for s in ext["spans"]:
        assert 0 <= s["start"] < s["end"] <= ext["content_chars"]
        assert content[s["start"]: s["end"]] == s["text"]


def same_scores(a: dict, b: dict) -> None:
    """Two records of one answer (an extension, a /score result): the same spans, û within 1e-4."""
    assert [(s["start"], s["end"], s["text"]) for s in a["spans"]] == [(s["start"], s["end"], s["text"])
                                                                      for s in b["spans"]]
    assert [s["u"] for s in a["spans"]] == pytest.approx([s["u"] for s in b["spans"]], abs=1e-4)
    assert [s["nu"] for s in a["spans"]] == pytest.approx([s["nu"] for s in b["spans"]], rel=1e-3)
    assert a["u_seq"] == pytest.approx(b["u_seq"], abs=1e-4)
    assert a["status"] == b["status"]


@pytest.fixture(scope="module")
def backbone_service(scorer):
    with scoring_service(scorer) as (url, app):
        yield url, app


@pytest.fixture(scope="module")
def upstream_service(scorer, llama_server):
    """The same service forwarding to a real llama.cpp server on the shipped GGUF (`spanuq serve --upstream`)."""
    from spanuq.score.openai.engines import Upstream

    upstream = Upstream(llama_server.base_url)
    upstream.check()
    with scoring_service(scorer, upstream=upstream) as (url, app):
        yield url, app
    upstream.close()


def client(url: str):
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)


# ------------------------------------------------------------------ the backbone answers
def test_models_lists_the_backbone(backbone_service):
    url, _ = backbone_service
    models = client(url).models.list()
    assert [m.id for m in models.data] == [BACKBONE]
    assert client(url).models.retrieve(BACKBONE).id == BACKBONE


def test_completion_carries_spans_that_slice_the_content_and_equal_score(backbone_service, scorer):
    url, _ = backbone_service
    r = client(url).chat.completions.create(model=BACKBONE, messages=[{"role": "user", "content": PROMPT}])
    content, ext = r.choices[0].message.content, r.spanuq
    assert r.object == "chat.completion" and r.choices[0].finish_reason in ("stop", "length") and content
    assert ext["done"] and ext["status"] == "scored" and ext["status_reasons"] == []
    assert ext["spans"], "the test probe (threshold 0) keeps spans"
    check_spans(content, ext)
    assert ext["probe"]["sha256"] == scorer_sha(scorer) and ext["probe"]["backbone"] == BACKBONE
    assert r.usage.completion_tokens > 0 and r.usage.prompt_tokens > 20
    # omitted temperature: greedy, the answer score(prompt) gives, scored the same
    direct = httpx.post(f"{url}/score", json={"prompt": PROMPT}, timeout=300).json()
    assert direct["answer"] == content
    same_scores(ext, direct)


def scorer_sha(scorer) -> str:
    from spanuq.pipeline.files import sha256_file

    return sha256_file(scorer.checkpoint / "model.safetensors")


def test_async_client(backbone_service):
    url, _ = backbone_service

    async def ask():
        c = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
        rs = await asyncio.gather(*[c.chat.completions.create(
            model=BACKBONE, messages=[{"role": "user", "content": q}], max_tokens=16)
            for q in ("Who wrote Hamlet?", "What is the boiling point of water?")])
        await c.close()
        return rs

    for r in asyncio.run(ask()):
        check_spans(r.choices[0].message.content, r.spanuq)
        assert r.usage.completion_tokens <= 16


def test_stream_chunks_carry_span_updates_and_end_equal_to_score(backbone_service):
    url, _ = backbone_service
    stream = client(url).chat.completions.create(model=BACKBONE, messages=[{"role": "user", "content": PROMPT}],
                                                 stream=True, stream_options={"include_usage": True})
    content, updates, finals, usage = "", [], [], None
    for ch in stream:
        assert ch.object == "chat.completion.chunk"
        if ch.usage is not None:
            usage = ch.usage
        if not ch.choices:
            continue
        content += ch.choices[0].delta.content or ""
        ext = (ch.model_extra or {}).get("spanuq")
        if ext is not None:
            check_spans(content, ext)  # offsets into the content streamed so far
            (finals if ext["done"] else updates).append(ext)
            if ext["done"]:
                assert ch.choices[0].finish_reason in ("stop", "length")
    assert len(finals) == 1 and updates, "span updates while generating, one final"
    assert finals[0]["content_chars"] == len(content)
    assert usage is not None and usage.completion_tokens > 0
    direct = httpx.post(f"{url}/score", json={"prompt": PROMPT, "response": content}, timeout=300).json()
    same_scores(finals[0], direct)


def test_a_greedy_answer_does_not_depend_on_what_the_server_served_before(backbone_service):
    """The same greedy request gives one answer cold and warm, streamed and not, after itself and after another
    prompt (the llama.cpp server reused the KV cache of the prefix a request shared with the one before,
    so a near tie flipped "2,417.5 metres" to "2,401.5 metres" between the first request and the next ones)."""
    url, _ = backbone_service
    other, prompt = "How tall is Mount Kosciuszko?", "How high is Mont Blanc?"

    def answer(q: str, stream: bool) -> str:
        kw = {"model": BACKBONE, "messages": [{"role": "user", "content": q}], "max_tokens": 24}
        if not stream:
            return client(url).chat.completions.create(**kw).choices[0].message.content
        return "".join(ch.choices[0].delta.content or "" for ch in client(url).chat.completions.create(stream=True, **kw)
                       if ch.choices)

    answer(other, False)  # the server last served another prompt, which shares the system prompt's tokens
    got = [answer(prompt, False), answer(prompt, False), answer(prompt, True), answer(prompt, False)]
    answer(other, True)
    got.append(answer(prompt, True))
    assert len(set(got)) == 1, got
    assert got[0].strip()


def test_multi_turn_scores_the_new_answer_in_the_whole_conversation(backbone_service, scorer):
    from spanuq.score.openai.conversation import conversation
    from spanuq.score.openai.records import ChatRequest

    url, _ = backbone_service
    messages = [{"role": "system", "content": "You are a helpful assistant. Answer factually in two or three sentences."},
                {"role": "user", "content": "Which country is Canberra in?"},
                {"role": "assistant", "content": "Canberra is in Australia."},
                {"role": "user", "content": "When was it founded?"}]
    r = client(url).chat.completions.create(model=BACKBONE, messages=messages, max_tokens=24)
    content, ext = r.choices[0].message.content, r.spanuq
    check_spans(content, ext)
    # what was scored: this answer read after the whole conversation (earlier turns are context, not scored)
    conv = conversation(ChatRequest(model=BACKBONE, messages=messages), scorer.tok, scorer.system_prompt)
    assert "Canberra is in Australia." in conv.chat and conv.prompt == "When was it founded?"
    direct = scorer.score_many([{"prompt": conv.prompt, "response": content}], progress=False,
                               chats=[conv.chat])[0].model_dump()
    same_scores(ext, direct)
    alone = httpx.post(f"{url}/score", json={"prompt": conv.prompt, "response": content}, timeout=300).json()
    assert [s["u"] for s in alone["spans"]] != pytest.approx([s["u"] for s in ext["spans"]], abs=1e-6), \
        "the conversation before the last question changes the states, so the scores"


def test_langchain_chat_openai_reads_the_extension(backbone_service):
    lc = pytest.importorskip("langchain_openai", reason="needs `pip install langchain-openai`")
    url, _ = backbone_service
    llm = lc.ChatOpenAI(base_url=f"{url}/v1", api_key="unused", model=BACKBONE, include_response_headers=True,
                        max_retries=0, max_tokens=24)
    msg = llm.invoke("Who painted the Mona Lisa?")
    ext = json.loads(msg.response_metadata["headers"]["x-spanuq"])
    assert ext["done"] and ext["status"] == "scored"
    check_spans(msg.content, ext)
    chunks = list(llm.stream("Who painted the Mona Lisa?"))  # streaming through LangChain still works
    assert "".join(c.content for c in chunks) == msg.content


def test_errors_have_openai_shape_and_the_service_stays_up(backbone_service):
    url, _ = backbone_service
    c = client(url)
    with pytest.raises(openai.NotFoundError) as e:
        c.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Hi"}])
    assert e.value.code == "model_not_found" and "smollm2-135m" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=BACKBONE, messages=[{"role": "user", "content": "Hi"}], n=2)
    assert e.value.param == "n"
    with pytest.raises(openai.BadRequestError, match="text only"):
        c.chat.completions.create(model=BACKBONE, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "http://example.com/a.png"}}]}])
    with pytest.raises(openai.BadRequestError, match="no user message"):
        c.chat.completions.create(model=BACKBONE, messages=[{"role": "system", "content": "Be brief."}])
    with pytest.raises(openai.BadRequestError, match="max_prompt_chars") as e:
        c.chat.completions.create(model=BACKBONE, messages=[{"role": "user", "content": "word " * 7000}])
    assert e.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError, match="exceeds the context") as e:
        c.chat.completions.create(model=BACKBONE, messages=[{"role": "user", "content": "Hi"}], max_tokens=100_000)
    assert e.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError, match="tool"):
        c.chat.completions.create(model=BACKBONE, messages=[{"role": "user", "content": "Hi"}],
                                  tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])
    for body, status, code in [(b'{"model": "x", "messages": [', 400, "invalid_body"),
                               (b'{"model": "smollm2-135m", "messages": []}', 400, "invalid_value"),
                               (b'{"model": "smollm2-135m", "messages": [{"role": "user", "content": "caf\xe9"}]}',
                                400, "invalid_body")]:
        r = httpx.post(f"{url}/v1/chat/completions", content=body, headers={"content-type": "application/json"})
        assert r.status_code == status and set(r.json()["error"]) == {"message", "type", "param", "code"}, r.text
        assert r.json()["error"]["code"] == code and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(f"{url}/v1/completions", json={"model": BACKBONE, "prompt": "Hi"})
    assert r.status_code == 404 and "chat/completions" in r.json()["error"]["message"]
    ok = c.chat.completions.create(model=BACKBONE, messages=[{"role": "user", "content": "Hi"}], max_tokens=8)
    assert ok.choices[0].message.content


def test_a_client_that_leaves_mid_stream_does_not_hold_the_service(backbone_service):
    url, app = backbone_service
    before = dict(app.state.worker.streams)
    body = {"model": BACKBONE, "messages": [{"role": "user", "content": "Tell me about the Roman Empire."}],
            "stream": True, "max_tokens": 120}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=300) as r:
        events = 0
        for line in r.iter_lines():
            events += line.startswith("data:")
            if events >= 3:
                break  # the client leaves: closing the response drops the connection
    r = client(url).chat.completions.create(model=BACKBONE, messages=[{"role": "user", "content": PROMPT}],
                                            max_tokens=12)
    assert r.choices[0].message.content
    streams = app.state.worker.streams
    assert streams["cancelled"] == before["cancelled"] + 1 and streams["failed"] == before["failed"]


# ------------------------------------------------------------------ an upstream server answers
def test_upstream_completion_is_scored_as_the_upstream_wrote_it(upstream_service, llama_server, scorer):
    url, _ = upstream_service
    models = client(url).models.list()
    assert [m.id for m in models.data] == ["smollm2"]  # the upstream's own list
    r = client(url).chat.completions.create(model="smollm2", messages=[{"role": "user", "content": PROMPT}],
                                            max_tokens=40, temperature=0)
    content, ext = r.choices[0].message.content, r.spanuq
    assert ext["answer_source"] == "given" and ext["status"] == "scored", ext["status_reasons"]
    check_spans(content, ext)
    direct = openai.OpenAI(base_url=llama_server.base_url, api_key="x").chat.completions.create(
        model="smollm2", messages=[{"role": "system", "content": scorer.system_prompt},
                                   {"role": "user", "content": PROMPT}], max_tokens=40, temperature=0)
    assert content == direct.choices[0].message.content.strip()  # forwarded with the probe's system prompt
    score = httpx.post(f"{url}/score", json={"prompt": PROMPT, "response": content}, timeout=300).json()
    same_scores(ext, score)


def test_upstream_stream_ends_equal_to_score(upstream_service):
    url, _ = upstream_service
    content, final = "", None
    for ch in client(url).chat.completions.create(model="smollm2", stream=True, max_tokens=40, temperature=0,
                                                  messages=[{"role": "user", "content": PROMPT}]):
        if ch.choices:
            content += ch.choices[0].delta.content or ""
        ext = (ch.model_extra or {}).get("spanuq")
        if ext:
            check_spans(content, ext)
            final = ext if ext["done"] else final
    assert final is not None and final["content_chars"] == len(content)
    same_scores(final, httpx.post(f"{url}/score", json={"prompt": PROMPT, "response": content}, timeout=300).json())


def test_upstream_answer_of_any_model_is_scored_as_a_given_answer(upstream_service):
    url, _ = upstream_service
    # llama.cpp answers any model name with its one model and echoes the name: to SpanUQ it is another model,
    # whose answer is a given answer (no --upstream-model declared it to be the probe's backbone)
    r = client(url).chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": PROMPT}],
                                            max_tokens=24)
    ext = r.spanuq
    assert r.model == "gpt-4o-mini" and ext["answer_source"] == "given"
    assert ext["status"] == "scored" and ext["status_reasons"] == []


def test_upstream_empty_answer_is_unverified_not_clean(upstream_service):
    url, _ = upstream_service
    c = client(url)
    first = c.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": PROMPT}], max_tokens=8,
                                      temperature=0).choices[0].message.content
    r = c.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": PROMPT}], max_tokens=8,
                                  temperature=0, stop=[first[:4]])  # the upstream stops before its first word
    assert r.choices[0].message.content == ""
    assert r.spanuq["status"] == "unverified" and r.spanuq["spans"] == [] and r.spanuq["u_seq"] is None
    assert [x["code"] for x in r.spanuq["status_reasons"]] == ["empty_answer"]


def test_upstream_errors_pass_through_in_openai_shape(upstream_service):
    url, _ = upstream_service
    digits = " ".join(str(i % 10) for i in range(3000))  # ~3,000 tokens: within SpanUQ's limits, past llama.cpp's n_ctx
    with pytest.raises(openai.BadRequestError, match="upstream refused") as e:
        client(url).chat.completions.create(model="smollm2", messages=[{"role": "user", "content": digits}])
    assert e.value.code == "context_length_exceeded"  # llama.cpp's own 400, passed on


def test_upstream_stream_client_leaves_and_the_next_request_succeeds(upstream_service):
    url, app = upstream_service
    before = dict(app.state.worker.streams)
    body = {"model": "smollm2", "messages": [{"role": "user", "content": "Tell me about the Roman Empire."}],
            "stream": True, "max_tokens": 120}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=300) as r:
        for n, line in enumerate(r.iter_lines()):
            if n >= 4:
                break
    r = client(url).chat.completions.create(model="smollm2", messages=[{"role": "user", "content": PROMPT}],
                                            max_tokens=12)
    assert r.choices[0].message.content and r.spanuq["done"]
    assert app.state.worker.streams["cancelled"] == before["cancelled"] + 1


def test_streamed_text_is_shown_only_where_it_is_final():
    """Content deltas never show what the final content drops: leading/trailing blanks, a stop string, or a
    tail that may still turn into one."""
    from spanuq.score.openai.conversation import visible

    assert visible("  The answer ", []) == "The answer"
    assert visible("Paris.\n", ["\n\n"]) == "Paris."
    assert visible("Paris. ##", ["###"]) == "Paris."
    assert visible("Paris.### more", ["###"]) == "Paris."


def test_spanuq_serve_upstream_command(llama_server, probe_dir, repo_root, tmp_path):
    """`spanuq serve --upstream URL` as a user starts it; an upstream that cannot be reached is a clear
    error before anything loads."""
    import subprocess
    import sys

    from servers import free_port, process, wait_http

    env = {**__import__("os").environ, "PYTHONPATH": str(repo_root)}
    bad = subprocess.run([sys.executable, "-m", "spanuq.cli", "serve", "--upstream", "http://127.0.0.1:9/v1",
                          "--model", str(probe_dir)], env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "cannot reach" in bad.stderr
    port = free_port()
    cmd = [sys.executable, "-m", "spanuq.cli", "serve", "--upstream", llama_server.base_url, "--upstream-model",
           "smollm2", "--port", str(port), "--model", str(probe_dir), "--threshold", "0"]
    with process(cmd, env, tmp_path / "serve.log", cwd=repo_root) as p:
        health = json.loads(wait_http(f"http://127.0.0.1:{port}/health", 300, p, tmp_path / "serve.log"))
        assert health["openai"]["answers"] == f"upstream {llama_server.base_url}"
        r = client(f"http://127.0.0.1:{port}").chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": PROMPT}], max_tokens=24, temperature=0)
        assert r.spanuq["status"] == "scored" and r.spanuq["answer_source"] == "given"
        check_spans(r.choices[0].message.content, r.spanuq)


def test_content_chars_is_documented_as_the_scored_prefix(repo_root):
    """A streamed update's `content_chars` is the prefix its spans cover, which may end before the content
    streamed so far (a word still growing): the field's description and docs/openai.md say so alike."""
    from spanuq.score.openai.records import SpanUQExtension

    described = SpanUQExtension.model_fields["content_chars"].description
    row = next(line for line in (repo_root / "docs" / "openai.md").read_text(encoding="utf-8").splitlines()
               if line.startswith("| `content_chars` |"))
    for text in (described, row):
        assert "scored prefix" in text and "content[:content_chars]" in text and "the content so far" not in text
