"""The one post-processing step: the probe's outputs → the spans a reader is shown (detr's ``PostProcess``).

Everything that turns probe outputs into spans goes through `PostProcess` (by way of
`predict`): the score API and its HTTP service, the MLflow model, training's dev selection
and calibration, the evaluate stage, `spanuq ablate`, the sweep trials and the baselines
stage (SpanUQ's scores and its cost timing).  So the same answer gets the same spans
everywhere.  For query i of an answer of T tokens:

* token span (b, e) = (⌊b̂T⌋, ⌈êT⌉ − 1), inclusive, grown to whole words when the answer's
  text and token offsets are known, then trimmed of the function words at its edges ("in
  Beijing," → "Beijing"; `snap_token_span`): the span shows the words that may be wrong, not
  the preposition the regression took along;
* its characters [start, end) in the answer (`token_span_to_chars`: edge spaces trimmed,
  never inside a user-perceived character, `snap_to_graphemes`), when the text is known;
* ``u_raw``: the Mixture-of-Beta mean û; ``u``: σ(logit(û)/T) with the checkpoint's
  temperature (`Calibration`); ``u_seq`` likewise; ν and the validity p;
* ``keep``: the queries shown — p ≥ the threshold, then greedy duplicate suppression by p
  (a span whose token IoU with a higher-validity kept span exceeds ``dup_iou`` is dropped).

All N queries are returned (``keep`` marks the shown ones) so that metrics can also look
at what was not kept.
"""
from __future__ import annotations

from pathlib import Path

from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol, Sequence

import numpy as np
import torch

from .calibration import Calibration, span_terms
from .span_ops import normalized_to_token_spans, suppress_duplicates


@dataclass(frozen=True)
class Answer:
    """The text the probe read and its tokens' character offsets (one canonical tokenisation)."""

    text: str
    offsets: list[tuple[int, int]]

    @classmethod
    def of(cls, tokenizer, text: str, token_ids: Sequence[int] | None = None) -> "Answer | None":
        """Tokenise ``text`` once; None when that does not reproduce ``token_ids`` (the tokens the
        states were computed on): its spans are then left as the probe placed them."""
        from ..llm.loading import token_offsets

        if not text:
            return None
        ids, offsets = token_offsets(tokenizer, text)
        return cls(text, offsets) if token_ids is None or ids == list(token_ids) else None


@dataclass(frozen=True)
class ShownSpan:
    """One span a reader sees: token indices (inclusive), characters (None without the text), scores."""

    b: int
    e: int
    start: int | None
    end: int | None
    u: float
    u_raw: float
    validity: float
    nu: float


@dataclass
class Prediction:
    """Every query of one answer (N of them); ``keep`` indexes the shown ones."""

    prompt_id: str
    spans: np.ndarray  # (N, 2) int64 inclusive token indices, grown to words when the text was known
    u: np.ndarray  # (N,) û, calibrated with the calibration's temperature
    validity: np.ndarray  # (N,) p
    u_seq: float
    keep: np.ndarray  # indices of the shown queries, in query order
    u_raw: np.ndarray | None = None  # (N,) û before the temperature
    u_seq_raw: float | None = None
    nu: np.ndarray | None = None  # (N,) ν, the Beta concentration
    chars: np.ndarray | None = None  # (N, 2) [start, end) characters in the answer, when the text was known
    threshold: float | None = None  # the validity threshold behind ``keep``

    def shown(self) -> list[ShownSpan]:
        """The kept spans in reading order; with the text known, a span of only spaces is left out."""
        out = []
        for q in (int(k) for k in self.keep):
            start = end = None
            if self.chars is not None:
                start, end = (int(x) for x in self.chars[q])
                if end <= start:
                    continue
            u_raw = self.u_raw if self.u_raw is not None else self.u
            out.append(ShownSpan(int(self.spans[q, 0]), int(self.spans[q, 1]), start, end, float(self.u[q]),
                                 float(u_raw[q]), float(self.validity[q]),
                                 float(self.nu[q]) if self.nu is not None else float("nan")))
        return sorted(out, key=lambda s: (s.start, s.end) if s.start is not None else (s.b, s.e))


def select_spans(spans: np.ndarray, validity: np.ndarray, threshold: float = 0.5, dup_iou: float = 0.5) -> np.ndarray:
    """Indices of the kept queries, in query order: validity ≥ threshold, then greedy
    duplicate suppression by validity over inclusive token spans (IoU > dup_iou)."""
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    validity = np.asarray(validity, dtype=np.float64).reshape(-1)
    cand = np.flatnonzero(validity >= threshold)
    if len(cand) == 0:
        return cand
    cont = torch.as_tensor(spans[cand], dtype=torch.float32) + torch.tensor([0.0, 1.0])
    kept = suppress_duplicates(cont, torch.as_tensor(validity[cand]), dup_iou)
    return np.sort(cand[kept])


