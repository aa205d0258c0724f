"""`spanuq score` and `spanuq serve`: argument parsing and output (spanuq/cli.py wires them in).

    spanuq score "Who was Marie Curie?"                    # coloured answer + legend
    spanuq score "Who was Marie Curie?" --response @answer.txt --json
    spanuq score "…" --html page.html
    spanuq score "Who was Marie Curie?" --stream             # spans colour in while the backbone answers
    spanuq score --file prompts.jsonl --out scored.jsonl   # rows {prompt, response?, answer_source?, context?, id?}
    spanuq score "When was it built?" --response @a.txt --context @source.txt   # against a source (repeatable)
    spanuq score "When was it built?" --response @a.txt --corpus passages.jsonl # against the top-k BM25 passages
    spanuq serve --port 8000                                # http://127.0.0.1:8000
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from tqdm.auto import tqdm

from ..pipeline.files import read_user_text


def add_model_args(p: argparse.ArgumentParser) -> None:
    from ..config import ScoreConfig

    p.add_argument("--model", default=None, metavar="shipped|DIR|URI",
                   help="which probe scores: `shipped` (the probe shipped with spanuq), a checkpoint folder, or an "
                        "MLflow URI (models:/spanuq-<backbone>@champion); default: data/<backbone>/probe when a "
                        "finished `dvc repro` trained one here, else the shipped probe")
    p.add_argument("--generator", choices=["auto", "llamacpp", "hf"], default=None,
                   help="how score(prompt) generates: llamacpp = the llama.cpp server, then one teacher-forced pass; "
                        "hf = transformers, states captured while it generates; auto = llamacpp when its server "
                        f"proves itself on this machine, else hf (default: {ScoreConfig().generator}, "
                        "score.generator)")
    p.add_argument("--threshold", type=float, default=None, help="validity threshold for kept spans "
                                                                 "(default: the probe's, chosen on dev)")
    p.add_argument("--conformal-alpha", type=float, default=None, metavar="A",
                   help="flag the spans above the probe's conformal threshold for error level A (fitted by `spanuq "
                        "calibrate`; score.conformal_alpha; docs/guarantees.md)")
    p.add_argument("--guarantee", choices=["factuality", "fdr"], default=None,
                   help="which conformal guarantee (default: score.conformal_guarantee, factuality)")
    p.add_argument("--delta", type=float, default=None, help="fdr: the δ the threshold was fitted with")


def add_score_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("prompt", nargs="?", help="the prompt (omit with --file)")
    p.add_argument("--response", default=None, metavar="TEXT|@FILE", help="score this answer instead of generating")
    p.add_argument("--answer-source", choices=["given", "generated"], default=None,
                   help="who wrote --response: given (default: another model or a person) or generated (this "
                        "backbone, e.g. through a server that serves it); û is calibrated for each")
    p.add_argument("--context", action="append", default=None, metavar="TEXT|@FILE",
                   help="a source to read the answer against (a passage, a tool result, a document); repeat for "
                        "more; numbered in the order given (docs/context.md)")
    p.add_argument("--corpus", default=None, metavar="FILE",
                   help="JSONL of passages {id, text, title?}: the top score.context_top_k passages for the prompt "
                        "(and the response) by BM25 are the sources (the index is the label stage's format)")
    p.add_argument("--corpus-index", default=None, metavar="DIR",
                   help="where --corpus's BM25 index is kept (built when missing or stale; default: FILE.bm25_index)")
    p.add_argument("--json", action="store_true", help="print the result as JSON (docs/score.schema.json)")
    p.add_argument("--html", default=None, metavar="FILE", help="also write a standalone HTML page")
    p.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                   help="auto: colour on a terminal unless NO_COLOR is set")
    p.add_argument("--stream", action="store_true",
                   help="score while the backbone answers: the coloured answer is redrawn live on a terminal "
                        "(one plain line per update when piped; --json: one StreamUpdate per line)")
    p.add_argument("--file", default=None, help="JSONL with rows {prompt, response?, answer_source?, context?, id?}")
    p.add_argument("--out", default=None, help="with --file: output JSONL (default: <file>.scored.jsonl)")
    add_model_args(p)


def add_serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default=None, help="default: score.host (127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="default: score.port (8000)")
    p.add_argument("--upstream", default=None, metavar="URL",
                   help="/v1/chat/completions: forward to this OpenAI-compatible server (any model: its answers are "
                        "scored as given answers, against the conversation's sources) and score its answers "
                        "(default: the backbone answers; docs/openai.md)")
    p.add_argument("--upstream-model", default=None, metavar="ID",
                   help="declare that the upstream's model ID serves the probe's backbone: a reply from another model "
                        "or tokenizer is then unverified (probe_backbone_mismatch)")
    p.add_argument("--upstream-api-key-env", default=None, metavar="NAME",
                   help="the environment variable holding the upstream's API key (never logged)")
    p.add_argument("--upstream-timeout", type=float, default=300.0, help="seconds per upstream request")
    add_model_args(p)


def load_uq(args, cfg):
    """The `SpanUQ` of a command's --model / --generator / --threshold / -o; says on stderr which probe
    scores, with what settings, and why a probe trained here was passed over."""
    from transformers.utils import logging as hf_logging

    from ..config import parse_overrides
    from .scorer import SpanUQ

    hf_logging.disable_progress_bar()  # "Loading weights" on every call is noise in a command's output
    overrides = parse_overrides(getattr(args, "override", None))
    for key, arg in (("conformal_alpha", "conformal_alpha"), ("conformal_guarantee", "guarantee"),
                     ("conformal_delta", "delta")):
        if getattr(args, arg, None) is not None:
            overrides[f"score.{key}"] = getattr(args, arg)
    uq = SpanUQ.load(args.model, cfg=cfg, generator=args.generator, threshold=args.threshold, overrides=overrides)
    if uq.probe_note:
        print(f"spanuq: {uq.probe_note}", file=sys.stderr)
    print(f"spanuq: {uq.probe_line()}\nspanuq: {uq.settings.describe()}", file=sys.stderr, flush=True)
    if uq.guarantee is not None:
        print(f"spanuq: conformal threshold {uq.guarantee.threshold}: {uq.guarantee.statement()}", file=sys.stderr)
    return uq


def read_arg(value: str | None) -> str | None:
    """``@answer.txt`` → the file's text (UTF-8) without its final line break (as ``$(cat answer.txt)``
    reads it: the break ends the file's last line, it is not part of the answer); anything else as it is."""
    if value is None or not value.startswith("@"):
        return value
    text = read_user_text(value[1:], "response file")
    return text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text


