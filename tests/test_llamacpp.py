"""The llama.cpp server from the project's own install: it proves itself, a crash says what
happened, and a dead server is reaped (no zombie)."""
import os
import signal

import httpx
import psutil
import pytest

pytest.importorskip("llama_cpp", reason="needs `pip install 'llama-cpp-python[server]'`")

from spanuq.llm.llamacpp import LlamaCppServer, ServerCrashed, describe_exit  # noqa: E402
from spanuq.llm.loading import gguf_path  # noqa: E402
from spanuq.llm.presets import get_preset  # noqa: E402

def gguf():
    return gguf_path(get_preset("smollm2-135m"))


def test_the_installed_build_completes_a_chat_prompt_of_twenty_tokens_or_more(llama_server):
    # On a CPU the build was not made for, /v1/models answers and this prompt kills the server.
    r = httpx.post(f"{llama_server.base_url}/chat/completions", timeout=120, json={
        "model": "smollm2", "max_tokens": 24, "temperature": 0.0, "messages": [
            {"role": "system", "content": "You are a helpful assistant. Answer factually in two or three sentences."},
            {"role": "user", "content": "Who painted the ceiling of the Sistine Chapel, and in which city is it found?"}]})
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["usage"]["prompt_tokens"] >= 20
    assert data["usage"]["completion_tokens"] > 0 and data["choices"][0]["message"]["content"].strip()
    assert llama_server.alive()


def test_a_server_killed_by_a_signal_is_reported_as_a_crash_with_its_log_and_reaped(tmp_path):
    log = tmp_path / "server.log"
    with LlamaCppServer(gguf(), n_threads=1, log_path=log) as srv:
        pid = srv.proc.pid
        assert srv.crash_report() is None
        os.kill(pid, signal.SIGSEGV)
        with pytest.raises(ServerCrashed) as err:
            srv.raise_if_dead(grace_s=30)
        msg = str(err.value)
        assert "was killed by SIGSEGV (signal 11)" in msg and str(log) in msg
        assert "Segmentation fault" in msg  # faulthandler's report, from the log's tail
        # reaped at once by the watcher thread: no zombie is left for anyone scanning processes
        with pytest.raises(psutil.NoSuchProcess):
            psutil.Process(pid).status()
    assert log.exists()  # kept: it is the crash's evidence


def test_exit_statuses_read_as_words():
    assert describe_exit(1) == "exited with status 1"
    assert describe_exit(-9) == "was killed by SIGKILL (signal 9)"


def test_a_server_that_cannot_load_its_model_fails_to_start_with_its_log(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + os.urandom(256))
    with pytest.raises((ServerCrashed, RuntimeError)) as err:
        LlamaCppServer(bad, n_threads=1, log_path=tmp_path / "server.log", startup_timeout_s=60).start()
    assert "exited with status" in str(err.value) and "server.log" in str(err.value)