@lru_cache(maxsize=1)
def function_words() -> frozenset[str]:
    """The words a shown span does not start or end with: spaCy's English stop words that are
    not number words ("in", "the", "and", "was"; "one", "two", "hundred" stay, they can be the
    error) -- the rule of `spanuq.data.aliases.stop_words`, which adds "yes" for references.
    Read from the word list scripts/make_word_lists.py writes, so scoring needs no spaCy."""
    path = Path(__file__).resolve().parents[1] / "data" / "bundled" / "wordlists" / "function_words.txt"
    lines = path.read_text(encoding="utf-8").splitlines()
    return frozenset(w.strip() for w in lines if w.strip() and not w.startswith("#"))


EDGE_PUNCT = " \t\n\r,;:.!?\"'“”‘’()[]-–—"  # stripped from a word before it is looked up (as label/spans.py's)


def snap_token_span(offsets: Sequence[tuple[int, int]], text: str, b: int, e: int) -> tuple[int, int]:
    """Grow the inclusive token span (b, e) to whole words, then trim edge tokens that hold
    only spaces or punctuation and edge words that are function words (`function_words`).

    A token continues a word when its first character is alphanumeric and the
    character just before it (the previous token's last) is too; the span grows
    left while its first token continues a word and right while the next token does.
    A span of function words and punctuation only keeps its words as they are.
    """
    n = len(offsets)

    def continues(t: int) -> bool:
        s = offsets[t][0]
        return 0 < s < len(text) and text[s].isalnum() and text[s - 1].isalnum()

    while b > 0 and continues(b):
        b -= 1
    while e + 1 < n and continues(e + 1):
        e += 1

    def blank(t: int) -> bool:
        s, x = offsets[t]
        return not any(ch.isalnum() for ch in text[s:x])

    def trim_blank(b: int, e: int) -> tuple[int, int]:
        while b < e and blank(b):
            b += 1
        while e > b and blank(e):
            e -= 1
        return b, e

    b, e = trim_blank(b, e)
    words, t = [], b  # the span's words: (first token, last token)
    while t <= e:
        w = t
        while w + 1 <= e and continues(w + 1):
            w += 1
        words.append((t, w))
        t = w + 1

    def function_word(w: tuple[int, int]) -> bool:
        return text[offsets[w[0]][0]: offsets[w[1]][1]].strip(EDGE_PUNCT).lower() in function_words()

    content = [w for w in words if not function_word(w) and not all(map(blank, range(w[0], w[1] + 1)))]
    if not content:
        return b, e
    return trim_blank(content[0][0], content[-1][1])


def token_span_to_chars(text: str, offsets: Sequence[tuple[int, int]], tok_start: int, tok_end: int
                        ) -> tuple[int, int]:
    """Characters [start, end) of the inclusive token span, without edge whitespace and never
    inside a grapheme cluster (the inverse of `spanuq.label.targets.char_span_to_tokens`, for
    showing spans in the text)."""
    start, end = snap_to_graphemes(text, offsets[tok_start][0], offsets[tok_end][1])
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def snap_to_graphemes(text: str, start: int, end: int) -> tuple[int, int]:
    """[start, end) grown to whole user-perceived characters (Unicode extended grapheme clusters).

    A token boundary can fall inside one: 🇫🇷 is two code points (regional indicators), 👩‍👧 three
    joined by U+200D, "é" may be e + U+0301; a span offset between them would show half a flag.
    Pure-ASCII text has no multi-code-point clusters and is returned as is."""
    if text.isascii() or not text:
        return start, end
    import regex  # the `regex` package's \X matches one extended grapheme cluster

    for m in regex.finditer(r"\X", text):
        a, b = m.span()
        if a < start < b:
            start = a
        if a < end < b:
            end = b
        if a >= end:
            break
    return start, end


