"""The OpenAI endpoint with a retrieval-shaped conversation, through the official ``openai`` client against the
real server: documents in the system message and a ``tool`` result are the sources the answer is read
against; with the shipped probe and an upstream model (a real llama.cpp server, its answer fixed by a
grammar as any model's answer is fixed by the model), the span the sources contradict is flagged."""
import json

import httpx
import pytest

from servers import scoring_service

openai = pytest.importorskip("openai", reason="needs `pip install openai` (the dev extra)")

SYSTEM = ("Answer the question from the documents.\n"
          '<document id="eiffel" title="Eiffel Tower">The Eiffel Tower is a wrought-iron lattice tower on the Champ '
          "de Mars in Paris, France. It was designed by the company of Gustave Eiffel and completed in 1889 as the "
          "entrance to the World's Fair.</document>")
TOOL = "height_lookup: the Eiffel Tower is 330 metres tall."
QUESTION = "When was the Eiffel Tower completed, and how tall is it?"
ANSWER = "The Eiffel Tower was completed in 1925 and is 330 metres tall."  # the year the document contradicts


def retrieval_messages() -> list[dict]:
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": QUESTION},
            # content "" rather than None: llama-cpp-python's server (the upstream here) refuses None
            {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
                "name": "height_lookup", "arguments": json.dumps({"q": "Eiffel Tower"})}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": TOOL}]


@pytest.fixture(scope="module")
def shipped():
    from spanuq import SpanUQ

    with SpanUQ.load("shipped", params=None, overrides={"score.max_new_tokens": 24}) as uq:
        yield uq


@pytest.fixture(scope="module")
def gateway(shipped, llama_server):
    """`spanuq serve --upstream URL` with the shipped probe, in front of a real llama.cpp server."""
    from spanuq.score.openai.engines import Upstream

    upstream = Upstream(llama_server.base_url)
    upstream.check()
    with scoring_service(shipped, upstream=upstream) as (url, _):
        yield url
    upstream.close()


def client(url: str):
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)


def test_the_contradicted_span_of_any_models_answer_is_flagged_against_its_sources(gateway):
    grammar = 'root ::= "' + ANSWER + '"'  # the upstream model's answer, fixed
    r = client(gateway).chat.completions.create(model="any-model", messages=retrieval_messages(), temperature=0,
                                                max_tokens=40, extra_body={"grammar": grammar})
    content, ext = r.choices[0].message.content, r.spanuq
    assert content == ANSWER and ext["answer_source"] == "given"
    assert [(p["id"], p["text"]) for p in ext["context"]] == [
        ("eiffel", SYSTEM[SYSTEM.index("The Eiffel"):SYSTEM.index("</document>")]), ("call_1", TOOL)]
    assert ext["context_windows"] == 1 and {x["id"] for x in ext["context_read"]} == {"eiffel", "call_1"}
    codes = [x["code"] for x in ext["status_reasons"]]
    assert "probe_backbone_mismatch" not in codes  # any model: a given answer
    ranked = sorted(ext["spans"], key=lambda s: -s["u"])
    year = ranked[0]
    assert year["text"] in ("1925", "in 1925"), ranked  # the contradicted fact ranks first
    assert year["u"] >= ext["flag_threshold"]  # flagged as likely wrong
    assert year["passage"] == "eiffel"  # read against the passage that gives the year (support: not claimed)
    right = [s for s in ext["spans"] if "330" in s["text"]]
    assert right and right[0]["passage"] is not None and right[0]["u"] < year["u"]  # the tool's height: read, below


def test_the_backbone_answers_with_the_sources_in_its_input(shipped):
    with scoring_service(shipped) as (url, _):
        r = client(url).chat.completions.create(model=shipped.backbone_name, messages=retrieval_messages(),
                                                max_tokens=24)
        ext = r.spanuq
        assert ext["answer_source"] == "generated" and ext["context_windows"] == 1
        assert [p["id"] for p in ext["context"]] == ["eiffel", "call_1"]
        bad = httpx.post(f"{url}/v1/chat/completions", json={"model": shipped.backbone_name, "context": [],
                                                             "messages": [{"role": "user", "content": QUESTION}]})
        assert bad.status_code == 400 and "empty list" in bad.json()["error"]["message"]
        bad = httpx.post(f"{url}/v1/chat/completions", json={"model": shipped.backbone_name, "documents": [3],
                                                             "messages": [{"role": "user", "content": QUESTION}]})
        assert bad.status_code == 400 and "must be a string" in bad.json()["error"]["message"]
        assert bad.json()["error"]["param"] == "documents[0]"
        # each bad source is a 400 naming the field as the client wrote it, never a request scored without it
        user = {"role": "user", "content": QUESTION}
        for messages, extra, param, says in [
            ([user], {"context": [42]}, "context[0]", "must be a string"),
            ([user, {"role": "tool", "tool_call_id": "c1", "content": 42}], {}, "messages[1].content",
             "must be a string or a list of text parts"),
            ([{"role": "system", "content": "<document id='a'>The tower is 330 metres tall."}, user], {}, "messages[0]",
             "without its closing </document>")]:
            bad = httpx.post(f"{url}/v1/chat/completions", json={"model": shipped.backbone_name, "messages": messages,
                                                                 **extra})
            err = bad.json()["error"]
            assert bad.status_code == 400 and err["param"] == param and says in err["message"], bad.text
        assert httpx.get(f"{url}/health").status_code == 200
