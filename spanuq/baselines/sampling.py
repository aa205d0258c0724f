"""Sampling baselines (paper §4.2): scores from the S sampled answers of the generate stage.

For a greedy answer r with samples s_1..s_S (``generations.jsonl``):

* SelfCheckGPT-NLI (Manakul et al. 2023): per sentence r_i of the greedy answer,

      score(r_i) = 1/S Σ_s P(contradict | s, r_i) / (P(entail | s, r_i) + P(contradict | s, r_i)),

  a span takes the score of the sentence it starts in; the sequence score is the
  mean over sentences (the paper's passage score).
* Semantic entropy (Kuhn et al. 2023; Farquhar et al. 2024, discrete form): the
  samples are clustered by bidirectional entailment (s_j joins the first cluster
  whose first member it entails and is entailed by, P(entail) > 0.5 both ways),
  and with p(C) = |C| / S,

      SE = − Σ_C p(C) log p(C)      (0 for S equivalent answers, log S for S mutually contradicting ones).
* EigenScore (INSIDE, Chen et al. 2024): Z ∈ R^{d×S} the samples' embeddings,
  J_d = I_d − 1/d · 1 1ᵀ, Σ = Zᵀ J_d Z,

      EigenScore = 1/S · log det(Σ + α I_S) = 1/S · Σ_i log(λ_i + α).

  The paper embeds each sample with the LLM's middle-layer state; here the
  shipped sentence-embedding model embeds it (stated in the report).
* Kernel language entropy (KLE, Nikitin et al. 2024), lm-polygraph's recipe:
  E, C the 0/1 matrices of NLI argmax = entailment / contradiction between
  samples (s_j premise, s_k hypothesis), N = 2 − E − Eᵀ − C − Cᵀ the neutral
  weight, the semantic graph W = E + Eᵀ + ½ N, its Laplacian L = D − W, the
  heat kernel K = exp(−t L), normalised K̃_jk = K_jk / √(K_jj K_kk) / S, and

      KLE = − tr(K̃ log K̃) / log S = − Σ_i λ_i log λ_i / log S
      (0 for S equivalent answers as t grows, 1 for S mutually contradicting ones).

Each is a sequence-level score broadcast to the answer's spans.  Semantic entropy
is divided by its maximum log S and KLE is already scaled so (both in [0, 1]);
EigenScore is min–max scaled on dev (`MinMaxScaler`, monotone), so MAE and ECE are
defined for every row.
"""
from __future__ import annotations

import re
from typing import Any, ClassVar

import numpy as np

from ..features.dataset import ResponseExample
from .base import SequenceScorer
from .context import AnswerContext, AnswerInfo
from .nli import CONTRADICT, ENTAIL, NLI, make_nli
from .scaling import MinMaxScaler

_SENTENCE = re.compile(r"[^.!?]+(?:[.!?]+|$)")


# ---------------------------------------------------------------- formulas

def sentences_with_offsets(text: str) -> list[tuple[int, int, str]]:
    """(start, end, sentence) of each sentence, split after . ! ?; the whole text when it has none."""
    out = [(m.start(), m.end(), m.group().strip()) for m in _SENTENCE.finditer(text) if m.group().strip()]
    return out or [(0, len(text), text)]


def selfcheck_nli(sentences: list[str], samples: list[str], nli: NLI) -> np.ndarray:
    """(n_sentences,) SelfCheckGPT-NLI inconsistency in [0, 1]; needs at least one sample.

    Pairs are fed as (sentence, sample), the order of selfcheckgpt's `SelfCheckNLI.predict`."""
    if not samples:
        raise ValueError("SelfCheckGPT-NLI needs at least one sample")
    first = [r for r in sentences for _ in samples]
    second = [s for _ in sentences for s in samples]
    p = nli.probs(first, second).reshape(len(sentences), len(samples), 3)
    pc, pe = p[..., CONTRADICT], p[..., ENTAIL]
    return (pc / np.clip(pe + pc, 1e-12, None)).mean(1)