class PostProcess:
    """``PostProcess(calibration)(outputs, lengths, answers)`` → one `Prediction` per answer.

    ``outputs``: the probe's forward dict (``spans``, ``validity_logits``, ``u``, ``nu``,
    ``u_seq``); ``lengths``: (B,) tokens per answer; ``answers``: the `Answer` of each (or
    None where its text is unknown: spans are then not grown to words and have no characters)."""

    def __init__(self, calibration: Calibration):
        self.calibration = calibration

    @torch.no_grad()
    def __call__(self, outputs: dict[str, torch.Tensor], lengths: torch.Tensor,
                 answers: Sequence[Answer | None] | None = None, prompt_ids: Sequence[str] | None = None,
                 surprisal: torch.Tensor | None = None, entropy: torch.Tensor | None = None,
                 lookback: Sequence | None = None) -> list[Prediction]:
        cal = self.calibration
        if cal.reads_surprisal and (surprisal is None or entropy is None):
            raise ValueError("this calibration reads each span's surprisal (a given-answer mapping with w or "
                             "v != 0): the answers' token surprisal and entropy are needed")
        if cal.reads_lookback and (lookback is None or any(x is None for x in lookback)):
            raise ValueError("this calibration reads each span's lookback ratios (a with-sources mapping with "
                             "lookback weights): the answers must be read with their sources' attention")
        tok = normalized_to_token_spans(outputs["spans"], lengths[:, None]).cpu().numpy()
        p = outputs["validity_logits"].sigmoid().cpu().numpy().astype(np.float64)
        u_raw = outputs["u"].cpu().numpy().astype(np.float64)
        nu = outputs["nu"].cpu().numpy().astype(np.float64)
        u_seq = outputs["u_seq"].cpu().numpy().astype(np.float64)
        out = []
        for i in range(len(tok)):
            spans = tok[i].astype(np.int64)
            n = int(lengths[i])
            answer = answers[i] if answers is not None else None
            chars = None
            if answer is not None:
                spans = np.array([snap_token_span(answer.offsets, answer.text, int(b), int(e)) for b, e in spans],
                                 dtype=np.int64).reshape(-1, 2)
                chars = np.array([token_span_to_chars(answer.text, answer.offsets, int(b), int(e)) for b, e in spans],
                                 dtype=np.int64).reshape(-1, 2)
            out.append(Prediction(
                prompt_id=prompt_ids[i] if prompt_ids is not None else str(i), spans=spans,
                u=cal.scores(u_raw[i], span_terms(surprisal[i, :n], entropy[i, :n], spans,
                                                  lookback[i] if cal.reads_lookback else None)
                             if cal.reads_surprisal else None), validity=p[i], u_seq=float(cal.scores(np.array([u_seq[i]]))[0]),
                keep=select_spans(spans, p[i], cal.validity_threshold, cal.dup_iou), u_raw=u_raw[i],
                u_seq_raw=float(u_seq[i]), nu=nu[i], chars=chars, threshold=cal.validity_threshold))
        return out


class States(Protocol):
    """One answer as the probe reads it (`ResponseExample`, `FeatureItem`, the MLflow model's rows)."""

    h: torch.Tensor  # (T, d) fused hidden states
    entropy: torch.Tensor  # (T,) token entropy
    surprisal: torch.Tensor | None  # (T,) token surprisal, when stored
    # and, where read with sources' attention, ``lookback`` (T, layers·heads) (`spanuq.llm.lookback`)


def pad_states(items: Sequence[States]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(h (B, T_max, d) float32, entropy (B, T_max), mask (B, T_max) True on real tokens, lengths (B,))
    of answers that carry ``.h`` (T, d) and ``.entropy`` (T,), zero-padded on the right."""
    T = max(int(it.h.shape[0]) for it in items)
    d = items[0].h.shape[1]
    h = torch.zeros(len(items), T, d, dtype=torch.float32)
    ent = torch.zeros(len(items), T, dtype=torch.float32)
    mask = torch.zeros(len(items), T, dtype=torch.bool)
    for i, it in enumerate(items):
        n = int(it.h.shape[0])
        h[i, :n] = it.h.float()
        ent[i, :n] = it.entropy.float()
        mask[i, :n] = True
    lengths = torch.tensor([int(it.h.shape[0]) for it in items], dtype=torch.long)
    return h, ent, mask, lengths


def pad_surprisal(items: Sequence[States]) -> torch.Tensor | None:
    """(B, T_max) token surprisal of answers, zero-padded on the right; None when one has none."""
    if any(getattr(it, "surprisal", None) is None for it in items):
        return None
    out = torch.zeros(len(items), max(int(it.h.shape[0]) for it in items), dtype=torch.float32)
    for i, it in enumerate(items):
        out[i, : int(it.h.shape[0])] = it.surprisal.float()
    return out


@torch.no_grad()
def predict(probe, items: Sequence[States], calibration: Calibration, answers: Sequence[Answer | None] | None = None, *,
            batch_size: int = 16, device: str | torch.device = "cpu",
            prompt_ids: Sequence[str] | None = None) -> list[Prediction]:
    """The probe over answers, then `PostProcess`: one `Prediction` per answer.  ``prompt_ids``
    default to the items' own (``ResponseExample.prompt_id``), else their positions."""
    if prompt_ids is None:
        prompt_ids = [str(getattr(it, "prompt_id", i)) for i, it in enumerate(items)]
    post = PostProcess(calibration)
    was_training = probe.training
    probe.eval()
    out: list[Prediction] = []
    try:
        for s in range(0, len(items), batch_size):
            batch = items[s: s + batch_size]
            h, ent, mask, lengths = (x.to(device) for x in pad_states(batch))
            sur = pad_surprisal(batch) if probe.cfg.use_surprisal or calibration.reads_surprisal else None
            o = probe(h, ent if probe.cfg.use_entropy else None, mask, lengths,
                      surprisal=None if sur is None or not probe.cfg.use_surprisal else sur.to(device))
            lb = ([None if getattr(it, "lookback", None) is None else it.lookback.float().numpy() for it in batch]
                  if calibration.reads_lookback else None)
            out += post(o, lengths, answers[s: s + batch_size] if answers is not None else None,
                        prompt_ids[s: s + batch_size], surprisal=sur, entropy=ent.cpu(), lookback=lb)
    finally:
        probe.train(was_training)
    return out
