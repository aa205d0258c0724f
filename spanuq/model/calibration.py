"""What is fitted on dev after training and applied to every prediction: `Calibration`.

The train stage chooses the validity threshold of shown spans (best dev detection F1) and
fits a temperature ``T`` for û on every labelled dev span; both travel in the checkpoint's
``config.json`` with the duplicate IoU the spans were shown with.  Temperature scaling maps

    û_T = σ(logit(û) / T + b)

(û clipped to [1e-6, 1 − 1e-6] first, so 0 and 1 stay finite): ``T > 1`` softens
over-confident scores towards 0.5, ``T < 1`` sharpens them, ``T = 1, b = 0`` is the identity.
How ``T`` is fitted is `spanuq.metrics.ece.fit_temperature`.

An answer the backbone did not write (pasted, another model's) is read teacher-forced and
looks unlike the backbone's own answers to the probe, so it gets a mapping of its own,
`Calibration.for_source`, fitted on the dev split's given answers (`spanuq.label.given`):

    û_given = σ(logit(û) / T + b + w · ε),   ε = Σ_{t ∈ span} (s_t − e_t)

where s_t = −log p(y_t | x, y_<t) is the token's surprisal and e_t the entropy of the backbone's
distribution there (`excess_surprisal`). e_t is the surprisal the backbone expects at t, so on
text sampled from it E[s_t − e_t] = 0 at every t: ε has mean 0 whatever the span's length,
and is large only where the backbone was confident of something else — a wrong year in a question
it knows raises ε, a name it never learnt (high e_t) does not. Surprisal alone ranks a wrong fact
above the right one in the same sentence but not across spans (a rare right name, a long span are
surprising too); subtracting e_t makes it comparable across spans. ``w = 0`` is Platt scaling (T and b,
`spanuq.metrics.ece.fit_platt`). Each source also stores ``flag``, the calibrated û at and above
which a span is shown as likely wrong, chosen on dev for precision. û_seq maps without the span
term (ε belongs to a span).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import numpy as np
from scipy.special import expit, logit

EPS = 1e-6  # û is clipped to [EPS, 1 − EPS] before the logit


def unit_interval(u, name: str = "u_pred") -> np.ndarray:
    """``u`` as a flat float64 array, checked to be finite and inside [0, 1]."""
    u = np.asarray(u, dtype=np.float64).ravel()
    if not np.all(np.isfinite(u)):
        raise ValueError(f"{name} has non-finite values")
    if u.size and (u.min() < 0.0 or u.max() > 1.0):
        raise ValueError(f"{name} must lie in [0, 1] (min {u.min():.4g}, max {u.max():.4g})")
    return u


def clipped_logit(u: np.ndarray) -> np.ndarray:
    return logit(np.clip(u, EPS, 1.0 - EPS))


def excess_surprisal(surprisal, entropy, spans) -> np.ndarray:
    """ε of each inclusive token span ``(b, e)``: the sum over its tokens of surprisal − entropy
    (module docstring). ``surprisal``, ``entropy``: (T,) per answer token."""
    s = np.asarray(surprisal, dtype=np.float64).ravel()
    d = s - np.asarray(entropy, dtype=np.float64).ravel()[: len(s)]
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    return np.array([d[b: e + 1].sum() for b, e in spans], dtype=np.float64)


def apply_temperature(u_pred, temperature: float) -> np.ndarray:
    """``σ(logit(û) / T)`` elementwise (û clipped to [1e-6, 1 − 1e-6] first)."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    return expit(clipped_logit(unit_interval(u_pred)) / float(temperature))


SOURCES = ("generated", "given")


@dataclass(frozen=True)
class Calibration:
    """How a probe's outputs become the scores and spans a reader sees (stored with the checkpoint).

    ``temperature`` T and ``bias`` b map raw û to ``σ(logit(û)/T + b)`` (T = 1, b = 0: raw û),
    ``excess`` w adds ``w · ε`` of the span's excess surprisal (module docstring; 0: not read);
    ``validity_threshold``: a query is shown when its validity p reaches it; ``dup_iou``: a shown
    span whose token IoU with a higher-validity shown span exceeds it is a duplicate and is
    dropped; ``flag``: a span at or above this calibrated û is shown as likely wrong (chosen on
    dev for precision); ``margin``: how much lower a replacement's û must be before `refine`
    trusts it. These hold for the backbone's own answers; ``given`` holds T, b, flag and margin
    fitted on answers the backbone did not write (`for_source`), None when none were fitted."""

    temperature: float = 1.0
    validity_threshold: float = 0.5
    dup_iou: float = 0.5
    bias: float = 0.0
    flag: float = 0.5
    margin: float = 0.0
    excess: float = 0.0
    given: dict | None = field(default=None, hash=False, compare=True)

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError(f"calibration temperature must be > 0, got {self.temperature}")
        if self.given is not None and not self.given.get("temperature", 1.0) > 0:
            raise ValueError(f"given-answer temperature must be > 0, got {self.given['temperature']}")

    def scores(self, u_raw, excess=None) -> np.ndarray:
        """Calibrated û of raw û (the identity at T = 1, b = 0, w = 0). ``excess``: ε of each
        span (`excess_surprisal`), needed when w ≠ 0; None leaves the span term out (û_seq)."""
        u = np.asarray(u_raw, dtype=np.float64)
        term = 0.0
        if self.excess != 0.0 and excess is not None:
            eps = np.asarray(excess, dtype=np.float64)
            if eps.shape != u.shape:
                raise ValueError(f"excess surprisal {eps.shape} and û {u.shape} differ in shape")
            term = self.excess * eps.ravel()
        if self.temperature == 1.0 and self.bias == 0.0 and np.all(term == 0.0):
            return u
        return expit(clipped_logit(unit_interval(u)) / self.temperature + self.bias + term).reshape(u.shape)

    @property
    def reads_excess(self) -> bool:
        """Whether these scores need each span's excess surprisal (w ≠ 0)."""
        return self.excess != 0.0

    def for_source(self, source: str) -> "Calibration":
        """The calibration of answers of ``source``: ``generated`` (the backbone's own, this one) or
        ``given`` (written elsewhere: the ``given`` mapping and flag when fitted, else this one)."""
        if source not in SOURCES:
            raise ValueError(f"answer source must be one of {SOURCES}, not {source!r}")
        if source == "generated" or self.given is None:
            return self
        g = self.given
        return replace(self, temperature=float(g.get("temperature", 1.0)), bias=float(g.get("bias", 0.0)),
                       flag=float(g.get("flag", self.flag)), margin=float(g.get("margin", self.margin)),
                       excess=float(g.get("excess", 0.0)), given=None)

    def with_threshold(self, threshold: float | None) -> "Calibration":
        """This calibration with another validity threshold (None keeps it)."""
        return self if threshold is None else replace(self, validity_threshold=float(threshold))

    def raw(self) -> "Calibration":
        """This calibration without the û mapping: û as the probe gives it (for every source)."""
        return replace(self, temperature=1.0, bias=0.0, excess=0.0, given=None)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Calibration":
        given = d.get("given")
        return cls(**{k: float(v) for k, v in d.items() if k != "given"},
                   given=None if given is None else {k: float(v) for k, v in given.items()})
