"""Generation: greedy answer + S samples through the Generator interface."""
import json

import pytest

from spanuq.generate.stage import generate_all, prompt_seed, run_generate
from spanuq.llm.llamacpp import SERVER_MODULE
from spanuq.llm.openai_client import EndpointUnreachable
from spanuq.pipeline.files import read_records, write_jsonl
from spanuq.pipeline.records import Generation, Prompt

PROMPTS = [
    Prompt(id="p1", domain="triviaqa", text="What is the capital of Australia?", references=["Canberra"]),
    Prompt(id="p2", domain="biography", text="Tell me a bio of Marie Curie."),
    Prompt(id="p3", domain="custom", text="¿Cuál es la capital de Francia?"),  # other languages are fine
]


def test_prompt_seeds_are_stable_and_distinct():
    assert prompt_seed(0, "p1") == prompt_seed(0, "p1")
    assert len({prompt_seed(0, p.id) for p in PROMPTS}) == len(PROMPTS)
    assert prompt_seed(0, "p1") != prompt_seed(1, "p1")


@pytest.mark.server
def test_llama_cpp_server_backend_generates_greedy_and_samples(llama_server, make_cfg):
    server = ("generate.backend=server", f"generate.server_url={llama_server.base_url}",
              "generate.launch_server=false", "generate.max_new_tokens=24")
    cfg = make_cfg(*server, "generate.n_samples=3")
    gens, stats = generate_all(cfg, PROMPTS, progress=False)
    assert stats["generated"] == 3 and stats["cached"] == 0
    for g, p in zip(gens, PROMPTS):
        assert g.prompt_id == p.id and g.greedy.text and len(g.samples) == 3
        assert "<|im_start|>user" in g.chat_prompt and p.text in g.chat_prompt
        assert g.greedy.finish_reason in ("stop", "length")
        assert all(s.token_ids for s in g.samples if s.text)
    # greedy decoding repeats on a fresh cache, whatever the server served in between: every request is
    # decoded from an empty KV cache (`spanuq.llm.llamacpp_server`; reusing the prefix a request shared with
    # the one before once flipped "…born in 189c, Poland" to "…born in 189c, she" in one CI run in four)
    again, stats2 = generate_all(make_cfg(*server, "generate.n_samples=1"), PROMPTS,  # the greedy answers' repeat
                                 cache_dir=cfg.paths.cache + "/fresh", progress=False)
    assert stats2["generated"] == 3
    assert [g.greedy.text for g in again] == [g.greedy.text for g in gens]
    # a re-run with the same params is served from the per-prompt cache
    _, stats3 = generate_all(cfg, PROMPTS, progress=False)
    assert stats3 == {**stats3, "generated": 0, "cached": 3}


@pytest.mark.server
def test_stop_strings_and_a_smaller_sample_budget(llama_server, make_cfg):
    """A stop string ends an answer on its own (finish reason stop, the string cut off); samples
    may get a smaller budget than the greedy answer (truncated samples abstain at label time)."""
    cfg = make_cfg("generate.backend=server", f"generate.server_url={llama_server.base_url}",
                   "generate.launch_server=false", "generate.n_samples=2", "generate.max_new_tokens=48",
                   "generate.sample_max_new_tokens=4", "generate.stop=[' the ', ' The ']")
    gens, _ = generate_all(cfg, PROMPTS[:2], progress=False)
    for g in gens:
        assert " the " not in g.greedy.text and " The " not in g.greedy.text
        assert all(len(s.token_ids) <= 5 for s in g.samples)
        assert any(s.finish_reason == "length" for s in g.samples)
    assert any(g.greedy.finish_reason == "stop" and len(g.greedy.token_ids) < 48 for g in gens)
    assert gens[0].decoding["stop"] == " the | The " and gens[0].decoding["sample_max_new_tokens"] == 4


