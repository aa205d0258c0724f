"""params.yaml → one typed Config; presets and dotted overrides."""
import pytest
from pydantic import ValidationError

from spanuq.config import load_config


def test_params_yaml_loads_into_one_typed_object(repo_root):
    cfg = load_config(repo_root / "params.yaml")
    assert cfg.backbone.name == "smollm2-135m"
    assert cfg.generate.n_samples >= 1 and cfg.probe.mob_components == 3


def test_overrides_use_dvc_style_dotted_keys(repo_root):
    cfg = load_config(repo_root / "params.yaml", ["generate.n_samples=3", "probe.ucir=false", "label.judge.model=x"])
    assert cfg.generate.n_samples == 3 and cfg.probe.ucir is False and cfg.label.judge.model == "x"


def test_presets_merge_over_the_base_and_overrides_win(repo_root):
    cfg = load_config(repo_root / "params.yaml", ["train.lr=0.5"], preset="gpu-paper")
    assert cfg.probe.d_proj == 512 and cfg.generate.n_samples == 20 and cfg.train.lr == 0.5
    full = load_config(repo_root / "params.yaml", ["preset=cpu-full"])
    assert full.prompts.n_prompts == 1499 and full.generate.backend == "llamacpp" and full.generate.n_samples == 7
    assert full.generate.temperature == load_config(repo_root / "params.yaml").generate.temperature  # one teacher


def test_typos_and_bad_values_are_errors(repo_root):
    with pytest.raises(ValidationError):
        load_config(repo_root / "params.yaml", ["generate.n_sampels=3"])
    with pytest.raises(ValidationError):
        load_config(repo_root / "params.yaml", ["probe.enrichment=magic"])
    with pytest.raises(ValueError, match="unknown preset"):
        load_config(repo_root / "params.yaml", preset="nope")
    with pytest.raises(ValueError, match="key=value"):
        load_config(repo_root / "params.yaml", ["generate.n_samples"])
