"""Where each stage reads and writes: ``data/<backbone>/...`` so backbones coexist."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..config import Config


@dataclass(frozen=True)
class StagePaths:
    root: Path  # data/<backbone>
    cache: Path  # .cache/spanuq/<backbone>

    @classmethod
    def from_config(cls, cfg: Config) -> "StagePaths":
        return cls(Path(cfg.paths.data) / cfg.backbone.name, Path(cfg.paths.cache) / cfg.backbone.name)

    @classmethod
    def fitted_on(cls, cfg: Config) -> "StagePaths":
        """The run whose probe (and train/dev split) scores this run's test split: this run, or
        ``evaluate.probe_from`` (another run's data folder, e.g. to score prompts the probe never saw)."""
        if not cfg.evaluate.probe_from:
            return cls.from_config(cfg)
        fit = cls.from_config(cfg.model_copy(update={"paths": cfg.paths.model_copy(update={"data": cfg.evaluate.probe_from})}))
        if not fit.probe.is_dir():
            raise FileNotFoundError(f"evaluate.probe_from={cfg.evaluate.probe_from!r}: no trained probe at {fit.probe} "
                                    "(run the pipeline there first)")
        return fit

    # prompts (shared across backbones: the same prompts feed every backbone)
    @property
    def prompts(self) -> Path:
        return self.root.parent / "prompts.jsonl"

    @property
    def generations(self) -> Path:
        return self.root / "generations.jsonl"

    @property
    def generate_report(self) -> Path:
        return self.root / "generate_report.json"

    @property
    def claims(self) -> Path:
        return self.root / "claims.jsonl"

    @property
    def labels(self) -> Path:
        return self.root / "labels.jsonl"

    @property
    def label_report(self) -> Path:
        return self.root / "label_report.json"

    @property
    def label_plots(self) -> Path:
        return self.root / "plots" / "label"

    @property
    def corpus_index(self) -> Path:
        return self.root.parent / "bm25_index"

    @property
    def features(self) -> Path:
        return self.root / "features"

    @property
    def probe(self) -> Path:
        return self.root / "probe"

    @property
    def train_report(self) -> Path:
        return self.root / "train_report.json"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.json"

    @property
    def real_answers(self) -> Path:
        """The backbone's own answers to real questions with their sources (`spanuq.train.real_answers`)."""
        return self.root / "real_answers.jsonl"

    @property
    def reader(self) -> Path:
        """The with-sources reader (`spanuq.train.reader`): beside the probe, loaded with it."""
        return self.root / "reader"

    @property
    def eval_plots(self) -> Path:
        return self.root / "plots" / "eval"

    def stage_cache(self, stage: str) -> Path:
        return self.cache / stage

    def run_log(self, stage: str) -> Path:
        """How the stage's last run went: seconds, tokens per second, cache hits, the backend, the
        MLflow run.  Not a DVC output (nor inside one): a stage's outputs hold only what its inputs
        determine, so the same inputs give the same output hashes and dvc.lock does not move."""
        return self.root / "runs" / f"{stage}.json"


def models_dir(cfg: Config | None = None) -> Path:
    """Folder for converted backbones (GGUF → safetensors), outside the repo by default."""
    if cfg is not None and cfg.paths.models:
        return Path(cfg.paths.models)
    return Path(os.environ.get("SPANUQ_MODELS", Path.home() / ".cache" / "spanuq" / "models"))
