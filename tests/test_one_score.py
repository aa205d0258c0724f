"""One answer, one score on every path: the same (prompt, answer, who wrote it, sources) gets the same
spans, the same û (to 1e-4), the same û_seq, the same ``answer_source`` and the same calibration and status
from the Python API, the CLI (``--file`` and one answer), ``POST /score``, ``/score/batch``,
``/score/stream``, ``/v1/chat/completions`` (streamed and not), LangChain's ``ChatOpenAI``, the MLflow
pyfunc model and ``spanuq monitor``.

The probe is the shipped one: its given-answer calibration differs from its own-answer one, and its
with-sources mapping of given answers from both, so a path that scores an answer with another
calibration shows here.  A case is a dict of the API's fields (``prompt``, ``response``?,
``answer_source``, ``context``?).  The MLflow model takes an answer's states, not its sources (reading
an answer with sources needs the backbone: `SpanUQ.score`), so it is checked on the cases without.
"""
import json

import httpx
import mlflow
import pytest
import torch

from servers import scoring_service
from spanuq.pipeline.cpus import available_cpus

BACKBONE = "smollm2-135m"
QUESTION = "Who painted the Mona Lisa?"
WRONG = "The Mona Lisa was painted by Michelangelo Buonnacron in 1503."
SOURCES = ["The Mona Lisa is a half-length portrait painted by the Italian artist Leonardo da Vinci, begun in 1503."]
CASES = {  # name -> the API's fields; "own" answers are filled in with the backbone's answer to that prompt
    "backbone answers": {"prompt": QUESTION},
    "given answer": {"prompt": QUESTION, "response": WRONG, "answer_source": "given"},
    "own answer written elsewhere": {"prompt": QUESTION, "answer_source": "generated"},
    "backbone answers with sources": {"prompt": QUESTION, "context": SOURCES},
    "given answer with sources": {"prompt": QUESTION, "response": WRONG, "answer_source": "given", "context": SOURCES},
    "own answer with sources written elsewhere": {"prompt": QUESTION, "answer_source": "generated", "context": SOURCES},
}
OWN = {"own answer written elsewhere": "backbone answers",  # the case whose answer it is
       "own answer with sources written elsewhere": "backbone answers with sources"}
OVERRIDES = ["score.max_new_tokens=24", f"score.server_threads={available_cpus()}"]


@pytest.fixture(scope="module")
def shipped(tmp_path_factory, repo_root):
    pytest.importorskip("llama_cpp", reason="needs `pip install 'llama-cpp-python[server]'`")
    from spanuq import SpanUQ
    from spanuq.config import load_config

    cache = tmp_path_factory.mktemp("one-score")
    cfg = load_config(repo_root / "params.yaml", [f"paths.data={cache / 'data'}", f"paths.cache={cache / 'cache'}",
                                             *OVERRIDES])
    with SpanUQ.load("shipped", cfg=cfg) as uq:
        assert uq.calibration.given, "the shipped probe calibrates given answers on their own"
        yield uq


def record(r: dict) -> dict:
    """What must agree across paths: the answer, who wrote it, which calibration and status, each span's
    characters and û, û_seq."""
    return {"answer": r["answer"], "answer_source": r.get("answer_source"), "u_seq": r["u_seq"],
            "calibration_source": r.get("calibration_source"), "status": r.get("status"),
            "spans": [(s["start"], s["end"], s["u"]) for s in r["spans"]]}


def same(got: dict, want: dict, path: str) -> None:
    assert got["answer"] == want["answer"], path
    for key in ("answer_source", "calibration_source", "status"):
        if got[key] is not None:  # the MLflow model is told the source, it does not echo it
            assert got[key] == want[key], f"{path}: {key}"
    assert [s[:2] for s in got["spans"]] == [s[:2] for s in want["spans"]], path
    assert [s[2] for s in got["spans"]] == pytest.approx([s[2] for s in want["spans"]], abs=1e-4), path
    assert got["u_seq"] == pytest.approx(want["u_seq"], abs=1e-4), path


