"""`SpanUQ.score_stream`: spans and û of the answer while the backbone is still generating it.

The hidden states are captured as the answer grows (`spanuq.llm.capture.StateCapture`), so
there is no second pass over the whole answer:

* ``hf``: greedy decoding on the KV cache; the pass that picks token t+1 is the one that
  gives token t's state, so generating and capturing are the same forward passes;
* ``llamacpp`` (any OpenAI-compatible server: llama.cpp here, ``vllm serve`` on a GPU): the
  server streams text (``stream: true``); when an update is due, the text so far is tokenised
  the way `score` tokenises an answer and only the tokens not yet read are read, in one
  teacher-forced pass on the cache, while the server goes on generating (the last token is
  held back: the next text may merge into it; if re-tokenising ever changes earlier tokens,
  the cache is cropped back to the first change).

The backbone is used under ``uq.lock`` (`SpanUQ`): while transformers decodes a token and while
new tokens are read, never while a server generates, so another lane of the service can score
given answers between them.

Every ``every`` tokens and at each clause end (a token ending in ``. , ; : ! ?`` or a line
break) the answer so far is scored through `SpanUQ.score_many` with the captured states: the
same checks, post-processing and record as `score`.  A partial answer is scored on its
longest prefix whose canonical tokens are the tokens read so far.  The last update scores the
final answer (stop strings cut, stripped) the same way, so it equals
``score_many([{"prompt": prompt, "response": answer, "answer_source": "generated"}])`` (the
backbone's own answer, calibrated as one); if the final answer's canonical tokens differ from the
generated ones, only the tokens from the first difference on are read again.
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Iterator

from ..llm.capture import StateCapture
from ..llm.loading import count_tokens, token_ids, token_offsets
from .errors import InputError
from .schema import ScoreRequest, ScoreResult, StreamUpdate, Timings

CLAUSE_END = (".", ",", ";", ":", "!", "?", "\n")


def cut_at_stop(text: str, stop: list[str] | None) -> tuple[str, bool]:
    """``text`` up to the first stop string (as the llama.cpp server cuts it) and whether one was found."""
    cut = min((i for i in (text.find(s) for s in stop or []) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def hf_text(uq, cap: StateCapture, max_new: int) -> Iterator[tuple[str, str | None]]:
    """Greedy transformers decoding on the capture's cache: ``(text so far, None)`` per token,
    then ``(text, "stop" | "length")``."""
    stop, eos = uq.cfg.generate.stop, uq.tok.eos_token_id
    text = ""
    for _ in cap.greedy(max_new, eos):
        text = uq.tok.decode(cap.ids, skip_special_tokens=True)
        if cut_at_stop(text, stop)[1] or int(cap.next_logits.argmax()) == eos:  # the next token ends it
            yield text, "stop"
            return
        if len(cap.ids) >= max_new:
            yield text, "length"
            return
        yield text, None
    yield text, "stop"


def _server_text(uq, cap: StateCapture, chat: str, max_new: int) -> Iterator[tuple[str, str | None]]:
    """Text streamed by the managed OpenAI-compatible server; each arrival's new tokens are read on the cache."""
    from ..llm.llamacpp import ServerCrashed
    from ..llm.openai_client import EndpointError, EndpointUnreachable

    gen = uq.generation
    try:
        client = gen.client()
        n_prompt = count_tokens(uq.tok, chat)
        if n_prompt + max_new > gen.server.n_ctx:
            raise InputError(f"the prompt has {n_prompt:,} tokens; with {max_new} new tokens that exceeds the "
                             f"llama.cpp context of {gen.server.n_ctx:,}")
        text = ""
        for delta, finish in client.greedy_stream(chat, max_new):
            text += delta  # read on the cache when an update is due (`score_stream`), k tokens in one pass
            yield text, finish
            if finish:
                return
    except (ServerCrashed, EndpointError, EndpointUnreachable) as e:
        raise gen.failure(e) from e
    yield text, "stop"


