"""In-process llama.cpp backend: every sequence of a batch decoded together (continuous batching).

llama-cpp-python's server decodes one request at a time, so the ``server`` backend spreads
prompts over one single-thread server per core.  Here the shipped
GGUF runs in this process through llama.cpp's own batch API: up to ``llamacpp_slots``
sequences (a prompt's greedy answer and its S samples, several prompts at once) advance by
one token per ``llama_decode`` call, each in its own KV stream, a prompt decoded once and its
KV copied to the sequences that continue it.  A finished sequence frees its slot for the
next waiting prompt at once: faster than the servers on the same prompts (`benchmarks/bench_generate.py`,
`experiments/llamacpp_batch.py`; figures in docs/results.md).

Sampling is llama.cpp's own sampler chain with the server's defaults (`TOP_K` ...), one chain
per sequence seeded from its prompt's seed (`hf.sample_seeds`): a prompt's samples do not depend
on which prompts share its batch, up to float rounding where a batch's composition changes its sums.

The build is proved in a child process before it is loaded here (`prove_in_child`): a llama.cpp
built for another CPU dies with SIGILL/SIGSEGV on its first real forward pass, and that must be
an error message, not the death of the stage.
"""
from __future__ import annotations

import ctypes
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..config import Config
from ..pipeline.cpus import available_cpus
from .base import Completion
from .hf import sample_seeds

# The sampler chain and defaults of llama-cpp-python's server (`Llama._init_sampler`, server
# request defaults), so the two llama.cpp paths sample alike: a repetition penalty over the
# last 64 generated tokens, then top-k, top-p, min-p, temperature and a seeded draw (greedy:
# the penalty, then the arg-max).
TOP_K, MIN_P, REPEAT_PENALTY, PENALTY_LAST_N = 40, 0.05, 1.1, 64