def cases(uq) -> dict[str, dict]:
    own = {k: uq.score(**CASES[of]).answer for k, of in OWN.items()}
    return {k: ({**c, "response": own[k]} if k in own else c) for k, c in CASES.items()}


def expected(uq, case: dict) -> dict:
    return record(uq.score(**case).model_dump(mode="json"))


def test_the_backbones_own_answer_is_scored_as_its_own_on_v1_not_as_a_given_one(shipped):
    """`/v1/chat/completions` not streamed (LangChain's `invoke`) scores the backbone's answer with the
    own-answer calibration and says so: the record `POST /score` gives for the prompt."""
    from openai import OpenAI

    want = expected(shipped, {"prompt": QUESTION})
    assert want["answer_source"] == "generated"
    with scoring_service(shipped) as (url, _):
        r = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300).chat.completions.create(
            model=BACKBONE, messages=[{"role": "user", "content": QUESTION}])
    ext = r.spanuq
    same(record({**ext, "answer": r.choices[0].message.content}), want, "/v1 not streamed")
    given = expected(shipped, {"prompt": QUESTION, "response": want["answer"], "answer_source": "given"})
    assert given["spans"] != want["spans"] or given["u_seq"] != pytest.approx(want["u_seq"], abs=1e-4), \
        "the two calibrations differ on this answer, so this test can tell them apart"


