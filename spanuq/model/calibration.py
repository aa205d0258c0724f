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

    û_given = σ(logit(û) / T + b + w · S − v · H₀),   S = Σ_{t ∈ span} s_t,   H₀ = e_{first token of the span}

where s_t = −log p(y_t | x, y_<t) is the token's surprisal under the backbone and e_t the entropy
of its next-token distribution at t (`span_surprisal`). S is what the backbone knows: two answers
that differ in one fact share everything before it, so H₀ is the same for both and their order is
the backbone's likelihood ratio, the wrong year more surprising than the right one where it knows
the answer. H₀ is how open that place was — after "was born in" any year is surprising, after
"Paris is the capital of" one word is not — and puts spans of different answers on one scale.
Only the first token's entropy is used: after an unexpected token the backbone's entropy rises,
so subtracting the entropy of later tokens would discount exactly the surprise a planted value
causes. ``w = v = 0`` is Platt scaling (T and b, `spanuq.metrics.ece.fit_platt`). Each source also
stores ``flag``, the calibrated û at and above which a span is shown as likely wrong, chosen on dev
for precision. û_seq maps without the span term (S and H₀ belong to a span).

An answer read with sources in the backbone's input (`spanuq.context.render`) is another input
again: ``grounded`` holds a mapping per answer source fitted on answers read with their sources,
``{"generated": {...}, "given": {...}}``, each of the form of ``given``.  ``for_source(source,
grounded=True)`` takes it when fitted; a probe without one scores such answers with its mapping
without sources, and `Calibration.fitted_for` says so (the result's ``calibration_source``).

A with-sources mapping may also read how the backbone's attention heads look back at the sources
over the span (``lookback``: one weight λ_k per layer × head, `spanuq.llm.lookback`):

    û = σ(logit(û) / T + b + w · S − v · H₀ + Σ_k λ_k · LR̄_k)

with LR̄_k head k's lookback ratio averaged over the span's tokens (`span_terms`): a value the sources
state in other words is read by heads that look back at them, a wrong one is not (docs/grounded.md).
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


def span_surprisal(surprisal, entropy, spans) -> np.ndarray:
    """(S, H₀) of each inclusive token span ``(b, e)`` (module docstring): the sum of its tokens'
    surprisal and the entropy where it begins. ``surprisal``, ``entropy``: (T,) per answer token.
    Returns (n, 2)."""
    s = np.asarray(surprisal, dtype=np.float64).ravel()
    h = np.asarray(entropy, dtype=np.float64).ravel()
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    return np.array([(s[b: e + 1].sum(), h[b]) for b, e in spans], dtype=np.float64).reshape(-1, 2)


def span_terms(surprisal, entropy, spans, lookback=None) -> np.ndarray:
    """What a mapping reads of each span: (S, H₀) (`span_surprisal`), then, with ``lookback`` (T, layers·heads,
    `spanuq.llm.lookback`), the span's mean lookback ratio of each head.  Returns (n, 2) or (n, 2 + layers·heads)."""
    sh = span_surprisal(surprisal, entropy, spans)
    if lookback is None:
        return sh
    from ..llm.lookback import span_lookback

    return np.concatenate([sh, span_lookback(lookback, spans)], axis=1)


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
    ``surprisal`` w and ``context`` v add ``w · S − v · H₀`` of the span (module docstring; 0: not read);
    ``validity_threshold``: a query is shown when its validity p reaches it; ``dup_iou``: a shown
    span whose token IoU with a higher-validity shown span exceeds it is a duplicate and is
    dropped; ``flag``: a span at or above this calibrated û is shown as likely wrong (chosen on
    dev for precision); ``margin``: how much lower a replacement's û must be before `refine`
    trusts it. These hold for the backbone's own answers; ``given`` holds T, b, flag and margin
    fitted on answers the backbone did not write (`for_source`), None when none were fitted, and may
    carry a ``validity_threshold`` of its own (which queries of a given answer are shown; chosen on
    human-labelled answers of other systems, `spanuq.bench.mushroom_given`)."""

    temperature: float = 1.0
    validity_threshold: float = 0.5
    dup_iou: float = 0.5
    bias: float = 0.0
    flag: float = 0.5
    margin: float = 0.0
    surprisal: float = 0.0
    context: float = 0.0
    fact_spans: bool = False
    lookback: tuple[float, ...] | None = field(default=None, hash=False, compare=True)
    given: dict | None = field(default=None, hash=False, compare=True)
    grounded: dict | None = field(default=None, hash=False, compare=True)

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError(f"calibration temperature must be > 0, got {self.temperature}")
        if self.given is not None and not self.given.get("temperature", 1.0) > 0:
            raise ValueError(f"given-answer temperature must be > 0, got {self.given['temperature']}")
        for source, g in (self.grounded or {}).items():
            if source not in SOURCES:
                raise ValueError(f"grounded calibration for an unknown answer source {source!r} (one of {SOURCES})")
            if not g.get("temperature", 1.0) > 0:
                raise ValueError(f"{source} with-sources temperature must be > 0, got {g['temperature']}")

    def scores(self, u_raw, span=None) -> np.ndarray:
        """Calibrated û of raw û (the identity at T = 1, b = 0, w = v = 0). ``span``: (S, H₀) of each
        span (`span_terms`; with the heads' lookback ratios after them when the mapping reads them), needed
        when w or v ≠ 0 or λ is set; None leaves the span term out (û_seq)."""
        u = np.asarray(u_raw, dtype=np.float64)
        term = 0.0
        if self.reads_surprisal and span is not None:
            sh = np.atleast_2d(np.asarray(span, dtype=np.float64))
            if len(sh) != u.size:
                raise ValueError(f"{len(sh)} span surprisals for {u.size} û")
            if self.lookback is not None and sh.shape[1] != 2 + len(self.lookback):
                raise ValueError(f"this mapping reads {len(self.lookback)} lookback ratios of each span (it was "
                                 f"fitted on answers read with their sources), got {sh.shape[1] - 2}")
            term = self.surprisal * sh[:, 0] - self.context * sh[:, 1]
            if self.lookback is not None:
                term = term + sh[:, 2:] @ np.asarray(self.lookback, dtype=np.float64)
        if self.temperature == 1.0 and self.bias == 0.0 and np.all(term == 0.0):
            return u
        return expit(clipped_logit(unit_interval(u)).ravel() / self.temperature + self.bias + term).reshape(u.shape)

    @property
    def reads_surprisal(self) -> bool:
        """Whether these scores need each span's surprisal and entropy (w or v ≠ 0, or lookback weights)."""
        return self.surprisal != 0.0 or self.context != 0.0 or self.lookback is not None

    @property
    def reads_lookback(self) -> bool:
        """Whether these scores need each span's lookback ratios (the answer read with its sources' attention)."""
        return self.lookback is not None

    def for_source(self, source: str, grounded: bool = False) -> "Calibration":
        """The calibration of answers of ``source``: ``generated`` (the backbone's own, this one) or
        ``given`` (written elsewhere: the ``given`` mapping and flag when fitted, else this one).
        ``grounded``: the answer was read with sources in the input; the with-sources mapping of
        ``source`` when fitted, else the one without (`fitted_for` says which)."""
        if source not in SOURCES:
            raise ValueError(f"answer source must be one of {SOURCES}, not {source!r}")
        if grounded and (self.grounded or {}).get(source) is not None:
            return self._mapped(self.grounded[source])
        if source == "generated" or self.given is None:
            return replace(self, grounded=None) if self.grounded is not None else self
        return self._mapped(self.given)

    def _mapped(self, g: dict) -> "Calibration":
        return replace(self, temperature=float(g.get("temperature", 1.0)), bias=float(g.get("bias", 0.0)),
                       validity_threshold=float(g.get("validity_threshold", self.validity_threshold)),
                       flag=float(g.get("flag", self.flag)), margin=float(g.get("margin", self.margin)),
                       surprisal=float(g.get("surprisal", 0.0)), context=float(g.get("context", 0.0)),
                       fact_spans=bool(g.get("fact_spans", False)),
                       lookback=None if g.get("lookback") is None else tuple(float(x) for x in g["lookback"]),
                       given=None, grounded=None)

    def fitted_for(self, source: str, grounded: bool = False) -> str:
        """Which mapping `for_source` takes, as results name it: ``generated`` / ``given``, with
        ``+context`` when it was fitted on answers read with sources."""
        if grounded and (self.grounded or {}).get(source) is not None:
            return f"{source}+context"
        return "given" if source == "given" and self.given is not None else "generated"

    def with_threshold(self, threshold: float | None) -> "Calibration":
        """This calibration with another validity threshold for every answer source (None keeps each
        source's own): a threshold asked for explicitly wins over the one a mapping carries."""
        if threshold is None:
            return self
        t = float(threshold)

        def drop(g: dict | None) -> dict | None:
            return None if g is None else {k: v for k, v in g.items() if k != "validity_threshold"}

        return replace(self, validity_threshold=t, given=drop(self.given),
                       grounded=None if self.grounded is None else {k: drop(g) for k, g in self.grounded.items()})

    def raw(self) -> "Calibration":
        """This calibration without the û mapping: û as the probe gives it (for every source)."""
        return replace(self, temperature=1.0, bias=0.0, surprisal=0.0, context=0.0, lookback=None, given=None,
                       grounded=None)

    def as_dict(self) -> dict:
        """What ``config.json`` stores; ``fact_spans`` only inside ``given`` (own answers are never split)."""
        d = asdict(self)
        if d["lookback"] is None:
            d.pop("lookback")  # read only by with-sources mappings (inside ``grounded``)
        if d["grounded"] is None:
            d.pop("grounded")  # a probe without with-sources calibration stores what it stored before
        if not d.pop("fact_spans"):
            return d
        return dict(d, fact_spans=True)

    @classmethod
    def from_dict(cls, d: dict) -> "Calibration":
        """The calibration stored in a checkpoint's ``config.json``. A given-answer mapping of an earlier
        form (``excess``: Σ(surprisal − entropy), no longer computed) is left out with a warning: such a
        probe scores given answers with its own-answer calibration until `spanuq recalibrate` refits it."""
        given = d.get("given")
        if given is not None and "excess" in given:
            import warnings

            warnings.warn("this probe's given-answer calibration reads Σ(surprisal − entropy), an earlier form: it "
                          "is ignored (given answers get the own-answer calibration); refit it with "
                          "`spanuq recalibrate --probe DIR`", stacklevel=2)
            given = None
        grounded = d.get("grounded")
        return cls(**{k: _value(k, v) for k, v in d.items() if k not in ("given", "excess", "grounded")},
                   given=None if given is None else {k: _value(k, v) for k, v in given.items()},
                   grounded=None if grounded is None else {
                       source: {k: _value(k, v) for k, v in g.items()} for source, g in grounded.items()})


def _value(key: str, v) -> float | bool | tuple[float, ...]:
    """A stored calibration value: ``fact_spans`` a switch, ``lookback`` a list of weights, every other one a number."""
    if key == "lookback":
        return tuple(float(x) for x in v)
    return bool(v) if key == "fact_spans" else float(v)
