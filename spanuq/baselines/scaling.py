"""Min–max scaling of raw uncertainty scores onto [0, 1] (paper Tab. A-seq, MAE†).

    s' = clip((s − s_min) / (s_max − s_min), 0, 1),   s_min, s_max from the train split.

The map is monotone non-decreasing, so ranking metrics (AUROC, Spearman ρ) are
unchanged up to ties created by clipping scores outside the train range; MAE
and ECE become defined.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class MinMaxScaler:
    lo: float | None = None
    hi: float | None = None

    @property
    def fitted(self) -> bool:
        return self.lo is not None

    def fit(self, values) -> "MinMaxScaler":
        v = np.asarray(values, dtype=np.float64).reshape(-1)
        v = v[np.isfinite(v)]
        if not len(v):
            raise ValueError("min-max scaling needs at least one finite score")
        self.lo, self.hi = float(v.min()), float(v.max())
        return self

    def __call__(self, values) -> np.ndarray:
        if not self.fitted:
            raise RuntimeError("MinMaxScaler used before fit")
        v = np.asarray(values, dtype=np.float64)
        return np.clip((v - self.lo) / max(self.hi - self.lo, 1e-12), 0.0, 1.0)
