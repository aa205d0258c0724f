"""The baselines by name: ``make_baseline("mlp_probe", cfg)`` builds one, `BASELINES` lists them.

Members are imported on first use, so heavy dependencies (NLI models, the backbone) load
only for the baselines actually run; the registry sits above them (a member imports only
`base`).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..config import Config
    from .base import SpanScorer

# name -> "module:Class", imported on first use so heavy dependencies (NLI models,
# the backbone) load only for the baselines actually run.
BASELINES: dict[str, str] = {
    "surface_prior": "spanuq.baselines.surface_prior:SurfacePrior",
    "token_entropy": "spanuq.baselines.token_entropy:TokenEntropy",
    "mlp_probe": "spanuq.baselines.mlp_probe:MLPProbe",
    "verbalized": "spanuq.baselines.backbone:Verbalized",
    "p_true": "spanuq.baselines.backbone:PTrue",
    "self_verify": "spanuq.baselines.backbone:SelfVerify",
    "selfcheck_nli": "spanuq.baselines.sampling:SelfCheckNLI",
    "semantic_entropy": "spanuq.baselines.sampling:SemanticEntropy",
    "eigenscore": "spanuq.baselines.sampling:EigenScore",
    "kle": "spanuq.baselines.sampling:KLE",
}


def baseline_class(name: str) -> type[SpanScorer]:
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; known baselines: {', '.join(sorted(BASELINES))}")
    module, _, attr = BASELINES[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def make_baseline(name: str, cfg: Config | None = None, **overrides: Any) -> SpanScorer:
    """``make_baseline("mlp_probe", cfg)``: the registered scorer, configured from ``cfg``.

    Without ``cfg`` the class defaults are used; keyword arguments override both.
    """
    cls = baseline_class(name)
    return cls.from_config(cfg, **overrides) if cfg is not None else cls(**overrides)