def test_transformers_backend_samples_do_not_depend_on_the_batch(make_cfg):
    """The hf backend decodes many prompts' samples in one batch, each row from its own
    seeded stream: a prompt alone and the same prompt beside others get the same samples."""
    from spanuq.generate.hf import HFGenerator
    from spanuq.llm.loading import chat_prompt

    cfg = make_cfg("generate.backend=hf", "generate.sample_max_new_tokens=12", "generate.max_new_tokens=16",
                   "generate.stop=['.']")
    gen = HFGenerator(cfg)
    chats = [chat_prompt(gen.tok, p.text, cfg.backbone.system_prompt) for p in PROMPTS]
    together = gen.sample(chats, 3, [11, 22, 33])
    alone = gen.sample(chats[1:2], 3, [22])
    assert [c.text for c in together[1]] == [c.text for c in alone[0]]
    assert len({c.text for c in together[1]}) > 1  # three rows, three streams
    assert [c.text for c in gen.sample(chats[1:2], 3, [23])[0]] != [c.text for c in alone[0]]
    for c in [c for row in together for c in row] + gen.greedy(chats):
        assert "." not in c.text and c.finish_reason in ("stop", "length")


def test_unreachable_server_is_a_clear_error(make_cfg):
    cfg = make_cfg("generate.backend=server", "generate.server_url=http://127.0.0.1:9/v1",
                   "generate.launch_server=false")
    with pytest.raises(EndpointUnreachable, match="127.0.0.1:9"):
        generate_all(cfg, PROMPTS, progress=False)


class FlakyGenerator:
    """Wraps a generator and dies after `limit` prompts, like a killed process."""

    name = "flaky"

    def __init__(self, limit):
        self.limit, self.seen = limit, 0

    def greedy(self, prompts):
        from spanuq.generate.base import Completion

        self.seen += len(prompts)
        if self.seen > self.limit:
            raise KeyboardInterrupt
        return [Completion("" if "Curie" in p else "Canberra is the capital.", "stop") for p in prompts]

    def sample(self, prompts, n, seeds):
        from spanuq.generate.base import Completion

        return [[Completion(f"sample {i}", "length") for i in range(n)] for _ in prompts]

    def close(self):
        pass


def test_a_killed_run_resumes_and_empty_answers_are_recorded(make_cfg):
    cfg = make_cfg("generate.batch_size=1", "generate.n_samples=2")
    with pytest.raises(KeyboardInterrupt):
        generate_all(cfg, PROMPTS, generator=FlakyGenerator(limit=2), progress=False)
    gens, stats = generate_all(cfg, PROMPTS, generator=FlakyGenerator(limit=99), progress=False)
    assert stats["cached"] == 2 and stats["generated"] == 1
    assert [g.prompt_id for g in gens] == ["p1", "p2", "p3"]
    assert gens[1].empty and gens[1].greedy.token_ids == []  # recorded, not dropped
    assert gens[0].samples[0].finish_reason == "length"


def test_stage_writes_generations_and_a_report(make_cfg, monkeypatch):
    from spanuq.pipeline.paths import StagePaths
    import spanuq.generate.stage as stage

    cfg = make_cfg("generate.batch_size=2", "generate.n_samples=2")
    paths = StagePaths.from_config(cfg)
    write_jsonl(paths.prompts, PROMPTS)
    monkeypatch.setattr(stage, "open_generator", lambda cfg: stage._borrowed(FlakyGenerator(limit=99)))
    run_generate(cfg, progress=False)
    gens = read_records(paths.generations, Generation)
    report = json.loads(paths.generate_report.read_text())
    assert len(gens) == 3 and report["empty_greedy"] == 1 and report["truncated_samples"] == 6
    assert json.loads(paths.run_log("generate").read_text())["generated"] == 3


def test_the_same_inputs_give_byte_identical_outputs_and_the_run_goes_to_its_log(make_cfg, monkeypatch):
    """DVC hashes every output (metrics too): a re-run from the cache writes the same bytes, so
    dvc.lock does not move; how the run went (cached or generated, seconds) is in runs/generate.json."""
    from spanuq.pipeline.paths import StagePaths
    import spanuq.generate.stage as stage

    cfg = make_cfg("generate.n_samples=2")
    paths = StagePaths.from_config(cfg)
    write_jsonl(paths.prompts, PROMPTS)
    monkeypatch.setattr(stage, "open_generator", lambda cfg: stage._borrowed(FlakyGenerator(limit=99)))
    run_generate(cfg, progress=False)
    first = {p: p.read_bytes() for p in (paths.generations, paths.generate_report)}
    run_generate(cfg, progress=False)  # every answer from the cache now
    assert {p: p.read_bytes() for p in first} == first
    run = json.loads(paths.run_log("generate").read_text())
    assert run["cached"] == 3 and run["generated"] == 0 and run["wall_seconds"] >= 0


