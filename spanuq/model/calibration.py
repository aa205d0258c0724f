"""What is fitted on dev after training and applied to every prediction: `Calibration`.

The train stage chooses the validity threshold of shown spans (best dev detection F1) and
fits a temperature ``T`` for û on every labelled dev span; both travel in the checkpoint's
``config.json`` with the duplicate IoU the spans were shown with.  Temperature scaling maps

    û_T = σ(logit(û) / T)

(û clipped to [1e-6, 1 − 1e-6] first, so 0 and 1 stay finite): ``T > 1`` softens
over-confident scores towards 0.5, ``T < 1`` sharpens them, ``T = 1`` is the identity.
How ``T`` is fitted is `spanuq.metrics.ece.fit_temperature`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

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


def apply_temperature(u_pred, temperature: float) -> np.ndarray:
    """``σ(logit(û) / T)`` elementwise (û clipped to [1e-6, 1 − 1e-6] first)."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    return expit(clipped_logit(unit_interval(u_pred)) / float(temperature))


@dataclass(frozen=True)
class Calibration:
    """How a probe's outputs become the scores and spans a reader sees (stored with the checkpoint).

    ``temperature``: T of û (1 = raw û); ``validity_threshold``: a query is shown when its
    validity p reaches it; ``dup_iou``: a shown span whose token IoU with a higher-validity
    shown span exceeds it is a duplicate and is dropped."""

    temperature: float = 1.0
    validity_threshold: float = 0.5
    dup_iou: float = 0.5

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError(f"calibration temperature must be > 0, got {self.temperature}")

    def scores(self, u_raw) -> np.ndarray:
        """û_T of raw û (the identity at T = 1)."""
        u = np.asarray(u_raw, dtype=np.float64)
        return u if self.temperature == 1.0 else apply_temperature(u, self.temperature).reshape(u.shape)

    def with_threshold(self, threshold: float | None) -> "Calibration":
        """This calibration with another validity threshold (None keeps it)."""
        return self if threshold is None else replace(self, validity_threshold=float(threshold))

    def raw(self) -> "Calibration":
        """This calibration without the temperature: û as the probe gives it."""
        return replace(self, temperature=1.0)

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Calibration":
        return cls(**{k: float(v) for k, v in d.items()})