def nli_matrix(texts: list[str], nli: NLI) -> np.ndarray:
    """(n, n, 3) NLI probabilities of texts[j] (premise) → texts[k] (hypothesis); a text entails itself."""
    n = len(texts)
    pairs = [(j, k) for j in range(n) for k in range(n) if j != k]
    P = np.zeros((n, n, 3))
    P[np.arange(n), np.arange(n), ENTAIL] = 1.0
    if pairs:
        p = nli.probs([texts[j] for j, _ in pairs], [texts[k] for _, k in pairs])
        for (j, k), v in zip(pairs, p):
            P[j, k] = v
    return P


def semantic_clusters(E: np.ndarray, threshold: float = 0.5) -> list[int]:
    """Cluster id per text: bidirectional entailment with each cluster's first member."""
    firsts: list[int] = []
    ids = []
    for j in range(len(E)):
        for c, f in enumerate(firsts):
            if E[j, f] > threshold and E[f, j] > threshold:
                ids.append(c)
                break
        else:
            firsts.append(j)
            ids.append(len(firsts) - 1)
    return ids


def discrete_entropy(cluster_ids: list[int]) -> float:
    """− Σ_C p(C) log p(C), p(C) = |C| / n (nats)."""
    _, counts = np.unique(np.asarray(cluster_ids), return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log(p)).sum())


def eigen_score(Z: np.ndarray, alpha: float = 1e-3) -> float:
    """INSIDE EigenScore of S embeddings Z (S, d): 1/S · Σ log(λ_i(Zᵀ J_d Z) + α)."""
    Z = np.asarray(Z, dtype=np.float64)
    Zc = Z - Z.mean(1, keepdims=True)  # J_d centres each embedding over its d features
    lam = np.clip(np.linalg.eigvalsh(Zc @ Zc.T), 0.0, None)
    return float(np.mean(np.log(lam + alpha)))


def von_neumann_entropy(K: np.ndarray) -> float:
    """− Σ λ log λ of a PSD matrix normalised to unit trace."""
    lam = np.clip(np.linalg.eigvalsh(K / np.trace(K)), 0.0, None)
    lam = lam[lam > 1e-15]
    return float(-(lam * np.log(lam)).sum())


def kle(E: np.ndarray, C: np.ndarray, t: float = 0.3) -> float:
    """KLE from 0/1 entailment and contradiction matrices (module docstring), scaled by log S."""
    E, C = np.asarray(E, dtype=np.float64), np.asarray(C, dtype=np.float64)
    n = len(E)
    if n < 2:
        return 0.0
    W = E + E.T + 0.5 * (2.0 - E - E.T - C - C.T)
    L = np.diag(W.sum(0)) - W
    lam, V = np.linalg.eigh((L + L.T) / 2)
    K = (V * np.exp(-t * lam)) @ V.T
    d = np.sqrt(np.diag(K)) + 1e-12
    return von_neumann_entropy(K / np.outer(d, d) / n) / np.log(n)


# ---------------------------------------------------------------- scorers