class Sources:
    """The sources of `spanuq score`: the --context passages, or the top-k of --corpus for each prompt."""

    def __init__(self, args, cfg):
        self.given = [read_arg(c) for c in args.context] if args.context else None
        if self.given is not None and args.corpus:
            raise ValueError("give the sources as --context or retrieve them with --corpus, not both")
        self.k, self.retriever = cfg.score.context_top_k, None
        if args.corpus:
            from ..context.retrieval import BM25Retriever  # bm25s: only when there is a corpus to search

            corpus = Path(args.corpus)
            if not corpus.is_file():
                raise FileNotFoundError(f"{corpus}: no such corpus file")
            index = Path(args.corpus_index) if args.corpus_index else corpus.with_name(corpus.name + ".bm25_index")
            self.retriever = BM25Retriever.open(corpus, index)

    def __call__(self, prompt: str, response: str | None, row: list | None = None) -> list | None:
        """The context of one prompt: a --file row's own, else --context, else the passages --corpus retrieves
        for the prompt and the response (none found: an empty list, refused as no sources)."""
        if row is not None or self.retriever is None:
            return row if row is not None else self.given
        hits = self.retriever.search(f"{prompt} {response or ''}", self.k)
        return [{"id": p.id, "text": p.text, "title": p.title} for p, _ in hits]


def check_early(prompt: str | None, response: str | None, cfg) -> None:
    """The input checks `SpanUQ` runs, before anything is loaded (an empty answer fails in milliseconds:
    one empty --response is a slip, not a question; empty answers in --file rows or the API are scored
    as unverified)."""
    from .errors import InputError, check_input

    check_input(prompt, response, cfg.score)
    if response is not None and not response.strip():
        raise InputError("the response is empty (leave it out to let the backbone answer)")


def use_colour(mode: str, stream=None) -> bool:
    """ANSI colour for ``stream`` (default: sys.stdout as it is now, not as it was at import)."""
    if mode != "auto":
        return mode == "always"
    return (stream or sys.stdout).isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def run_score(args, cfg) -> int:
    from .views import html_page, terminal_view

    if args.file:
        if args.stream:
            raise ValueError("--stream scores one prompt as the backbone answers it; it does not take --file")
        return _score_file(args, cfg)
    if not args.prompt:
        raise ValueError("give a prompt (spanuq score \"Who was Marie Curie?\") or --file prompts.jsonl")
    if args.stream:
        return _score_stream(args, cfg)
    response = read_arg(args.response)  # a file that cannot be read fails before the backbone loads
    check_early(args.prompt, response, cfg)
    context = Sources(args, cfg)(args.prompt, response)
    if context is not None:
        from .grounded import checked_passages

        checked_passages(context, cfg.score)
    with load_uq(args, cfg) as uq:
        result = uq.score(args.prompt, response=response, answer_source=args.answer_source, context=context)
    if args.html:
        Path(args.html).write_text(html_page(result), encoding="utf-8")
    if args.json:
        print(result.model_dump_json(indent=2))
    else:
        print(terminal_view(result, use_colour(args.color)))
    return 0