def test_a_prompt_repeating_another_ones_text_gets_its_own_id(make_cfg):
    """A user file repeating a bundled question: one model call, two records, each with its own id."""
    cfg = make_cfg("generate.n_samples=2")
    bundled = Prompt(id="bundled-42", domain="triviaqa", text="What is the capital of Australia?")
    generate_all(cfg, [bundled], generator=FlakyGenerator(limit=99), progress=False)
    mine = [Prompt(id="mine-1", domain="custom", text=bundled.text),
            Prompt(id="mine-2", domain="custom", text=bundled.text),
            Prompt(id="mine-3", domain="custom", text="Who discovered penicillin?")]
    gen = FlakyGenerator(limit=99)
    gens, stats = generate_all(cfg, mine, generator=gen, progress=False)
    assert [g.prompt_id for g in gens] == ["mine-1", "mine-2", "mine-3"]
    assert all(g.prompt_text == p.text for g, p in zip(gens, mine))
    assert gens[0].greedy.text == gens[1].greedy.text  # served from the cache entry of the same content
    assert gen.seen == 1 and stats["generated"] == 1  # only the new text reached the model
    with pytest.raises(ValueError, match="'mine-1' appears twice"):
        generate_all(cfg, [mine[0], mine[2].model_copy(update={"id": "mine-1"})],
                     generator=FlakyGenerator(limit=99), progress=False)


MORE = [Prompt(id=f"q{i}", domain="triviaqa", text=t) for i, t in enumerate([
    "What is the capital of Australia?", "Who wrote Hamlet?", "What is the chemical symbol for sodium?",
    "Who painted the Mona Lisa?", "What is the largest planet of the solar system?", "Who discovered penicillin?",
    "In which year did the Berlin Wall fall?", "What is the boiling point of water in Celsius?"])]


