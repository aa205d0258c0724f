"""A sweep file (``sweeps/<backbone>.yaml``): the search space, the sampler and the budget.

``space`` maps a dotted config key (the same keys as ``-o``/``dvc exp run -S``) to its
choices; a choice that is a list (``backbone.layers``) is passed to Optuna as JSON text,
since Optuna's categorical choices must be scalars.  With ``sampler: grid`` the grid is
enumerated once by the coordinator and enqueued into the study (``n_trials`` < grid size
picks a seeded subset, as the paper's 24–28 configurations per backbone); every worker
then pops enqueued trials, so no configuration runs twice.
"""
from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator


class PrunerSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["median", "none"] = "median"
    n_startup_trials: int = 4  # complete trials before any pruning
    n_warmup_steps: int = 0  # epochs before pruning within a trial (set >= train.warmup_epochs)


class SweepSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    backbone: str
    study: str | None = None  # Optuna study name; None: spanuq-<backbone>
    sampler: Literal["grid", "random", "tpe"] = "grid"
    n_trials: int | None = None  # None: the whole grid (required for random / tpe)
    seed: int = 0
    params: str = "params.yaml"  # the base config every trial starts from
    preset: str | None = None  # a preset of params.yaml applied before the overrides
    overrides: list[str] = Field(default_factory=list)  # KEY=VALUE applied to every trial
    space: dict[str, list[Any]]
    pruner: PrunerSpec = Field(default_factory=PrunerSpec)
    heartbeat_s: int = 10  # a running trial records a heartbeat this often ...
    grace_s: int = 60  # ... and is failed (then retried once) when silent this long
    max_retry: int = 1  # retries of a trial whose process vanished (killed sweep, lost machine)

    @field_validator("space")
    @classmethod
    def _nonempty(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        if not v:
            raise ValueError("space must name at least one parameter")
        for k, choices in v.items():
            if not isinstance(choices, list) or not choices:
                raise ValueError(f"space.{k}: expected a non-empty list of choices")
        return v

    @property
    def study_name(self) -> str:
        return self.study or f"spanuq-{self.backbone}"

    def optuna_choices(self, key: str) -> list[Any]:
        return [encode(c) for c in self.space[key]]

    def grid(self) -> list[dict[str, Any]]:
        """Every configuration of the space as Optuna params (encoded), in a seeded order."""
        keys = list(self.space)
        points = [dict(zip(keys, combo)) for combo in itertools.product(*(self.optuna_choices(k) for k in keys))]
        random.Random(self.seed).shuffle(points)
        return points[: self.n_trials] if self.n_trials else points


def encode(choice: Any) -> Any:
    """A choice as Optuna stores it: scalars as they are, lists/dicts as JSON text."""
    return json.dumps(choice) if isinstance(choice, (list, dict)) else choice


def decode(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "[{":
        return json.loads(value)
    return value


def trial_overrides(spec: SweepSpec, params: dict[str, Any]) -> list[str]:
    """The trial's ``KEY=VALUE`` overrides: the sweep file's fixed ones, then the trial's params
    (a caller's overrides come after these: `spanuq.sweep.trial.trial_config`)."""
    return [*spec.overrides, *(f"{k}={json.dumps(decode(v))}" for k, v in params.items())]


def load_spec(path: str | Path) -> SweepSpec:
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"sweep file not found: {p} (one per backbone under sweeps/)")
    spec = SweepSpec.model_validate(yaml.safe_load(p.read_text()) or {})
    if spec.sampler != "grid" and not spec.n_trials:
        raise ValueError(f"{p}: sampler {spec.sampler!r} needs n_trials")
    return spec


def spec_path(backbone: str, root: str | Path = ".") -> Path:
    return Path(root) / "sweeps" / f"{backbone}.yaml"
