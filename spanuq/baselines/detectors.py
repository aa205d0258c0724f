"""Heuristic and learned span detectors (paper Tab. 2), each paired with the oracle-span MLP probe.

A detector proposes inclusive token spans for each answer, ``detect(examples) ->
[(P_i, 2) int arrays]``; the MLP probe (trained on the labelled spans of train)
then scores each proposed span.  Detectors:

* ``window{w}``: sliding windows of w tokens with stride ⌈w/2⌉, the last one
  clipped to the answer's end (every token is covered).
* ``sentence``: spaCy sentence boundaries.
* ``spacy_ner``: spaCy named entities.  The offline labeller anchors its spans on
  spaCy entities and chunks, so under offline labels this detector (and
  ``sentence``) is partly circular; the comparison that counts is under judge labels.
* ``entropy_threshold``: tokens with H_t ≥ f · max_t H_t (f = ``baselines.entropy_fraction``,
  0.7), grouped into contiguous runs.
* ``bio_tagger``: a logistic-regression B/I/O tagger on the same fused token
  features, trained on the labelled spans of train.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..features.dataset import ResponseExample


def sliding_windows(n_tokens: int, width: int) -> np.ndarray:
    """(P, 2) windows [s, min(s + width, T) − 1] at stride ⌈width/2⌉ until one reaches the end."""
    if width < 1:
        raise ValueError("window width must be >= 1")
    stride, out = max(1, -(-width // 2)), []
    for s in range(0, max(n_tokens, 1), stride):
        out.append((s, min(s + width, n_tokens) - 1))
        if s + width >= n_tokens:
            break
    return np.array(out if n_tokens else [], dtype=np.int64).reshape(-1, 2)


def contiguous_runs(mask) -> np.ndarray:
    """(P, 2) inclusive [start, end] of each run of True in a boolean vector."""
    m = np.concatenate([[False], np.asarray(mask, dtype=bool), [False]])
    d = np.diff(m.astype(np.int8))
    return np.stack([np.flatnonzero(d == 1), np.flatnonzero(d == -1) - 1], 1).astype(np.int64)


def entropy_spans(entropy, fraction: float = 0.7) -> np.ndarray:
    """Runs of tokens whose entropy is at least ``fraction`` of the answer's maximum."""
    h = np.asarray(entropy, dtype=np.float64)
    if not len(h) or h.max() <= 0:
        return np.zeros((0, 2), dtype=np.int64)
    return contiguous_runs(h >= fraction * h.max())


def bio_labels(n_tokens: int, spans) -> np.ndarray:
    """0 = O, 1 = B, 2 = I; spans in order of their start, an earlier span keeps its tokens."""
    y = np.zeros(n_tokens, dtype=np.int64)
    for b, e in sorted(np.asarray(spans, dtype=np.int64).reshape(-1, 2).tolist()):
        if y[b] == 0:
            y[b] = 1
        for t in range(b + 1, e + 1):
            if y[t] == 0:
                y[t] = 2
    return y


def decode_bio(tags) -> np.ndarray:
    """Spans from a B/I/O sequence: a span opens at B (or at an I after O) and runs through the I's."""
    out, start = [], None
    for t, tag in enumerate(list(tags) + [0]):
        if tag == 1 or (tag == 2 and start is None) or tag == 0:
            if start is not None:
                out.append((start, t - 1))
                start = None
            if tag in (1, 2):
                start = t
    return np.array(out, dtype=np.int64).reshape(-1, 2)


class Detector:
    name: ClassVar[str]

    def fit(self, train: list[ResponseExample]) -> None:
        """Learned detectors train here; heuristics need nothing."""

    def detect(self, examples: list[ResponseExample]) -> list[np.ndarray]:
        raise NotImplementedError


class Windows(Detector):
    def __init__(self, width: int):
        self.width, self.name = width, f"window{width}"

    def detect(self, examples):
        return [sliding_windows(e.n_tokens, self.width) for e in examples]