@pytest.mark.server
def test_a_server_crash_mid_stage_names_the_crash_and_a_rerun_generates_nothing_twice(make_cfg, tmp_path):
    """The stage's own llama.cpp server is killed by SIGSEGV after two prompts: the stage stops
    with an error that says so (status, log tail), not "cannot reach"; the re-run generates only
    what is missing."""
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time

    import psutil

    from spanuq.pipeline.cache import ItemCache
    from spanuq.pipeline.paths import StagePaths

    overrides = ["generate.backend=server", "generate.launch_server=true", "generate.n_samples=1",
                 "generate.max_new_tokens=12", "generate.sample_max_new_tokens=6", "generate.batch_size=1"]
    cfg = make_cfg(*overrides)
    paths = StagePaths.from_config(cfg)
    write_jsonl(paths.prompts, MORE)
    params = tmp_path / "params.yaml"
    params.write_text(__import__("yaml").safe_dump(cfg.model_dump(mode="json")))
    cache = ItemCache(paths.stage_cache("generate"))
    cmd = [sys.executable, "-m", "spanuq.cli", "generate", "--no-progress", "-p", str(params)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = []

    def kill_the_server_after_two_prompts():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            servers = [p for p in psutil.Process(proc.pid).children(recursive=True) if SERVER_MODULE in _cmdline(p)]
            if servers and len(list(paths.stage_cache("generate").glob("**/*.json"))) >= 2:
                os.kill(servers[0].pid, signal.SIGSEGV)
                killed.append(servers[0].pid)
                return
            time.sleep(0.1)

    t = threading.Thread(target=kill_the_server_after_two_prompts)
    t.start()
    _, err = proc.communicate(timeout=600)
    t.join()
    assert killed and proc.returncode == 2, err
    assert "was killed by SIGSEGV" in err and "llama-server.log" in err and "cannot reach" not in err, err
    done = sum(1 for p in MORE if _cached(cache, cfg, p))
    assert 2 <= done < len(MORE)
    # the re-run resumes: what was generated before the crash is served from the cache
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    run = json.loads(paths.run_log("generate").read_text())
    assert run["cached"] == done and run["generated"] == len(MORE) - done
    assert len(read_records(paths.generations, Generation)) == len(MORE)


def _cmdline(proc) -> str:
    import psutil

    try:
        return " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return ""


def test_in_process_llama_cpp_decodes_a_prompts_answer_and_samples_together(make_cfg, tmp_path):
    """``backend=llamacpp``: the shipped GGUF in this process, every sequence of a batch decoded
    together.  Four slots for 3 prompts x (1 greedy + 3 samples) = 12 sequences: a prompt's later
    samples start from a copy of a running sibling's KV cut back to the prompt.  Seeded samples
    repeat; greedy answers start as a one-slot run's do (float sums differ with the batch)."""
    pytest.importorskip("llama_cpp", reason="needs `pip install 'llama-cpp-python[server]'`")
    base = ["generate.backend=llamacpp", "generate.n_samples=3", "generate.max_new_tokens=24",
            "generate.sample_max_new_tokens=12", "generate.llamacpp_ctx=256"]
    cfg = make_cfg(*base, "generate.llamacpp_slots=4")
    gens, stats = generate_all(cfg, PROMPTS, cache_dir=tmp_path / "a", progress=False)
    assert stats["backend"] == "llamacpp" and stats["generated"] == 3
    for g in gens:
        assert g.greedy.text and len(g.samples) == 3 and g.decoding["backend"] == "llamacpp"
        assert all(len(s.token_ids) <= 13 for s in g.samples)
        assert len({s.text for s in g.samples}) > 1 or not g.samples[0].text  # samples, not three greedy copies
    again, _ = generate_all(cfg, PROMPTS, cache_dir=tmp_path / "b", progress=False)
    assert [[s.text for s in g.samples] for g in again] == [[s.text for s in g.samples] for g in gens]
    one, _ = generate_all(make_cfg(*base, "generate.llamacpp_slots=1"), PROMPTS, cache_dir=tmp_path / "c",
                          progress=False)
    assert [g.greedy.text.split()[:3] for g in one] == [g.greedy.text.split()[:3] for g in gens]


def test_in_process_llama_cpp_stops_on_stop_strings_and_refuses_a_prompt_too_long(make_cfg):
    pytest.importorskip("llama_cpp", reason="needs `pip install 'llama-cpp-python[server]'`")
    from spanuq.generate.llamacpp import LlamaCppGenerator
    from spanuq.llm.loading import chat_prompt, load_tokenizer

    cfg = make_cfg("generate.backend=llamacpp", "generate.max_new_tokens=48", "generate.llamacpp_ctx=128",
                   "generate.llamacpp_slots=2", "generate.stop=[' the ', ' The ']")
    tok = load_tokenizer(cfg)
    chats = [chat_prompt(tok, p.text, cfg.backbone.system_prompt) for p in PROMPTS[:2]]
    long_chat = chat_prompt(tok, "Why? " * 200, cfg.backbone.system_prompt)
    gen = LlamaCppGenerator(cfg)
    try:
        out = gen.greedy(chats + [long_chat])
        again = gen.greedy(chats[::-1])  # each call starts from empty KV streams, whatever ran before
    finally:
        gen.close()
    assert [c.text for c in again] == [c.text for c in out[:2]][::-1]
    assert all(" the " not in c.text and " The " not in c.text for c in out[:2])
    assert any(c.finish_reason == "stop" and len(tok(c.text).input_ids) < 48 for c in out[:2])
    assert out[2].finish_reason == "error" and "does not fit the 128-token context" in out[2].error


def test_a_sequences_context_follows_the_answer_budget_unless_set():
    from spanuq.generate.llamacpp import context_per_sequence

    assert context_per_sequence(128, 128) == 1024  # the default: 128 new tokens + room for the prompt
    assert context_per_sequence(2048, 64) == 2816  # a longer budget gets a longer context


def test_in_process_llama_cpp_that_cannot_run_here_is_an_error_not_a_dead_stage(make_cfg, tmp_path):
    """The build is proved in a child process first: a GGUF (or build) that kills llama.cpp
    kills the child, and this process raises with how it ended."""
    pytest.importorskip("llama_cpp", reason="needs `pip install 'llama-cpp-python[server]'`")
    import os

    from spanuq.generate.llamacpp import LlamaCppGenerator

    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + os.urandom(256))
    with pytest.raises(RuntimeError, match=r"(?s)cannot run the installed llama.cpp build.*generate.backend=hf"):
        LlamaCppGenerator(make_cfg("generate.backend=llamacpp"), model_path=broken)