class SamplingScorer(SequenceScorer):
    """Shared plumbing: the answers' samples, an NLI, a train-fitted min–max scaling, the cost."""

    requires: ClassVar[tuple[str, ...]] = ("samples", "nli")
    scale: ClassVar[bool] = True

    def __init__(self, context: AnswerContext, nli: NLI | None = None, **params: Any):
        self.context, self.nli, self.params = context, nli, params
        self.scaler = MinMaxScaler()
        self.nli_calls = 0

    @classmethod
    def from_config(cls, cfg, **overrides: Any) -> "SamplingScorer":
        b = cfg.baselines
        context = overrides.pop("context", None) or AnswerContext.load(cfg)
        nli = overrides.pop("nli", None) or (make_nli(b) if "nli" in cls.requires else None)
        params = {"alpha": b.eigenscore_alpha, "t": b.kle_t, "embedding_model": b.embedding_model,
                  "device": b.device, **overrides}
        return cls(context, nli, **params)

    @property
    def label(self) -> str:
        return self.nli.label if self.nli is not None else ""

    def raw_one(self, info: AnswerInfo) -> float:
        raise NotImplementedError

    def raw(self, examples: list[ResponseExample]) -> np.ndarray:
        before = getattr(self.nli, "calls", 0)
        out = np.array([self.raw_one(i) for i in self.context.for_examples(examples)], dtype=np.float64)
        self.nli_calls += getattr(self.nli, "calls", 0) - before
        return out

    def fit(self, train: list[ResponseExample], dev: list[ResponseExample]) -> None:
        """Min–max scaling from dev (smaller than train: the samples cost NLI calls), else train."""
        if self.scale:
            self.scaler.fit(self.raw(dev or train))

    def score_sequences(self, examples: list[ResponseExample]) -> np.ndarray:
        r = self.raw(examples)
        return self.scaler(r) if self.scale else r


class SelfCheckNLI(SamplingScorer):
    name: ClassVar[str] = "selfcheck_nli"
    scale: ClassVar[bool] = False  # already in [0, 1]

    def _sentence_scores(self, info: AnswerInfo) -> tuple[list[tuple[int, int, str]], np.ndarray]:
        sents = sentences_with_offsets(info.answer)
        return sents, selfcheck_nli([s for *_, s in sents], info.samples, self.nli)

    def fit(self, train, dev) -> None:  # training-free
        pass

    def score(self, examples: list[ResponseExample]) -> list[np.ndarray]:
        """Each span takes the score of the sentence it starts in."""
        before, out = self.nli.calls, []
        for info in self.context.for_examples(examples):
            sents, sc = self._sentence_scores(info)
            starts = np.array([a for a, *_ in sents])
            idx = [max(int(np.searchsorted(starts, sp.char_start, "right")) - 1, 0) for sp in info.spans]
            out.append(sc[idx].astype(np.float64))
        self.nli_calls += self.nli.calls - before
        return out

    def score_sequences(self, examples: list[ResponseExample]) -> np.ndarray:
        """Native sequence score: the mean over the answer's sentences."""
        return np.array([self._sentence_scores(i)[1].mean() for i in self.context.for_examples(examples)])

    native_sequences = score_sequences


class SemanticEntropy(SamplingScorer):
    """Reported as SE / log S ∈ [0, 1] (S clusters of one answer each is the maximum): no fit needed."""

    name: ClassVar[str] = "semantic_entropy"
    scale: ClassVar[bool] = False

    def raw_one(self, info: AnswerInfo) -> float:
        if len(info.samples) < 2:
            return 0.0
        se = discrete_entropy(semantic_clusters(nli_matrix(info.samples, self.nli)[..., ENTAIL]))
        return se / np.log(len(info.samples))


class KLE(SamplingScorer):
    name: ClassVar[str] = "kle"
    scale: ClassVar[bool] = False  # already in [0, 1] (divided by log S)

    def raw_one(self, info: AnswerInfo) -> float:
        if len(info.samples) < 2:
            return 0.0
        cls = nli_matrix(info.samples, self.nli).argmax(-1)
        return kle(cls == ENTAIL, cls == CONTRADICT, self.params["t"])


class EigenScore(SamplingScorer):
    name: ClassVar[str] = "eigenscore"
    requires: ClassVar[tuple[str, ...]] = ("samples",)

    def raw_one(self, info: AnswerInfo) -> float:
        from ..label.align import load_embedder

        emb = load_embedder(self.params["embedding_model"], self.params["device"])
        Z = emb.encode(info.samples or [info.answer], normalize_embeddings=True, convert_to_numpy=True,
                       show_progress_bar=False)
        return eigen_score(Z, self.params["alpha"])

    @property
    def label(self) -> str:
        return "sentence embeddings"
