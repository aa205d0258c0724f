"""Hidden states captured while an answer grows: a KV-cached pass that only ever reads new tokens.

`StateCapture` holds the backbone's KV cache for [prompt; answer so far] and, for every
answer token it has read, the probe's two inputs (`llm/states.py`):

* fused state H̄_t (paper Eq. 1) at y_t's position, computed when y_t is fed;
* entropy e_t of the distribution y_t was decoded from, and the surprisal −log p(y_t) under it:
  the logits at the position before y_t (the prompt's last position for y_1), kept from the
  previous feed.

These are the quantities of one teacher-forced pass over [x; y] (`extract_batch`), computed
a few tokens at a time.  Two ways to grow the answer use it:

* ``greedy(max_new_tokens, eos)``: greedy decoding on the cache; each step feeds the token
  just chosen, which gives its state and the logits that choose the next one, so
  generating the answer and capturing its states are the same forward passes;
* ``sync(ids)``: the answer's tokens are now ``ids`` (text arriving from a server, or the
  canonical re-tokenisation of a generated answer): the cache is cropped back to the first
  token that differs and only the tokens after it are fed (teacher-forced).

``reprompt(prompt_ids)`` starts another answer after another prompt on the same cache: the cache
keeps the tokens the two prompts share from the start (the same sources in the system message,
`spanuq.llm.prefix`) and only the rest of the new prompt is fed.  With ``sources`` (the source tokens'
positions in the prompt) each answer token's lookback ratios are kept too (`spanuq.llm.lookback`: the
attention rows of the tokens fed, under eager attention).  Logits are computed only where
they are read (the prompt's last position, every answer position): the vocabulary projection over
the prompt's other positions is most of a long prompt's cost after the layers.
"""
from __future__ import annotations

import time
from typing import Iterator, Sequence

import torch

from .lookback import eager_attention, token_lookback
from .states import FeatureItem, cache_kwargs, fuse_layers, logits_kwargs, token_entropy, token_surprisal


