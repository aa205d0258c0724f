"""The generate stage: prompts.jsonl → generations.jsonl (+ a report).

Per-prompt results are cached by content hash (backbone, chat prompt, decoding
settings, seed), so a killed run resumes where it stopped and a re-run with the
same params makes no model call; raising or lowering S (`generate.n_samples`) reuses
the samples already drawn where each sample has its own seed.  A prompt row with
``context`` (sources) is answered with them rendered into the backbone's input exactly as
`SpanUQ.score(..., context=...)` renders them (`spanuq.context.chat`), on every backend:
each backend decodes the rendered string it is given.  Empty and truncated
answers are recorded, not dropped: downstream stages decide what to do with them and
the report counts them.
"""
from __future__ import annotations

import logging
import time
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from tqdm.auto import tqdm

from ..config import Config
from ..context.chat import context_chat
from ..llm.loading import chat_prompt, load_tokenizer, response_token_ids
from ..pipeline.cache import ItemCache, content_hash
from ..pipeline.cpus import available_cpus
from ..pipeline.files import read_records, write_json, write_jsonl
from ..pipeline.paths import StagePaths
from ..pipeline.records import Generation, Prompt, Sample
from .base import Completion, Generator, greedy_and_samples

log = logging.getLogger(__name__)


def prompt_seed(base_seed: int, prompt_id: str) -> int:
    """A per-prompt seed that does not depend on batch composition or order."""
    return (base_seed * 1_000_003 + zlib.crc32(prompt_id.encode())) % (2**31 - 1)


def decoding_settings(cfg: Config) -> dict:
    g = cfg.generate
    return {
        "backend": g.backend, "n_samples": g.n_samples, "max_new_tokens": g.max_new_tokens,
        "temperature": g.temperature, "top_p": g.top_p, "greedy_temperature": 0.0,
        **({"sample_max_new_tokens": g.sample_max_new_tokens} if g.sample_max_new_tokens else {}),
        **({"stop": "|".join(g.stop)} if g.stop else {}),
    }


def make_generator(cfg: Config, server=None) -> Generator:
    """The backend named by ``generate.backend`` (resolved: not ``auto``), imported on first use (a
    backend imports only `base`); ``server`` is the llama.cpp server started for a ``server``
    backend, watched for crashes."""
    kind = cfg.generate.backend
    if kind == "hf":
        from .hf import HFGenerator

        return HFGenerator(cfg)
    if kind == "llamacpp":
        from .llamacpp import LlamaCppGenerator

        return LlamaCppGenerator(cfg)
    if kind == "server":
        from .server import ServerGenerator

        return ServerGenerator(cfg, server=server)
    if kind == "vllm":
        from .vllm import VLLMGenerator

        return VLLMGenerator(cfg)
    raise ValueError(f"unknown generate.backend {kind!r}")


@contextmanager
def open_generator(cfg: Config) -> Iterator[Generator]:
    """The configured backend, open for the duration.

    ``backend=server`` with ``launch_server``: a managed llama.cpp server on the backbone's
    shipped GGUF runs for the duration (it proves itself on a real prompt first; if it dies
    later, the stage's error says how, with its log's tail).  ``backend=auto``: that server
    when it proves itself on this machine, otherwise transformers (``hf``) with one warning
    line saying why; for a backbone without a GGUF, vLLM on a GPU, else transformers."""
    g = cfg.generate
    backend = resolve_auto_backend(cfg) if g.backend == "auto" else g.backend
    if backend == "server" and g.launch_server:
        with _managed_server(cfg, fall_back=g.backend == "auto") as servers:
            if servers is not None:
                cfg = cfg.model_copy(update={"generate": g.model_copy(update={"backend": "server",
                                                                                "server_url": servers[0].base_url})})
                with _opened(make_generator(cfg, server=servers)) as gen:
                    yield gen
                return
        backend = "hf"  # auto, and the llama.cpp server cannot run here
    cfg = cfg.model_copy(update={"generate": g.model_copy(update={"backend": backend})})
    with _opened(make_generator(cfg)) as gen:
        yield gen