def _cached(cache, cfg, prompt) -> bool:
    from spanuq.generate.stage import decoding_settings
    from spanuq.llm.loading import chat_prompt, load_tokenizer
    from spanuq.pipeline.cache import content_hash

    chat = chat_prompt(load_tokenizer(cfg), prompt.text, cfg.backbone.system_prompt)
    return content_hash({"backbone": cfg.backbone.name, "chat": chat, "decoding": decoding_settings(cfg),
                         "seed": cfg.generate.seed, "v": 1}) in cache


@pytest.mark.server
def test_backend_auto_falls_back_to_transformers_with_one_warning_when_llama_cpp_cannot_run(
        make_cfg, tmp_path, monkeypatch, caplog):
    """A llama.cpp server that cannot run here (a model file it cannot load stands in for a build
    that crashes on this CPU): `auto` generates with transformers and says why, once."""
    import logging
    import os

    import spanuq.llm.loading
    from spanuq.llm.loading import load_tokenizer

    cfg = make_cfg("generate.backend=auto", "generate.launch_server=true", "generate.n_samples=1",
                   "generate.max_new_tokens=8")
    load_tokenizer(cfg)  # the transformers copy of the backbone exists before the GGUF is swapped
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + os.urandom(256))
    monkeypatch.setattr(spanuq.llm.loading, "gguf_path", lambda preset: broken)
    with caplog.at_level(logging.WARNING, logger="spanuq.generate.stage"):
        gens, stats = generate_all(cfg, PROMPTS[:1], progress=False)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert stats["backend"] == "hf" and gens[0].greedy.text
    assert len(warnings) == 1 and "llama.cpp server cannot run on this machine" in warnings[0]
    assert "exited with status" in warnings[0]


@pytest.mark.server
def test_two_launched_llama_cpp_servers_share_the_prompts(make_cfg, tmp_path):
    """llama-cpp-python's server decodes one request at a time, so the stage runs one
    single-thread server per core and gives them prompts in turn; greedy answers are the ones a
    single server gives (samples may differ where llama.cpp's prompt-cache reuse flips a near tie,
    as request order on one server does)."""
    from spanuq.generate.stage import open_generator, server_layout

    base = ["generate.backend=server", "generate.launch_server=true", "generate.n_samples=2",
            "generate.max_new_tokens=16", "generate.sample_max_new_tokens=8", "generate.server_threads=1"]
    two = make_cfg(*base, "generate.server_processes=2")
    assert server_layout(two, cpus=2) == (2, 1)
    assert server_layout(make_cfg("generate.server_processes=null", "generate.server_threads=null"), cpus=2) == (2, 1)
    with open_generator(two) as gen:
        gens2, _ = generate_all(two, PROMPTS, generator=gen, cache_dir=tmp_path / "two", progress=False)
        assert len({c.base_url for c in gen.clients}) == 2
        assert all(c.stats.calls >= 2 for c in gen.clients)  # both servers answered
    gens1, _ = generate_all(make_cfg(*base, "generate.server_processes=1"), PROMPTS, cache_dir=tmp_path / "one",
                            progress=False)
    assert [g.greedy.text for g in gens2] == [g.greedy.text for g in gens1]
    assert all(len(g.samples) == 2 for g in gens2)


