"""What the probe and the baselines consume: one `ResponseExample` per greedy answer.

`collate` pads a list of examples into a `Batch`.  Span targets are normalised per
example by its own length T: span (b, e) (inclusive token indices) becomes the
continuous interval [b/T, (e+1)/T]; token t sits at centre (t + 0.5)/T.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..model.postprocess import Answer, pad_states, pad_surprisal
from ..model.span_ops import token_spans_to_normalized


@dataclass
class ResponseExample:
    prompt_id: str
    domain: str
    split: str
    h: torch.Tensor  # (T, d) fused hidden states (float32 once loaded)
    entropy: torch.Tensor  # (T,) token entropy of the backbone's next-token distribution
    token_ids: list[int]
    spans: torch.Tensor  # (K, 2) long, inclusive token indices (tok_start, tok_end)
    u: torch.Tensor  # (K,) float soft labels u*
    u_seq: float | None = None  # mean of u; None when the answer has no claims
    response: str = ""
    meta: dict = field(default_factory=dict)
    surprisal: torch.Tensor | None = None  # (T,) −log p(y_t | x, y_<t) of each answer token

    @property
    def n_tokens(self) -> int:
        return int(self.h.shape[0])

    def normalized_spans(self) -> torch.Tensor:
        """(K, 2) float in [0, 1]: [b/T, (e+1)/T]."""
        return token_spans_to_normalized(self.spans.reshape(-1, 2), self.n_tokens)


@dataclass
class Batch:
    h: torch.Tensor  # (B, T_max, d) float32
    entropy: torch.Tensor  # (B, T_max)
    mask: torch.Tensor  # (B, T_max) bool, True on real tokens
    lengths: torch.Tensor  # (B,) long
    targets: list[dict[str, torch.Tensor]]  # per example: spans (K,2) normalised, u (K,), u_seq ()
    examples: list[ResponseExample]
    surprisal: torch.Tensor | None = None  # (B, T_max); None when an example has none

    def to(self, device) -> "Batch":
        return Batch(
            self.h.to(device), self.entropy.to(device), self.mask.to(device), self.lengths.to(device),
            [{k: v.to(device) for k, v in t.items()} for t in self.targets], self.examples,
            None if self.surprisal is None else self.surprisal.to(device),
        )


def collate(examples: list[ResponseExample]) -> Batch:
    h, ent, mask, lengths = pad_states(examples)
    targets = []
    for e in examples:
        u_seq = e.u_seq if e.u_seq is not None else (float(e.u.mean()) if len(e.u) else 0.0)
        targets.append({"spans": e.normalized_spans(), "u": e.u.float(), "u_seq": torch.tensor(u_seq)})
    return Batch(h, ent, mask, lengths, targets, examples, pad_surprisal(examples))


def input_stats(examples: list[ResponseExample], use_entropy: bool = True,
                use_surprisal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-dimension mean and std over every token of ``examples`` of the probe's input
    [H̄; entropy; surprisal] (the scalars the probe reads).

    Streamed sums in float64 (Σx, Σx²): a paper-size split (17k answers × 5k dims) never sits in
    memory at once, and float16 states add up without losing the small dimensions."""
    d = examples[0].h.shape[1] + int(use_entropy) + int(use_surprisal) if examples else 0
    n, s1, s2 = 0, torch.zeros(d, dtype=torch.float64), torch.zeros(d, dtype=torch.float64)
    for e in examples:
        x = e.h.double()
        if use_entropy:
            x = torch.cat([x, e.entropy.double()[:, None]], dim=-1)
        if use_surprisal:
            if e.surprisal is None:
                raise ValueError(f"{e.prompt_id}: no token surprisal stored; re-run `spanuq extract`")
            x = torch.cat([x, e.surprisal.double()[:, None]], dim=-1)
        s1 += x.sum(0)
        s2 += (x * x).sum(0)
        n += x.shape[0]
    if not n:
        raise ValueError("no tokens to standardise the probe's inputs by")
    mean = s1 / n
    return mean.float(), (s2 / n - mean * mean).clamp_min(0).sqrt().float()


def answers(tokenizer, examples: list[ResponseExample]) -> list[Answer | None]:
    """Each example's answer text with its token offsets (one tokenisation each), for `predict`
    to grow spans to whole words and place them in the text; all None without a tokenizer."""
    return [Answer.of(tokenizer, e.response, e.token_ids) if tokenizer is not None else None for e in examples]


def load_examples(features_dir, labels_path, splits: tuple[str, ...] | None = None,
                  given: bool | None = False) -> list[ResponseExample]:
    """Join label records with stored features into `ResponseExample`s.

    Only labelled answers (status ``ok``) are loaded: an answer whose claims could not be found
    or placed is no evidence that it has none, so it is never taught as
    "no span here".  ``meta["unplaced"]`` counts an answer's claims that could not be
    placed on tokens (training leaves such answers out).  ``given``: the given answers the label
    stage wrote (`spanuq.label.given`) are left out (False, what evaluation and model selection
    read), the only ones loaded (True) or loaded with the rest (None, what training reads).
    """
    from ..label.answer_ids import is_given

    from ..pipeline.files import read_records
    from ..pipeline.records import LabeledResponse
    from .store import FeatureStore

    store = FeatureStore(features_dir)
    out = []
    for rec in read_records(labels_path, LabeledResponse):
        if splits and rec.split not in splits:
            continue
        if rec.status != "ok" or (given is not None and is_given(rec.prompt_id) != given):
            continue
        if rec.prompt_id not in store:
            raise KeyError(f"no features for {rec.prompt_id}; re-run `spanuq extract`")
        it = store[rec.prompt_id]
        if it.h.shape[0] != rec.n_tokens:
            raise ValueError(f"{rec.prompt_id}: labels have {rec.n_tokens} tokens, features {it.h.shape[0]}")
        spans = torch.tensor([[s.tok_start, s.tok_end] for s in rec.spans], dtype=torch.long).reshape(-1, 2)
        u = torch.tensor([s.u for s in rec.spans], dtype=torch.float32)
        meta = {"unplaced": rec.unplaced}
        if rec.with_context:  # read after its prompt's sources (`Prompt.context`): calibrated apart
            meta["context"] = True
        slot = next((k for k, s in enumerate(rec.spans) if s.claim_id.endswith(":slot")), None)
        if slot is not None:  # a given answer's planted or reference slot (`spanuq.label.given`)
            meta["slot"] = slot
        out.append(ResponseExample(rec.prompt_id, rec.domain, rec.split, it.h, it.entropy, it.token_ids.tolist(),
                                   spans, u, rec.u_seq, rec.response, meta, it.surprisal))
    return out


def training_examples(features_dir, labels_path, given_kinds=("swap", "template")) -> tuple[list[ResponseExample], int]:
    """The train split as every trainer uses it (train stage, sweep trials, ablation rows; the given
    answers of ``given_kinds`` included, `train.given_kinds`), and how many answers were left out:
    those with claims that could not be placed on tokens, whose missing spans would teach "no claim
    here"."""
    from ..label.answer_ids import given_kind

    every = [e for e in load_examples(features_dir, labels_path, ("train",), given=None)
             if given_kind(e.prompt_id) in (None, *given_kinds)]
    kept = [e for e in every if not e.meta.get("unplaced")]
    return kept, len(every) - len(kept)