def resolve_auto_backend(cfg: Config) -> str:
    """``auto`` before any server is tried: the llama.cpp server for a GGUF backbone (or any
    OpenAI-compatible server at ``generate.server_url`` when ``launch_server`` is off), vLLM
    on a GPU for other backbones when it is installed, else transformers."""
    import importlib.util

    from ..llm.presets import get_preset

    if not cfg.generate.launch_server:
        return "server"
    if get_preset(cfg.backbone.name).gguf_package:
        return "server"
    import torch

    return "vllm" if torch.cuda.is_available() and importlib.util.find_spec("vllm") else "hf"


def server_layout(cfg: Config, cpus: int | None = None) -> tuple[int, int]:
    """(servers, threads per server) for the launched llama.cpp servers (``generate.server_processes``)."""
    cpus = cpus or available_cpus()
    n = cfg.generate.server_processes or min(MAX_AUTO_SERVERS, cpus)
    return n, cfg.generate.server_threads or max(1, cpus // n)


MAX_AUTO_SERVERS = 4


@contextmanager
def _managed_server(cfg: Config, fall_back: bool):
    """The llama.cpp servers for this stage (a list, `server_layout`); with ``fall_back``, None
    (and one warning) when they cannot run."""
    from contextlib import ExitStack

    from ..llm.llamacpp import LlamaCppServer, ServerCrashed
    from ..llm.loading import gguf_path
    from ..llm.presets import get_preset

    preset = get_preset(cfg.backbone.name)
    if not preset.gguf_package:
        raise ValueError(f"generate.launch_server needs a GGUF backbone; {preset.name} has none "
                         "(start `vllm serve` yourself and set generate.server_url)")
    log_dir = StagePaths.from_config(cfg).stage_cache("generate").parent
    n, threads = server_layout(cfg)
    with ExitStack() as stack:
        servers = []
        try:
            for i in range(n):
                log_path = log_dir / ("llama-server.log" if i == 0 else f"llama-server-{i}.log")
                srv = LlamaCppServer(gguf_path(preset), n_threads=threads, log_path=log_path)
                srv.start()
                stack.callback(srv.stop)
                servers.append(srv)
        except (ServerCrashed, RuntimeError, TimeoutError) as e:
            if not fall_back:
                raise type(e)(f"{e}\n(generate.backend=auto falls back to transformers where the llama.cpp server "
                              "cannot run; generate.backend=hf uses transformers always)") from e
            log.warning("generate.backend=auto: the llama.cpp server cannot run on this machine (%s); "
                        "generating with transformers (hf) instead", str(e).splitlines()[0])
            stack.close()
            yield None
            return
        log.info("generate: %d llama.cpp server(s), %d thread(s) each", n, threads)
        yield servers


@contextmanager
def _opened(gen: Generator) -> Iterator[Generator]:
    try:
        yield gen
    finally:
        gen.close()


def _sample(tok, c: Completion) -> Sample:
    reason = c.finish_reason if c.finish_reason in ("stop", "length", "error") else "stop"
    return Sample(text=c.text, token_ids=response_token_ids(tok, c.text) if c.text else [],
                  finish_reason=reason, error=c.error)


def generate_all(cfg: Config, prompts: list[Prompt], generator: Generator | None = None,
                 cache_dir: Path | None = None, progress: bool = True) -> tuple[list[Generation], dict]:
    """Generate greedy + S samples for each prompt, reusing cached items.

    Items are cached by content (backbone, chat prompt, decoding settings), so two
    prompts with the same text share one generation; each record returned carries
    its own prompt's id and text.  Duplicate prompt ids are an error.  With a backend
    that seeds each sample on its own (``llamacpp``, ``hf``), a prompt cached with another
    S is reused: cut to S, or topped up with the samples it lacks (`reusable_samples`).
    """
    seen: dict[str, int] = {}
    for i, p in enumerate(prompts):
        if p.id in seen:
            raise ValueError(f"prompt id {p.id!r} appears twice (prompts {seen[p.id] + 1} and {i + 1}); "
                             "every prompt needs its own id")
        seen[p.id] = i
    paths = StagePaths.from_config(cfg)
    cache = ItemCache(cache_dir or paths.stage_cache("generate"))
    tok = load_tokenizer(cfg)
    dec = decoding_settings(cfg)
    n = cfg.generate.n_samples
    # a prompt with sources (`Prompt.context`) is answered with them in its input, rendered as the scorer does
    chats = [chat_prompt(tok, p.text, cfg.backbone.system_prompt) if p.context is None
             else context_chat(tok, p.text, p.context, cfg.backbone.system_prompt) for p in prompts]
    key = lambda chat, s: content_hash({"backbone": cfg.backbone.name, "chat": chat,  # noqa: E731
                                        "decoding": {**dec, "n_samples": s}, "seed": cfg.generate.seed, "v": 1})
    keys = [key(c, n) for c in chats]
    first: dict[str, int] = {}
    for i, k in enumerate(keys):
        first.setdefault(k, i)
    todo = [i for k, i in first.items() if k not in cache]  # one model call per distinct content
    stats = {"prompts": len(prompts), "cached": len(prompts) - len(todo), "generated": 0,
             "generated_tokens": 0, "generate_seconds": 0.0}
    # another S of the same settings: its first min(S, S') samples are this run's (`reusable_samples`)
    one_by_one = (generator.name if generator is not None else dec["backend"]) in SEEDED_ONE_BY_ONE
    others = reusable_samples(cache, todo, lambda i, s: key(chats[i], s), n) if one_by_one else {}
    for i, rec in others.items():
        if len(rec.samples) >= n:  # cut: no model call
            cache.put(keys[i], rec.model_copy(update={"samples": rec.samples[:n], "decoding": dec}).model_dump(mode="json"))
    todo = [i for i in todo if i not in others or len(others[i].samples) < n]
    stats["samples_reused_from"] = len(others)
    if others:
        log.info("generate: %d prompt(s) reuse the samples cached at another S (%d cut, %d topped up to S = %d)",
                 len(others), sum(len(r.samples) >= n for r in others.values()),
                 sum(len(r.samples) < n for r in others.values()), n)
    if todo:
        with (open_generator(cfg) if generator is None else _borrowed(generator)) as gen:
            stats["backend"] = gen.name
            bs = max(1, cfg.generate.batch_size)
            bar = tqdm(total=len(todo), desc=f"generate[{gen.name}]", unit="prompt", disable=not progress)
            fresh = [i for i in todo if i not in others]
            topped = sorted((i for i in todo if i in others), key=lambda i: len(others[i].samples))
            for s in range(0, len(fresh), bs):
                idx = fresh[s:s + bs]
                t0 = time.perf_counter()
                seeds = [prompt_seed(cfg.generate.seed, prompts[i].id) for i in idx]
                greedy, samples = greedy_and_samples(gen, [chats[i] for i in idx], n, seeds)
                stats["generate_seconds"] += time.perf_counter() - t0
                recs = [Generation(prompt_id=prompts[i].id, backbone=cfg.backbone.name, prompt_text=prompts[i].text,
                                   chat_prompt=chats[i], greedy=_sample(tok, greedy[j]),
                                   samples=[_sample(tok, c) for c in samples[j]], decoding=dec, seed=seeds[j])
                        for j, i in enumerate(idx)]
                stats["generated_tokens"] += sum(len(r.greedy.token_ids) + sum(len(x.token_ids) for x in r.samples)
                                                 for r in recs)
                _keep(cache, [keys[i] for i in idx], stats, recs)
                bar.update(len(idx))
            for s in range(0, len(topped), bs):  # the samples a run with fewer did not draw, from its own seeds
                idx, drawn = topped[s:s + bs], {}
                t0 = time.perf_counter()
                for m in sorted({len(others[i].samples) for i in idx}):
                    group = [i for i in idx if len(others[i].samples) == m]
                    got = gen.sample([others[i].chat_prompt for i in group], n, [others[i].seed for i in group], first=m)
                    drawn.update({i: [_sample(tok, c) for c in cs] for i, cs in zip(group, got)})
                stats["generate_seconds"] += time.perf_counter() - t0
                stats["generated_tokens"] += sum(len(x.token_ids) for i in idx for x in drawn[i])
                _keep(cache, [keys[i] for i in idx], stats,
                      [others[i].model_copy(update={"samples": others[i].samples + drawn[i], "decoding": dec}) for i in idx])
                bar.update(len(idx))
            bar.close()
    # the cached record may have been written for another prompt with the same text
    gens = [given_answer(tok, Generation.model_validate(cache.get(k)), p) for k, p in zip(keys, prompts)]
    return gens, stats


# backends whose sample j of a prompt is drawn from its own seed (`hf.sample_seeds`) whatever S is
SEEDED_ONE_BY_ONE = ("llamacpp", "hf")
REUSE_SEARCH = 64  # how many other sample counts above S to look for


def reusable_samples(cache: ItemCache, todo: list[int], key, n: int) -> dict[int, Generation]:
    """For each item ``i`` of ``todo`` (not cached at S = ``n``), a cached record of the same prompt and
    settings with another number of samples, when one exists: ``key(i, s)`` is its cache key at S = s.
    With samples seeded one by one, sample j does not depend on S, so a record with more samples
    holds this run's (cut it) and one with fewer holds the first of them (draw the rest): raising
    S from 7 to 9 costs two samples a prompt, not nine.  The nearest larger S is taken first."""
    out = {}
    for i in todo:
        for s in [*range(n + 1, n + REUSE_SEARCH + 1), *range(n - 1, 0, -1)]:
            k = key(i, s)
            if k in cache and (rec := cache.get(k)) is not None:
                out[i] = Generation.model_validate(rec)
                break
    return out


def _keep(cache: ItemCache, keys: list[str], stats: dict, recs: list[Generation]) -> None:
    """Write each record under its key, durable before moving on."""
    for k, rec in zip(keys, recs):
        cache.put(k, rec.model_dump(mode="json"))
        stats["generated"] += 1


def given_answer(tok, gen: Generation, prompt: Prompt) -> Generation:
    """``gen`` (cached by the chat prompt's content) as ``prompt``'s record: its id and text, and
    where the prompt carries its own ``response`` (an answer another system wrote), that answer
    in place of the greedy one.  The samples stay the backbone's: the teacher then asks whether
    the backbone would say the given answer's claims again, and the extract stage reads the given
    answer teacher-forced.  Answers given for the same question share one set of samples."""
    update = {"prompt_id": prompt.id, "prompt_text": prompt.text}
    if prompt.response is not None:
        update |= {"greedy": Sample(text=prompt.response, token_ids=response_token_ids(tok, prompt.response)),
                   "answer_given": True}
    return gen.model_copy(update=update)


@contextmanager
def _borrowed(gen: Generator) -> Iterator[Generator]:
    yield gen  # the caller owns (and closes) it


def summarize(gens: list[Generation]) -> dict:
    n = max(1, len(gens))
    lens = [len(g.greedy.token_ids) for g in gens]
    all_samples = [s for g in gens for s in g.samples]
    return {
        "n": len(gens),
        "empty_greedy": sum(g.empty for g in gens),
        "truncated_greedy": sum(g.greedy.finish_reason == "length" for g in gens),
        "empty_samples": sum(not s.text.strip() for s in all_samples),
        "truncated_samples": sum(s.finish_reason == "length" for s in all_samples),
        "mean_greedy_tokens": sum(lens) / n,
        "max_greedy_tokens": max(lens, default=0),
    }


def run_generate(cfg: Config, progress: bool = True) -> Path:
    """DVC/Prefect entry point: read prompts, generate, write generations + report (what the answers
    are) + run log (how this run went: cached or generated, seconds, backend)."""
    from ..llm.judge_endpoint import preflight

    preflight(cfg)  # the judge, corpus and NLI model the label stage needs: checked before hours of decoding
    paths = StagePaths.from_config(cfg)
    prompts = read_records(paths.prompts, Prompt)
    if not prompts:
        raise ValueError(f"{paths.prompts} has no prompts")
    t0 = time.perf_counter()
    gens, stats = generate_all(cfg, prompts, progress=progress)
    wall = time.perf_counter() - t0
    write_jsonl(paths.generations, gens)
    report = summarize(gens)
    write_json(paths.generate_report, report)
    run = {**stats, "wall_seconds": round(wall, 2)}
    if stats["generate_seconds"] > 0:
        run["tokens_per_second"] = round(stats["generated_tokens"] / stats["generate_seconds"], 1)
    write_json(paths.run_log("generate"), run)
    for k in ("empty_greedy", "truncated_greedy"):
        if report[k]:
            log.warning("%d of %d greedy answers are %s", report[k], report["n"], k.split("_")[0])
    return paths.generations