@pytest.mark.server
def test_backend_server_does_not_switch_silently_when_llama_cpp_cannot_run(make_cfg, tmp_path, monkeypatch):
    """The pipeline's default `server` fails where the server cannot run, with the crash and the way out."""
    import os

    import spanuq.llm.loading
    from spanuq.llm.llamacpp import ServerCrashed

    cfg = make_cfg("generate.backend=server", "generate.launch_server=true", "generate.n_samples=1",
                   "generate.max_new_tokens=8", "generate.server_processes=1", f"paths.cache={tmp_path / 'cache'}")
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + os.urandom(256))
    monkeypatch.setattr(spanuq.llm.loading, "gguf_path", lambda preset: broken)
    with pytest.raises(ServerCrashed, match=r"(?s)exited with status.*generate\.backend=auto falls back"):
        generate_all(cfg, PROMPTS[:1], cache_dir=tmp_path / "gen", progress=False)
    assert not list((tmp_path / "gen").glob("**/*.json"))  # nothing cached from the failure


def test_a_given_response_is_the_answer_and_the_samples_stay_the_backbones(make_cfg):
    """Answers written elsewhere (``response``) are labelled as they are: the record carries
    that answer, tokenised canonically, and the backbone's samples of the question, shared by
    every answer given for the same question (one model call per question)."""
    from spanuq.llm.loading import load_tokenizer, response_token_ids

    cfg = make_cfg("generate.n_samples=2")
    q = "What is the capital of Australia?"
    prompts = [Prompt(id="own", domain="custom", text=q),
               Prompt(id="given-1", domain="custom", text=q, response=" Sydney is the capital of Australia. "),
               Prompt(id="given-2", domain="custom", text=q, response="Canberra, since 1913.")]
    gen = FlakyGenerator(limit=99)
    gens, stats = generate_all(cfg, prompts, generator=gen, progress=False)
    assert gen.seen == 1 and stats["generated"] == 1
    own, g1, g2 = gens
    assert own.greedy.text == "Canberra is the capital." and not own.answer_given
    assert g1.greedy.text == prompts[1].response and g1.answer_given  # as given, spaces included
    assert g1.greedy.token_ids == response_token_ids(load_tokenizer(cfg), prompts[1].response)
    assert g1.samples == own.samples == g2.samples and g1.chat_prompt == own.chat_prompt
    assert [g.prompt_id for g in gens] == ["own", "given-1", "given-2"]


def test_raising_or_lowering_the_number_of_samples_reuses_the_samples_already_drawn(make_cfg, tmp_path):
    """Sample j of a prompt has its own seed, so S = 2 drawn earlier are the first two of S = 3:
    raising S draws only the third (the same one a fresh S = 3 run draws), lowering it cuts with
    no model call at all."""
    pytest.importorskip("llama_cpp", reason="needs `pip install 'llama-cpp-python[server]'`")
    base = ["generate.backend=llamacpp", "generate.max_new_tokens=16", "generate.sample_max_new_tokens=10",
            "generate.llamacpp_ctx=256", "generate.llamacpp_slots=4"]
    two, _ = generate_all(make_cfg(*base, "generate.n_samples=2"), PROMPTS[:2], cache_dir=tmp_path / "a", progress=False)
    three, stats = generate_all(make_cfg(*base, "generate.n_samples=3"), PROMPTS[:2], cache_dir=tmp_path / "a",
                                progress=False)
    assert stats["samples_reused_from"] == 2 and stats["generated"] == 2
    assert stats["generated_tokens"] == sum(len(g.samples[2].token_ids) for g in three)  # the third samples only
    for g2, g3 in zip(two, three):
        assert len(g3.samples) == 3 and g3.samples[:2] == g2.samples and g3.greedy == g2.greedy
        assert g3.decoding["n_samples"] == 3
    fresh, _ = generate_all(make_cfg(*base, "generate.n_samples=3"), PROMPTS[:2], cache_dir=tmp_path / "b",
                            progress=False)
    assert [[s.text for s in g.samples] for g in fresh] == [[s.text for s in g.samples] for g in three]
    one, stats = generate_all(make_cfg(*base, "generate.n_samples=1"), PROMPTS[:2], cache_dir=tmp_path / "a",
                              progress=False)
    assert "backend" not in stats and stats["samples_reused_from"] == 2  # no generator was opened
    assert [g.samples for g in one] == [g.samples[:1] for g in two] and one[0].decoding["n_samples"] == 1