def test_one_answer_gets_one_score_on_every_path(shipped, make_cfg, repo_root, tmp_path, monkeypatch, capsys):
    from openai import OpenAI

    from spanuq.cli import main
    from spanuq.llm.loading import token_offsets
    from spanuq.llm.states import extract_batch
    from spanuq.pipeline import tracking
    from spanuq.score.registry import log_probe

    uq = shipped
    todo = cases(uq)
    want = {k: expected(uq, c) for k, c in todo.items()}
    assert want["given answer"]["answer_source"] == "given"
    for k, of in OWN.items():
        same(want[k], want[of], k)  # the same answer, the same writer, the same sources
    assert want["given answer with sources"]["calibration_source"] == "given+context"  # the shipped probe has it
    assert want["given answer with sources"]["spans"] != want["given answer"]["spans"], "the sources count"
    assert all(w["spans"] for w in want.values()), "spans to compare in every case"
    got: dict[str, dict[str, dict]] = {k: {} for k in todo}
    prompt_only = [k for k, c in todo.items() if "response" not in c]

    # the CLI: `spanuq score --file` (every case) and `spanuq score PROMPT --response ... --json` (one)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": k, **c}) + "\n" for k, c in todo.items()), encoding="utf-8")
    monkeypatch.chdir(repo_root)
    args = ["--model", "shipped", *[x for o in OVERRIDES for x in ("-o", o)], "--no-progress"]
    assert main(["score", "--file", str(rows), "--out", str(tmp_path / "scored.jsonl"), *args]) == 0
    for line in (tmp_path / "scored.jsonl").read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        got[rec["id"]]["cli --file"] = record(rec["result"])
    for k in ("given answer", "given answer with sources"):  # one answer: `spanuq score PROMPT --response ... --json`
        c = todo[k]
        one = ["score", c["prompt"], "--response", c["response"], "--answer-source", c["answer_source"], "--json",
               *[x for p in c.get("context", []) for x in ("--context", p)], *args]
        capsys.readouterr()
        assert main(one) == 0
        got[k]["cli"] = record(json.loads(capsys.readouterr().out))

    # spanuq monitor: the rows with an answer, each saying who wrote it
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"id": k, **c}) + "\n" for k, c in todo.items() if "response" in c),
                       encoding="utf-8")
    assert main(["monitor", str(answers), "-O", str(tmp_path / "mon"), *args]) == 0
    cached = [json.loads(x)["result"] for x in (tmp_path / "mon" / "cache.jsonl").read_text().splitlines()]
    for k, c in todo.items():
        if "response" in c:
            got[k]["monitor"] = next(record(r) for r in cached if r["answer"] == c["response"]
                                     and r["answer_source"] == c["answer_source"]
                                     and (r["context"] is not None) == ("context" in c))

    # the service: /score, /score/batch, /score/stream, /v1 (streamed and not), LangChain
    with scoring_service(uq) as (url, _):
        for k, c in todo.items():
            got[k]["/score"] = record(httpx.post(f"{url}/score", json=c, timeout=300).json())
        batch = httpx.post(f"{url}/score/batch", json={"items": list(todo.values())}, timeout=300).json()["results"]
        for k, r in zip(todo, batch):
            got[k]["/score/batch"] = record(r)
        client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)
        for k in prompt_only:
            with httpx.stream("POST", f"{url}/score/stream", json=todo[k], timeout=300) as s:
                last = [json.loads(x[5:]) for x in s.iter_lines() if x.startswith("data:")][-1]
            assert last["done"]
            got[k]["/score/stream"] = record(last["result"])
            msgs = [{"role": "user", "content": todo[k]["prompt"]}]
            extra = {"context": todo[k]["context"]} if "context" in todo[k] else None  # docs/openai.md "Sources"
            r = client.chat.completions.create(model=BACKBONE, messages=msgs, extra_body=extra)
            got[k]["/v1"] = record({**r.spanuq, "answer": r.choices[0].message.content})
            content, final = "", None
            for ch in client.chat.completions.create(model=BACKBONE, messages=msgs, stream=True, extra_body=extra):
                content += ch.choices[0].delta.content or "" if ch.choices else ""
                ext = (ch.model_extra or {}).get("spanuq")
                final = ext if ext and ext["done"] else final
            got[k]["/v1 streamed"] = record({**final, "answer": content})
            lc = pytest.importorskip("langchain_openai", reason="needs `pip install langchain-openai`")
            llm = lc.ChatOpenAI(base_url=f"{url}/v1", api_key="unused", model=BACKBONE, max_retries=0,
                                include_response_headers=True, extra_body=extra)
            msg = llm.invoke(todo[k]["prompt"])
            got[k]["LangChain"] = record({**json.loads(msg.response_metadata["headers"]["x-spanuq"]),
                                          "answer": msg.content})

    # the MLflow model, registered as the train stage registers it, given each answer's states
    cfg = make_cfg()
    with tracking.start_run(cfg, "one-score"):
        log_probe(uq.checkpoint, cfg, dev_auroc=0.5)
    pyfunc = mlflow.pyfunc.load_model("models:/spanuq-smollm2-135m@champion")
    for k, c in todo.items():
        if "context" in c:
            continue  # the model takes states, not sources (module docstring)
        answer, source = want[k]["answer"], want[k]["answer_source"]
        ids, offsets = token_offsets(uq.tok, answer)
        item = extract_batch(uq.model, uq.tok, [uq._chat(c["prompt"])[0]], [ids], uq.layers,
                             getattr(torch, uq.cfg.extract.dtype))[0]
        out = pyfunc.predict({"h": item.h.float().numpy(), "entropy": item.entropy.numpy(),
                              "surprisal": item.surprisal.numpy(), "text": answer, "offsets": offsets},
                             params={"source": source})[0]
        got[k]["MLflow"] = {"answer": answer, "answer_source": None, "calibration_source": None, "status": None,
                            "u_seq": out["u_seq"],
                            "spans": [(s["char_start"], s["char_end"], s["u"]) for s in out["spans"]]}

    expected_paths = {"cli --file", "/score", "/score/batch"}
    for k in todo:
        paths = (expected_paths | ({"monitor"} if "response" in todo[k] else
                                   {"/score/stream", "/v1", "/v1 streamed", "LangChain"})
                 | ({"cli"} if k in ("given answer", "given answer with sources") else set())
                 | (set() if "context" in todo[k] else {"MLflow"}))
        assert set(got[k]) == paths, k
        for path, rec in got[k].items():
            same(rec, want[k], f"{k}: {path}")