def _scorable(uq, cap: StateCapture, text: str) -> tuple[str, int]:
    """The longest prefix of ``text`` whose canonical tokens are the first tokens read: (prefix, its token count)."""
    ids, offsets = token_offsets(uq.tok, text)
    n = 0
    while n < min(len(ids), len(cap.ids)) and ids[n] == cap.ids[n]:
        n += 1
    while n:
        prefix = text[: offsets[n - 1][1]]
        if token_offsets(uq.tok, prefix)[0] == cap.ids[:n]:
            return prefix, n
        n -= 1
    return "", 0


def _score(uq, prompt: str, answer: str, cap: StateCapture | None, n: int, generator: str | None, chat,
           source: str = "generated", context: list | None = None) -> ScoreResult:
    """The answer so far scored as `score` scores it (calibrated for its ``source``), said to be the
    backbone's (``generator``'s), or (``source="given"``) an upstream server's; ``chat``: the rendered
    conversation, or (with ``context``) its messages, rendered with the sources as `score` renders them."""
    out = uq.score_many([ScoreRequest(prompt=prompt, response=answer, answer_source=source, context=context)],
                        progress=False, return_errors=True, states=[cap.item(n)] if cap is not None else None,
                        chats=[chat])[0]
    if isinstance(out, Exception):
        raise out
    return out.model_copy(update={"generator": generator if source == "generated" else None})