class StateCapture:
    """``cap = StateCapture(model, prompt_ids, layers)``, then ``cap.greedy(...)`` or ``cap.sync(ids)``;
    ``cap.item(n)`` is the `FeatureItem` of the first ``n`` answer tokens."""

    def __init__(self, model, prompt_ids: Sequence[int], layers: Sequence[int], out_dtype=torch.float16,
                 sources: Sequence[int] | None = None, answer: Sequence[int] = ()):
        from transformers import DynamicCache

        self.model, self.layers, self.out_dtype = model, list(layers), out_dtype
        self.device = next(model.parameters()).device
        self.cache = DynamicCache(config=model.config)
        self.prompt: list[int] = []
        self.forwards, self.seconds = 0, 0.0
        self.reprompt(prompt_ids, sources, answer)

    def reprompt(self, prompt_ids: Sequence[int], sources: Sequence[int] | None = None, answer: Sequence[int] = ()
                 ) -> int:
        """Start a new answer after ``prompt_ids``: the cache keeps the tokens this prompt shares with the
        last one from the start (all but the prompt's last token at most: its logits decode y_1) and the
        rest is fed; returns how many tokens were fed.  ``sources``: see `look_at`.  ``answer``: its first
        tokens, fed in the same forward pass as the prompt (one pass where two would do the same; not with
        ``sources``, whose attention rows are read a pass at a time)."""
        prompt_ids = list(prompt_ids)
        if not prompt_ids:
            raise ValueError("StateCapture needs a prompt of at least one token")
        k = 0
        while k < min(len(prompt_ids) - 1, len(self.prompt)) and prompt_ids[k] == self.prompt[k]:
            k += 1
        if self.cache.get_seq_length() > k:
            self.cache.crop(k - self.cache.get_seq_length())  # a negative count: tokens to remove
        self.prompt, self.P = prompt_ids, len(prompt_ids)
        self.ids: list[int] = []  # answer tokens fed so far
        self.h: list[torch.Tensor] = []  # (d,) fused state per answer token
        self.ent: list[torch.Tensor] = []  # () entropy per answer token
        self.sur: list[torch.Tensor] = []  # () surprisal per answer token
        self.sources = None if sources is None else list(sources)
        self.lr: list[torch.Tensor] = []  # (layers·heads,) lookback ratios per answer token, with sources
        answer = list(answer) if self.sources is None else []
        n = len(answer)
        with torch.inference_mode():  # the prompt's states are not kept: only its last position's logits
            out = self._forward(prompt_ids[k:] + answer, hidden=bool(n), **logits_kwargs(self.model, n + 1))
        self.forwards, self.seconds = 0, 0.0  # forward passes on the answer's tokens and their time (not the prompt's)
        logits = out.logits[0, -(n + 1):].float()  # row 0: after the prompt's last token; row j: after answer[j-1]
        self._prompt_logits = logits[0]  # the distribution y_1 is decoded from
        self.next_logits = self._prompt_logits  # the distribution of the token after the last one fed
        if n:
            self.h.extend(fuse_layers(out.hidden_states, self.layers)[0][-n:].to(self.out_dtype))
            self.ent.extend(token_entropy(logits[:-1]))
            self.sur.extend(token_surprisal(logits[:-1], answer))
            self.ids.extend(answer)
            self.next_logits = logits[-1]
        return len(prompt_ids) - k + n

    def look_at(self, sources: Sequence[int] | None) -> None:
        """Keep each answer token's lookback ratios on the source tokens at positions ``sources`` of the prompt
        (None: none kept); answer tokens read without them are read again."""
        sources = None if sources is None else list(sources)
        if sources != self.sources:
            self.crop(0)
            self.sources = sources

    def _forward(self, ids: list[int], hidden: bool = True, **kw):
        t0 = time.perf_counter()
        out = self.model(input_ids=torch.tensor([ids], device=self.device), **cache_kwargs(self.model, self.cache),
                         use_cache=True, output_hidden_states=hidden, **kw)
        self.forwards += 1
        self.seconds += time.perf_counter() - t0
        return out

    @torch.inference_mode()
    def feed(self, ids: Sequence[int], again: int | None = None) -> None:
        """Append answer tokens ``ids`` (one forward pass over them on the cache).  ``again``: the last answer
        token kept, whose states are kept but whose cache entry `_drop` removed — fed first in the same pass,
        for the logits it gives (the distribution ``ids[0]`` comes from)."""
        ids = list(ids)
        if not ids and again is None:
            return
        fed = ([again] if again is not None else []) + ids
        skip = len(fed) - len(ids)
        if self.sources is None:
            out = self._forward(fed)
        else:
            with eager_attention(self.model):
                out = self._forward(fed, output_attentions=True)
            self.lr.extend(token_lookback([a[0] for a in out.attentions], self.sources, self.P,
                                          len(self.ids) - skip)[skip:])
        fused = fuse_layers(out.hidden_states, self.layers)[0][skip:]  # (len(ids), d)
        logits = out.logits[0].float()  # row j predicts the token after fed[j]
        before = torch.cat([self.next_logits[None], logits[:-1]])[skip:]  # row j: the distribution ids[j] came from
        self.h.extend(fused.to(self.out_dtype))
        self.ent.extend(token_entropy(before))
        self.sur.extend(token_surprisal(before, ids))
        self.ids.extend(ids)
        self.next_logits = logits[-1]

    def _drop(self, n: int) -> int | None:
        """Forget answer tokens from the ``n``-th on and the cache entry of token n-1 (its states are kept):
        returns that token, to be fed again with what comes next (`feed`'s ``again``), or None when n = 0."""
        self.cache.crop(self.P + max(n - 1, 0) - self.cache.get_seq_length())  # a negative count: tokens to remove
        del self.ids[n:], self.h[n:], self.ent[n:], self.sur[n:], self.lr[n:]
        if n == 0:
            self.next_logits = self._prompt_logits
            return None
        return self.ids[-1]

    def crop(self, n: int) -> None:
        """Forget answer tokens from the ``n``-th on (the cache keeps the prompt and the first ``n``)."""
        if n < len(self.ids):
            again = self._drop(n)
            if again is not None:
                self.feed([], again)

    def sync(self, ids: Sequence[int]) -> int:
        """Make the answer's tokens ``ids``: keep the common prefix, feed the rest (with the last token kept,
        in one pass, where the logits after it were not kept); returns how many were fed."""
        ids = list(ids)
        k = 0
        while k < min(len(ids), len(self.ids)) and ids[k] == self.ids[k]:
            k += 1
        again = self._drop(k) if k < len(self.ids) else None
        self.feed(ids[k:], again)
        return len(ids) - k

    def greedy(self, max_new_tokens: int, eos: int | set[int] | None) -> Iterator[int]:
        """Greedy decoding on the cache: yields each token once its state is captured; stops at
        EOS (not fed, not yielded) or after ``max_new_tokens`` tokens."""
        stop = set() if eos is None else ({eos} if isinstance(eos, int) else set(eos))
        for _ in range(max_new_tokens):
            nxt = int(self.next_logits.argmax())
            if nxt in stop:
                return
            self.feed([nxt])
            yield nxt

    def item(self, n: int | None = None) -> FeatureItem:
        """The probe input of the first ``n`` answer tokens (all of them by default)."""
        n = len(self.ids) if n is None else n
        return FeatureItem(torch.stack(self.h[:n]).cpu(), torch.stack(self.ent[:n]).cpu(),
                           torch.tensor(self.ids[:n], dtype=torch.int32), torch.stack(self.sur[:n]).cpu(),
                           None if self.sources is None else torch.stack(self.lr[:n]))