class EntropyThreshold(Detector):
    name = "entropy_threshold"

    def __init__(self, fraction: float = 0.7):
        self.fraction = fraction

    def detect(self, examples):
        return [entropy_spans(e.entropy.numpy(), self.fraction) for e in examples]


class SpacyDetector(Detector):
    """Sentences or named entities from spaCy, mapped to tokens through the tokenizer's offsets."""

    def __init__(self, kind: str, tokenizer, nlp):
        self.kind, self.tok, self.nlp = kind, tokenizer, nlp
        self.name = "sentence" if kind == "sentence" else "spacy_ner"

    def detect(self, examples):
        from ..label.targets import char_span_to_tokens
        from ..llm.loading import token_offsets

        out = []
        for e, doc in zip(examples, self.nlp.pipe([e.response for e in examples])):
            ids, offsets = token_offsets(self.tok, e.response)
            if ids != list(e.token_ids):
                raise ValueError(f"{e.prompt_id}: the tokenizer does not reproduce the stored answer tokens")
            parts = doc.sents if self.kind == "sentence" else doc.ents
            spans = [char_span_to_tokens(offsets, p.start_char, p.end_char) for p in parts]
            out.append(np.array([s for s in spans if s is not None], dtype=np.int64).reshape(-1, 2))
        return out


class BIOTagger(Detector):
    name = "bio_tagger"

    def __init__(self, seed: int = 0):
        self.seed, self.model = seed, None

    def fit(self, train):
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        X = np.concatenate([e.h.float().numpy() for e in train])
        y = np.concatenate([bio_labels(e.n_tokens, e.spans.numpy()) for e in train])
        self.model = make_pipeline(StandardScaler(), LogisticRegression(C=0.1, max_iter=300, random_state=self.seed))
        self.model.fit(X, y)

    def detect(self, examples):
        if self.model is None:
            raise RuntimeError("BIOTagger: call fit(train) first")
        return [decode_bio(self.model.predict(e.h.float().numpy())) for e in examples]


DETECTORS = ("window10", "window20", "window40", "sentence", "spacy_ner", "entropy_threshold", "bio_tagger")


def make_detector(name: str, cfg, tokenizer=None, nlp=None) -> Detector:
    if name.startswith("window") and name[6:].isdigit():
        return Windows(int(name[6:]))
    if name == "entropy_threshold":
        return EntropyThreshold(cfg.baselines.entropy_fraction)
    if name in ("sentence", "spacy_ner"):
        return SpacyDetector(name, tokenizer, nlp)
    if name == "bio_tagger":
        return BIOTagger(cfg.train.seed)
    raise ValueError(f"unknown detector {name!r}; known: {', '.join(DETECTORS)} (window<N> for any N)")


def score_detected(mlp, examples: list[ResponseExample], detected: list[np.ndarray]) -> list[np.ndarray]:
    """MLP-probe û of each detected span."""
    import torch

    from .mlp_probe import pool_span_features, predict_span_mlp

    return [predict_span_mlp(mlp, pool_span_features(e.h, torch.as_tensor(d))) if len(d) else np.zeros(0)
            for e, d in zip(examples, detected)]


def scores_for_labelled(examples, detected, det_scores, iou_threshold: float, prior: float) -> list[np.ndarray]:
    """Downstream score of every labelled span: its matched detection's û (IoU ≥ threshold),
    else the û of the detection overlapping it most, else ``prior`` (the train mean u*)."""
    from ..evaluate.detection import match_spans, token_iou_matrix

    out = []
    for e, d, s in zip(examples, detected, det_scores):
        gt = e.spans.numpy().reshape(-1, 2)
        sc = np.full(len(gt), prior, dtype=np.float64)
        if len(d) and len(gt):
            iou = token_iou_matrix(d, gt)
            for g in range(len(gt)):
                if iou[:, g].max() > 0:
                    sc[g] = s[int(iou[:, g].argmax())]
            for p, g, _ in match_spans(d, gt, iou_threshold):
                sc[g] = s[p]
        out.append(sc)
    return out