def _score_stream(args, cfg) -> int:
    """`spanuq score --stream`: redraw on a terminal, plain lines (or JSON lines) when piped."""
    from .views import LiveTerminal, html_page, stream_line, terminal_view

    if args.response is not None:
        raise ValueError("--stream scores the backbone's answer as it is generated; leave out --response")
    check_early(args.prompt, None, cfg)
    context = Sources(args, cfg)(args.prompt, None)
    colour = use_colour(args.color)
    live = LiveTerminal(sys.stdout) if sys.stdout.isatty() and not args.json else None
    with load_uq(args, cfg) as uq:
        for update in uq.score_stream(args.prompt, context=context):
            if args.json:
                print(update.model_dump_json(), flush=True)
            elif live is not None:
                state = "done" if update.done else "generating…"
                live.draw(f"{terminal_view(update.result, colour)}\n[{update.n_generated} tokens, "
                          f"{update.tokens_per_s:.1f} tok/s, {state}]")
            else:
                print(stream_line(update), flush=True)
    if live is None and not args.json:
        print("\n" + terminal_view(update.result, colour))
    if args.html:
        Path(args.html).write_text(html_page(update.result), encoding="utf-8")
    return 0


def _rows(path: Path):
    """(line, row dict or None, error) for each non-empty line; a line that is not UTF-8 is that
    row's error (its text is never guessed at), the other lines are read as they are."""
    with path.open("rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8-sig" if n == 1 else "utf-8")
            except UnicodeDecodeError as e:
                yield n, None, f"not UTF-8 text ({e.reason} at byte {e.start} of the line)"
                continue
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
                    raise ValueError("a row needs a string `prompt`")
                if row.get("response") is not None and not isinstance(row["response"], str):
                    raise ValueError("`response` must be a string")
                if row.get("answer_source") not in (None, "given", "generated"):
                    raise ValueError(f"`answer_source` is {row['answer_source']!r}: given or generated")
                yield n, row, None
            except (ValueError, json.JSONDecodeError) as e:
                yield n, None, f"{type(e).__name__ if isinstance(e, json.JSONDecodeError) else 'invalid row'}: {e}"


def _score_file(args, cfg) -> int:
    """Score every row; a row that cannot be scored is written with its error, the rest go on."""
    src = Path(args.file)
    if not src.exists():
        raise FileNotFoundError(f"{src}: no such file")
    out = Path(args.out or src.with_suffix(".scored.jsonl"))
    rows = list(_rows(src))
    sources = Sources(args, cfg)
    bs = max(1, cfg.score.batch_size)
    n_err = n_warn = 0
    with load_uq(args, cfg) as uq, out.open("w", encoding="utf-8") as f:
        bar = tqdm(total=len(rows), desc="score", unit="row", disable=args.no_progress)
        for s in range(0, len(rows), bs):
            chunk = rows[s: s + bs]
            good = [(n, r) for n, r, err in chunk if r is not None]
            results = uq.score_many([{"prompt": r["prompt"], "response": r.get("response"),
                                      "answer_source": r.get("answer_source"),
                                      "context": sources(r["prompt"], r.get("response"), r.get("context"))}
                                     for _, r in good], progress=False, return_errors=True)
            by_line = {n: res for (n, _), res in zip(good, results)}
            for n, r, err in chunk:
                rec = {"line": n, **({"id": r["id"]} if r and "id" in r else {})}
                res = by_line.get(n)
                if err is not None or isinstance(res, Exception):
                    n_err += 1
                    rec["error"] = err or str(res)
                else:
                    rec["result"] = res.model_dump(mode="json")
                    n_warn += res.status == "unverified"
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            f.flush()
            bar.update(len(chunk))
        bar.close()
    print(f"score: {len(rows) - n_err} of {len(rows)} rows scored, {n_err} errors recorded"
          + (f", {n_warn} unverified (e.g. another language, an empty answer)" if n_warn else "")
          + f"; wrote {out}", file=sys.stderr)
    return 0


def run_serve(args, cfg) -> int:
    from .service import serve

    host, port = args.host or cfg.score.host, args.port or cfg.score.port
    upstream = None
    if args.upstream:  # reachable, and serving what --upstream-model says, before the backbone loads
        from .openai.engines import Upstream

        upstream = Upstream(args.upstream, args.upstream_api_key_env, args.upstream_model, args.upstream_timeout)
        print(f"spanuq: upstream {upstream.url} serves {', '.join(upstream.check())}", file=sys.stderr)
    uq = load_uq(args, cfg)
    try:
        answers = f"upstream {upstream.url}" if upstream else "the backbone"
        print(f"SpanUQ ({uq.backbone_name}) at http://{host}:{port}  (API docs: /docs; OpenAI-compatible: /v1, "
              f"answered by {answers}; Ctrl-C to stop)", flush=True)
        serve(uq, host, port, upstream)
    finally:
        uq.close()
        if upstream is not None:
            upstream.close()
    return 0