def context_per_sequence(max_new_tokens: int, sample_max_new_tokens: int | None, prompt_room: int = 768) -> int:
    """A sequence's KV budget when ``generate.llamacpp_ctx`` is not set: the larger answer budget
    plus room for the prompt, rounded up to 256 (attention costs what a stream holds, so no more)."""
    need = max(max_new_tokens, sample_max_new_tokens or 0) + prompt_room
    return -(-need // 256) * 256


@dataclass
class _Request:
    """A prompt and the sequences still to start on it: ``(index, temperature, seed, max new tokens)``."""

    tokens: list[int]
    todo: list[tuple[int, float, int, int]]
    live: list["_Seq"] = field(default_factory=list)  # started sequences whose KV holds the prompt


@dataclass
class _Seq:
    """One sequence being decoded: where its result goes, its slot and sampler."""

    req: int
    index: int
    slot: int
    sampler: object
    pos: int  # the position of ``pending``
    pending: int  # the token to feed next (first: the prompt's last token)
    max_new: int
    text: bytearray = field(default_factory=bytearray)
    n_new: int = 0
    finish_reason: str = "stop"


class LlamaCppGenerator:
    name = "llamacpp"

    def __init__(self, cfg: Config, model_path: str | Path | None = None, prove: bool = True):
        try:
            import llama_cpp as L
            from llama_cpp._logger import set_verbose
        except ImportError as e:
            raise RuntimeError("generate.backend=llamacpp needs llama-cpp-python, which `pip install .` and the gpu "
                               "extra leave out: pip install 'spanuq[llamacpp]' (a CPU install), or "
                               "generate.backend=hf|vllm|auto") from e
        g = cfg.generate
        self.cfg = g
        if model_path is None:
            from ..llm.loading import gguf_path
            from ..llm.presets import get_preset

            preset = get_preset(cfg.backbone.name)
            if not preset.gguf_package:
                raise ValueError(f"generate.backend=llamacpp needs a GGUF backbone; {preset.name} has none")
            model_path = gguf_path(preset)
        self.model_path = str(model_path)
        self.slots = max(1, g.llamacpp_slots)
        self.threads = g.llamacpp_threads or available_cpus()
        self.ctx_per_seq = g.llamacpp_ctx or context_per_sequence(g.max_new_tokens, g.sample_max_new_tokens)
        if prove:
            prove_in_child(self.model_path)
        self.L = L
        set_verbose(False)
        L.llama_backend_init()
        self.model = L.llama_model_load_from_file(self.model_path.encode(), L.llama_model_default_params())
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {self.model_path}")
        cp = L.llama_context_default_params()
        cp.n_seq_max, cp.kv_unified = self.slots, False  # one KV stream per sequence: attention costs its own length
        cp.n_ctx = self.ctx_per_seq * self.slots
        cp.n_batch = cp.n_ubatch = max(512, self.slots)
        cp.n_threads = cp.n_threads_batch = self.threads
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise RuntimeError("llama.cpp could not create a context "
                               f"({self.slots} sequences x {self.ctx_per_seq} tokens)")
        self.mem = L.llama_get_memory(self.ctx)
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.n_batch = cp.n_batch
        self.batch = L.llama_batch_init(self.n_batch, 0, 1)
        self.stops = [s.encode() for s in (g.stop or [])]

    # ------------------------------------------------------------------ the Generator interface
    def greedy(self, prompts: list[str]) -> list[Completion]:
        return [r[0] for r in self._run([(p, [self._greedy_seq()]) for p in prompts])]

    def sample(self, prompts: list[str], n: int, seeds: list[int], first: int = 0) -> list[list[Completion]]:
        """Samples ``first .. n-1`` of each prompt (``first`` > 0: the ones a shorter run did not draw)."""
        return self._run([(p, self._sample_seqs(n, seed)[first:]) for p, seed in zip(prompts, seeds)])

    def greedy_and_samples(self, prompts: list[str], n: int, seeds: list[int]) -> tuple[list[Completion], list[list[Completion]]]:
        """Both in one pass: a prompt's greedy answer and samples share its decoded prompt, and no
        slot idles while the longest greedy answer of a batch finishes."""
        out = self._run([(p, [self._greedy_seq()] + self._sample_seqs(n, seed)) for p, seed in zip(prompts, seeds)])
        return [r[0] for r in out], [r[1:] for r in out]

    def _greedy_seq(self) -> tuple[float, int, int]:
        return 0.0, 0, self.cfg.max_new_tokens

    def _sample_seqs(self, n: int, seed: int) -> list[tuple[float, int, int]]:
        budget = self.cfg.sample_max_new_tokens or self.cfg.max_new_tokens
        return [(self.cfg.temperature, s, budget) for s in sample_seeds(seed, n)] if n > 0 else []

    def close(self) -> None:
        L, self.L = self.L, None
        if L is None:
            return
        L.llama_batch_free(self.batch)
        L.llama_free(self.ctx)
        L.llama_model_free(self.model)

    # ------------------------------------------------------------------ decoding
    def tokenize(self, text: str) -> list[int]:
        raw = text.encode("utf-8")
        cap = len(raw) + 8
        buf = (self.L.llama_token * cap)()
        n = self.L.llama_tokenize(self.vocab, raw, len(raw), buf, cap, True, True)  # BOS as the vocab says; template tokens parsed
        return list(buf[:n])

    def _piece(self, token: int) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = self.L.llama_token_to_piece(self.vocab, token, buf, 64, 0, False)  # special tokens render as nothing
        return buf.raw[:n] if n > 0 else b""

    def _sampler(self, temperature: float, seed: int):
        L = self.L
        chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        parts = [L.llama_sampler_init_penalties(self.n_vocab, PENALTY_LAST_N, REPEAT_PENALTY, 0.0, 0.0)]
        if temperature <= 0:
            parts.append(L.llama_sampler_init_greedy())
        else:
            parts += [L.llama_sampler_init_top_k(TOP_K), L.llama_sampler_init_top_p(self.cfg.top_p, 1),
                      L.llama_sampler_init_min_p(MIN_P, 1), L.llama_sampler_init_temp(temperature),
                      L.llama_sampler_init_dist(seed % 2**32)]
        for p in parts:
            L.llama_sampler_chain_add(chain, p)  # the chain owns them
        return chain

    def _run(self, prompts: list[tuple[str, list[tuple[float, int, int]]]]) -> list[list[Completion]]:
        """Decode every sequence of every prompt, ``llamacpp_slots`` at a time; results in prompt order.

        A prompt is decoded once (all but its last token) into the slot of its first sequence;
        a sibling starts from a copy of a started sibling's KV cut back to the prompt, and every
        sequence begins by feeding the prompt's last token, so its first logits come with the
        others' in one batch."""
        L = self.L
        results: list[list[Completion | None]] = [[None] * len(seqs) for _, seqs in prompts]
        reqs: list[_Request] = []
        for r, (text, seqs) in enumerate(prompts):
            tokens = self.tokenize(text)
            max_new = max((m for _, _, m in seqs), default=0)
            if not tokens or len(tokens) + max_new > self.ctx_per_seq:
                err = (f"the prompt is {len(tokens)} tokens; with {max_new} new tokens it does not fit the "
                       f"{self.ctx_per_seq}-token context of a sequence (generate.llamacpp_ctx)") if tokens else "empty prompt"
                results[r] = [Completion("", "error", err) for _ in seqs]
            reqs.append(_Request(tokens, [] if seqs and results[r][0] is not None else
                                 [(j, *seq) for j, seq in enumerate(seqs)]))
        waiting = [r for r in range(len(reqs)) if reqs[r].todo]
        free = list(range(self.slots))
        active: list[_Seq] = []
        try:
            while waiting or active:
                # start waiting sequences in the free slots
                prefill: list[_Seq] = []
                copies: list[tuple[_Seq, _Seq]] = []
                while waiting and free:
                    r = waiting[0]
                    req = reqs[r]
                    j, t, seed, max_new = req.todo.pop(0)
                    if not req.todo:
                        waiting.pop(0)
                    q = _Seq(r, j, free.pop(0), self._sampler(t, seed), pos=len(req.tokens) - 1,
                             pending=req.tokens[-1], max_new=max_new)
                    if req.live:
                        copies.append((req.live[0], q))
                    else:
                        prefill.append(q)
                    req.live.append(q)
                self._prefill(prefill, reqs)
                for src, dst in copies:  # after the prefill: a copy may read a prompt decoded just now
                    L.llama_memory_seq_cp(self.mem, src.slot, dst.slot, -1, -1)  # whole streams only across streams
                    L.llama_memory_seq_rm(self.mem, dst.slot, dst.pos, -1)  # keep the prompt but its last token
                active += prefill + [d for _, d in copies]
                # one token for every active sequence, in slot order (llama.cpp splits mixed orders into more work)
                active.sort(key=lambda q: q.slot)
                b = self.batch
                for i, q in enumerate(active):
                    b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = q.pending, q.pos, 1, True
                    b.seq_id[i][0] = q.slot
                b.n_tokens = len(active)
                self._decode()
                still = []
                for i, q in enumerate(active):
                    if self._advance(q, L.llama_sampler_sample(q.sampler, self.ctx, i)):
                        still.append(q)
                    else:
                        self._finish(q, reqs, results, free)
                active = still
        finally:  # every stream empty and every sampler freed for the next call, even after an error
            for req in reqs:
                for q in req.live:
                    L.llama_sampler_free(q.sampler)
                req.live.clear()
            L.llama_memory_clear(self.mem, True)
        return results  # type: ignore[return-value]

    def _prefill(self, seqs: list[_Seq], reqs: list[_Request]) -> None:
        """Decode each new prompt but its last token into its first sequence's slot, packing
        several prompts into one batch of up to ``n_batch`` tokens."""
        b = self.batch
        b.n_tokens = 0
        for q in seqs:
            tokens = reqs[q.req].tokens[:-1]
            for p, t in enumerate(tokens):
                if b.n_tokens == self.n_batch:
                    self._decode()
                    b.n_tokens = 0
                i = b.n_tokens
                b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = t, p, 1, False
                b.seq_id[i][0] = q.slot
                b.n_tokens += 1
        if b.n_tokens:
            self._decode()

    def _decode(self) -> None:
        rc = self.L.llama_decode(self.ctx, self.batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode failed (status {rc}) on a batch of {self.batch.n_tokens} tokens")

    def _advance(self, q: _Seq, tok: int) -> bool:
        """Take ``tok`` as ``q``'s next token; False when the sequence has ended."""
        if self.L.llama_vocab_is_eog(self.vocab, tok):
            q.finish_reason = "stop"
            return False
        q.text += self._piece(tok)
        q.n_new += 1
        for s in self.stops:
            cut = q.text.find(s)
            if cut >= 0:
                del q.text[cut:]
                q.finish_reason = "stop"
                return False
        if q.n_new >= q.max_new:
            q.finish_reason = "length"
            return False
        q.pending, q.pos = tok, q.pos + 1
        return True

    def _finish(self, q: _Seq, reqs: list[_Request], results, free: list[int]) -> None:
        self.L.llama_memory_seq_rm(self.mem, q.slot, -1, -1)
        self.L.llama_sampler_free(q.sampler)
        reqs[q.req].live.remove(q)
        free.append(q.slot)
        results[q.req][q.index] = Completion(q.text.decode("utf-8", errors="replace").strip(), q.finish_reason)


PROOF_PROMPT = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
                "Which river flows through the capital city of France, and which sea does it reach?<|im_end|>\n"
                "<|im_start|>assistant\n")


def prove_in_child(model_path: str, timeout_s: float = 120.0) -> None:
    """Load the GGUF and decode a real prompt (>= 20 tokens, 2 sequences) in a child process;
    raise RuntimeError saying how the child ended if it did not finish."""
    if model_path in _PROVED:
        return
    cmd = [sys.executable, "-X", "faulthandler", "-m", "spanuq.generate.llamacpp", model_path]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"llama.cpp did not finish a 20-token prompt in {timeout_s:.0f} s in a child process") from None
    if p.returncode != 0:
        from ..llm.llamacpp import describe_exit

        tail = "\n".join((p.stderr or "").strip().splitlines()[-12:])
        raise RuntimeError(f"this machine cannot run the installed llama.cpp build: decoding a prompt in a child "
                           f"process {describe_exit(p.returncode)}:\n{tail}\n(re-install it portable with "
                           "`make setup`, or use generate.backend=hf)")
    _PROVED.add(model_path)


_PROVED: set[str] = set()  # the GGUFs proved by this process


def _proof_main(model_path: str) -> int:
    from ..config import Config

    cfg = Config.model_validate({"generate": {"llamacpp_slots": 2, "llamacpp_ctx": 256, "temperature": 0.7}})
    gen = LlamaCppGenerator(cfg, model_path=model_path, prove=False)
    try:
        if len(gen.tokenize(PROOF_PROMPT)) < 20:
            print("the proof prompt is under 20 tokens", file=sys.stderr)
            return 1
        gen.cfg = gen.cfg.model_copy(update={"max_new_tokens": 8, "sample_max_new_tokens": 8})
        out = gen.greedy([PROOF_PROMPT]) + [c for cs in gen.sample([PROOF_PROMPT], 2, [0]) for c in cs]
    finally:
        gen.close()
    print(" | ".join(c.text for c in out))
    return 0


if __name__ == "__main__":
    sys.exit(_proof_main(sys.argv[1]))