def score_stream(uq, prompt: str, *, every: int = 8, at_clauses: bool = True, generator: str | None = None,
                 cancel=None, chat: str | None = None, text=None, stop: list[str] | None = None,
                 max_new_tokens: int | None = None, answer_source: str = "generated", context: list | None = None,
                 messages: list[dict] | None = None) -> Iterator[StreamUpdate]:
    """See the module docstring.  ``uq``: the `SpanUQ` (its backbone, probe and checks; scorer.py imports
    this module, not the other way round); ``cancel`` (a `threading.Event`) stops the generation at the next token.
    The OpenAI endpoint (`spanuq.score.openai`) streams other answers the same way: ``chat``, the rendered
    conversation (default: ``prompt`` under the system prompt); ``text``, a function of the capture giving
    ``(text so far, finish_reason or None)`` pairs (default: the backbone's greedy answer); ``stop``, the
    stop strings the final answer is cut at (default ``generate.stop``); ``max_new_tokens`` (default
    ``score.max_new_tokens``); ``answer_source`` ``given`` when another server writes the answer.
    ``context``: sources, rendered after ``messages`` (default: ``prompt`` as the user's turn) as `score`
    renders them (`spanuq.context.render`); they must fit in one window, the one the answer is written in."""
    if every < 1:
        raise ValueError(f"every={every}: re-score every k >= 1 tokens")
    uq.check(prompt, None)
    max_new = uq.cfg.score.max_new_tokens if max_new_tokens is None else max_new_tokens
    scored_chat = chat
    with uq.lock:  # the tokenizer: one thread at a time
        if context is not None:
            from . import grounded

            messages = messages or [{"role": "user", "content": prompt}]
            windows = grounded.windows_for(uq.tok, messages, grounded.checked_passages(context, uq.cfg.score),
                                           uq.system_prompt, uq.max_context, max_new, uq.cfg.score)
            if len(windows) > 1:
                raise InputError(f"the sources need {len(windows)} windows: a streamed answer is written with all of them "
                                 "in the backbone's input, so they must fit in one (score.context_tokens)", 413)
            chat, n_prompt, scored_chat = windows[0].chat, windows[0].n_tokens, messages
        elif chat is None:
            chat, n_prompt = uq._chat(prompt)
            scored_chat = chat
        else:
            n_prompt = count_tokens(uq.tok, chat)
    stop = uq.cfg.generate.stop if stop is None else stop
    uq._check_context(n_prompt, max_new, "generation")
    gen = generator or uq.generation.resolve()
    if gen not in ("hf", "llamacpp"):
        raise ValueError(f"generator={gen!r}: hf or llamacpp")
    t0 = time.perf_counter()
    cap = None

    def capture() -> StateCapture:
        """The backbone's pass over the prompt, made when first needed: a server's text does not need it,
        so its first tokens are streamed while the prompt is read, not after."""
        nonlocal cap
        if cap is None:
            cap = StateCapture(uq.model, token_ids(uq.tok, chat), uq.layers, uq.out_dtype)
        return cap

    decoding = uq.lock if gen == "hf" else nullcontext()  # transformers decodes on the backbone itself
    if gen == "hf":
        with uq.lock:
            capture()  # hf decodes on the capture itself
    if text is not None:
        source = text(cap)
    else:
        source = hf_text(uq, cap, max_new) if gen == "hf" else _server_text(uq, cap, chat, max_new)
    seq, scored_n, n_gen, finish, text = 0, 0, 0, None, ""

    def update(result: ScoreResult, done: bool, t_start: float) -> StreamUpdate:
        nonlocal seq
        now = time.perf_counter()
        seq += 1
        return StreamUpdate(seq=seq - 1, done=done, n_generated=n_gen, elapsed_s=round(now - t0, 4),
                            update_s=round(now - t_start, 4),
                            tokens_per_s=round(n_gen / max(now - t0, 1e-9), 2), result=result)

    try:
        while True:
            with decoding:
                try:
                    text, finish = next(source)
                except StopIteration:
                    break
            if cancel is not None and cancel.is_set():
                return
            answer = cut_at_stop(text, stop)[0].strip()
            with uq.lock:
                if gen == "hf":
                    n_gen = len(cap.ids)
                else:  # the server's tokens so far, as `score` tokenises the answer
                    ids = token_offsets(uq.tok, answer)[0]
                    n_gen = len(ids)
            if finish:
                break
            due = n_gen - scored_n >= every or (at_clauses and n_gen > scored_n and text.endswith(CLAUSE_END))
            if not due:
                continue
            t1 = time.perf_counter()
            with uq.lock:
                if gen != "hf":
                    capture().sync(ids[:-1])  # the new tokens in one pass; the last one may still grow into a longer one
                prefix, n = _scorable(uq, cap, answer)
                result = _score(uq, prompt, prefix, cap, n, gen, scored_chat, answer_source, context) if n else None
            if result is not None:
                scored_n = n_gen
                yield update(result, False, t1)
    finally:
        source.close()
    gen_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    answer = cut_at_stop(text, stop)[0].strip()
    if not answer:  # nothing to judge: the result says so (status unverified, empty_answer)
        result = _score(uq, prompt, "", None, 0, gen, scored_chat, answer_source, context)
        result = result.model_copy(update={"truncated": finish == "length", "timings": Timings(
            generate_s=round(gen_s, 4), backbone_s=0.0, probe_s=0.0, total_s=round(time.perf_counter() - t0, 4))})
        yield update(result, True, t1)
        return
    with uq.lock:
        ids, _ = token_offsets(uq.tok, answer)
        read_s = capture().seconds
        cap.sync(ids)  # only tokens that differ from those read are read again (usually none, or the held-back last)
        # the backbone's time beyond generation: the server path's whole capture, the hf path's re-read tokens
        backbone_s = cap.seconds if gen == "llamacpp" else cap.seconds - read_s
        n_gen = max(n_gen, len(cap.ids))
        result = _score(uq, prompt, answer, cap, len(ids), gen, scored_chat, answer_source, context)
    result = result.model_copy(update={
        "truncated": finish == "length",
        "timings": Timings(generate_s=round(gen_s, 4), backbone_s=round(backbone_s, 4), probe_s=result.timings.probe_s,
                           total_s=round(time.perf_counter() - t0, 4))})
    yield update(result, True, t1)
