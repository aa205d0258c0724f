"""The OpenAI-compatible endpoint's overhead against calling the upstream directly.

    python benchmarks/bench_openai.py [--prompts 8] [--rounds 2] [--max-tokens 64]

Starts a real llama.cpp server on the shipped GGUF (the upstream) and `spanuq serve`'s app with
the shipped probe in both modes, then asks the same prompts with the official `openai` client:

* **direct**: the llama.cpp server itself (``stream: true``);
* **--upstream**: SpanUQ forwarding to that server and scoring what it streams;
* **backbone**: SpanUQ's own managed llama.cpp server answering (``spanuq serve``).

Per mode (medians over prompts × rounds, greedy, the same max_tokens): time to first token,
time to the first span update, time to the final scores, tokens per second of the whole
stream, and the non-streamed request's latency.  Say the machine's load beside the numbers
(printed); compare modes only within one run.
"""
from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

from table import report  # benchmarks/table.py: make bench's one table

PROMPTS = ["What is the capital of Australia?", "Who painted the Mona Lisa?", "Why is the sky blue?",
           "Tell me about Marie Curie.", "How does a vaccine work?", "Who wrote the novel Moby-Dick?",
           "What causes the seasons on Earth?", "When did World War II end?", "What is photosynthesis?",
           "Who was Alan Turing?"]


def serve_app(app):
    import uvicorn

    from spanuq.llm.llamacpp import free_port

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server, f"http://127.0.0.1:{server.config.port}/v1"


def run_stream(client, model: str, prompt: str, max_tokens: int, system: str) -> dict:
    t0 = time.perf_counter()
    first_token = first_span = final = None
    n_tokens = n_deltas = 0
    stream = client.chat.completions.create(model=model, stream=True, max_tokens=max_tokens, temperature=0,
                                            stream_options={"include_usage": True},
                                            messages=[{"role": "system", "content": system},
                                                      {"role": "user", "content": prompt}])
    for ch in stream:
        now = time.perf_counter() - t0
        if ch.usage is not None:
            n_tokens = ch.usage.completion_tokens
        if ch.choices and ch.choices[0].delta.content:
            n_deltas += 1  # llama.cpp streams one token per chunk
            first_token = now if first_token is None else first_token
        ext = (ch.model_extra or {}).get("spanuq")
        if ext is not None:
            if ext["spans"] and first_span is None:
                first_span = now
            if ext["done"]:
                final = now
    total = time.perf_counter() - t0
    return {"ttft": first_token, "first_span": first_span, "final": final, "total": total,
            "tok_s": (n_tokens or n_deltas) / total if total else None}


def run_once(client, model: str, prompt: str, max_tokens: int, system: str) -> float:
    t0 = time.perf_counter()
    client.chat.completions.create(model=model, max_tokens=max_tokens, temperature=0,
                                   messages=[{"role": "system", "content": system}, {"role": "user", "content": prompt}])
    return time.perf_counter() - t0


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import openai
    from transformers.utils import logging as hf_logging

    from spanuq import SpanUQ
    from spanuq.config import load_config
    from spanuq.llm.llamacpp import LlamaCppServer
    from spanuq.llm.loading import gguf_path
    from spanuq.llm.presets import get_preset
    from spanuq.score.openai.engines import Upstream
    from spanuq.score.service import create_app

    hf_logging.disable_progress_bar()
    cfg = load_config("params.yaml" if os.path.exists("params.yaml") else None,
                      ["score.generator=llamacpp", f"score.max_new_tokens={args.max_tokens}"])
    prompts = (PROMPTS * 10)[: args.prompts]
    rows = {}
    with LlamaCppServer(gguf_path(get_preset("smollm2-135m"))) as llama, SpanUQ.load("shipped", cfg=cfg) as uq:
        system = uq.system_prompt
        upstream = Upstream(llama.base_url)
        upstream.check()
        servers = []
        modes = {"direct (llama.cpp)": (llama.base_url, "smollm2")}
        for name, up in (("spanuq --upstream", upstream), ("spanuq (backbone)", None)):
            srv, url = serve_app(create_app(uq, upstream=up))
            servers.append(srv)
            modes[name] = (url, "smollm2" if up else uq.backbone_name)
        for name, (url, model) in modes.items():  # warm-up: servers started, caches filled
            client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=600)
            run_stream(client, model, "Hello.", 8, system)
        for name, (url, model) in modes.items():
            client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=600)
            streams, once = [], []
            for _ in range(args.rounds):
                for p in prompts:
                    streams.append(run_stream(client, model, p, args.max_tokens, system))
                    once.append(run_once(client, model, p, args.max_tokens, system))
            rows[name] = {k: med([s[k] for s in streams]) for k in ("ttft", "first_span", "final", "tok_s")}
            rows[name]["once"] = med(once)
        for s in servers:
            s.should_exit = True
        upstream.close()
    fmt = lambda x, unit="s": "—" if x is None else (f"{x:.3f} s" if unit == "s" else f"{x:.1f}")  # noqa: E731
    print(f"\nOpenAI endpoint overhead: {args.prompts} prompts × {args.rounds} rounds, greedy, max_tokens "
          f"{args.max_tokens}, medians; load average {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    print("| mode | time to first token | time to first span | time to final scores | tokens/s (stream) "
          "| non-streamed request |")
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {fmt(r['ttft'])} | {fmt(r['first_span'])} | {fmt(r['final'])} | {fmt(r['tok_s'], '')} "
              f"| {fmt(r['once'])} |")
        report("openai", f"{name}, streamed", r["tok_s"], "tok/s",
               f"first token {fmt(r['ttft'])}, final scores {fmt(r['final'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
