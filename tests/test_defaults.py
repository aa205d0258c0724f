"""One source of defaults: a probe is scored with the settings its checkpoint carries, from any folder;
an explicit override wins and is said; an older checkpoint falls back to the library's documented
defaults; the default probe is one a finished pipeline run trained here, never a half-written one."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spanuq.config import SCORING_KEYS, Config, get_dotted, load_config, scoring_settings
from spanuq.score.settings import resolve
from spanuq.score.shipped import shipped_dir
from spanuq.score.source import choose_probe, dvc_dir_md5

REPO = Path(__file__).resolve().parents[1]
SHIPPED = shipped_dir("smollm2-135m")
ANSWER = "Marie Curie was a Polish-French physicist who won the Nobel Prize in Physics in 1903 and Chemistry in 1911."


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-m", "spanuq.cli", *args], capture_output=True, text=True, cwd=cwd, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    return out


def test_the_shipped_probe_scores_the_same_from_the_repository_and_from_an_empty_folder(tmp_path):
    args = ["score", "Who was Marie Curie?", "--response", ANSWER, "--model", "shipped", "--json"]
    here, there = _cli(args, REPO), _cli(args, tmp_path)
    a, b = json.loads(here.stdout), json.loads(there.stdout)
    assert [(s["start"], s["end"], s["u"]) for s in a["spans"]] == [(s["start"], s["end"], s["u"]) for s in b["spans"]]
    assert a["u_seq"] == b["u_seq"] and a["probe"] == b["probe"] and a["probe"].startswith("shipped smollm2-135m probe")
    assert "spanuq: settings: the probe's" in here.stderr and "overridden" not in here.stderr


def test_what_scoring_needs_travels_in_the_shipped_checkpoint():
    extra = json.loads((SHIPPED / "config.json").read_text())["extra"]
    assert set(extra["scoring"]) == set(SCORING_KEYS)
    cfg, settings = resolve(Config(), extra)
    assert set(settings.source.values()) == {"checkpoint"} and settings.describe() == "settings: the probe's"
    assert cfg.generate.stop == ["\n\n"] and cfg.score.window_tokens == 128 and cfg.extract.dtype == "float16"


def test_a_pipeline_run_writes_the_settings_its_probe_scores_with(make_cfg):
    cfg = make_cfg("generate.max_new_tokens=96", "generate.stop=['###']", "backbone.system_prompt=Be brief.")
    s = scoring_settings(cfg)
    assert s["score.max_new_tokens"] == s["score.window_tokens"] == 96
    assert s["generate.stop"] == ["###"] and s["backbone.system_prompt"] == "Be brief."
    assert resolve(Config(), {"scoring": s})[0].generate.stop == ["###"]


def test_params_yaml_of_the_folder_does_not_change_what_a_probe_scores_with():
    extra = json.loads((SHIPPED / "config.json").read_text())["extra"]
    here = load_config(REPO / "params.yaml", ["generate.stop=['.']", "generate.temperature=1.0"])
    cfg, settings = resolve(here, extra)  # pipeline keys of a params file are not overrides of scoring
    assert cfg.generate.stop == ["\n\n"] and cfg.generate.temperature == 0.7
    assert "overridden" not in settings.describe()


def test_an_explicit_override_wins_and_is_reported():
    extra = json.loads((SHIPPED / "config.json").read_text())["extra"]
    cfg, settings = resolve(Config(), extra, {"generate.stop": [], "score.window_tokens": 64})
    assert cfg.generate.stop == [] and cfg.score.window_tokens == 64
    assert settings.source["generate.stop"] == "override"
    text = settings.describe()
    assert "overridden: generate.stop=[] (the probe's: ['\\n\\n'])" in text and "score.window_tokens=64" in text
    params = load_config(REPO / "params.yaml", ["score.languages=[en,fr]"])  # a score: key set explicitly
    assert resolve(params, extra)[0].score.languages == ["en", "fr"]


def test_the_terminal_view_says_which_probe_scored_and_the_cli_reports_an_override(tmp_path):
    out = _cli(["score", "Who was Marie Curie?", "--response", ANSWER, "--model", "shipped", "--color", "never",
                "-o", "score.window_tokens=64"], tmp_path)
    assert "probe: shipped smollm2-135m probe of" in out.stdout
    assert "choose with --model shipped | DIR | models:/spanuq-<backbone>@champion" in out.stdout
    assert "overridden: score.window_tokens=64 (the probe's: 128)" in out.stderr


def test_an_older_checkpoint_falls_back_to_the_documented_defaults_and_says_so():
    old = {"backbone": "smollm2-135m", "layers": [16, 18, 20], "system_prompt": "Answer briefly.", "window_tokens": 96}
    cfg, settings = resolve(load_config(REPO / "params.yaml"), old)
    assert cfg.backbone.system_prompt == "Answer briefly." and cfg.score.window_tokens == 96  # where it kept them
    library = Config()
    for key in ("generate.stop", "generate.temperature", "extract.dtype", "score.languages"):
        assert get_dotted(cfg, key) == get_dotted(library, key) and settings.source[key] == "default"
    assert "library defaults for backbone.dtype, extract.dtype, generate.stop" in settings.describe()
    bare = resolve(Config(), {})[1]
    assert bare.describe() == "settings: the library's defaults"


# ------------------------------------------------------------------ the default probe
def _trained_here(root: Path) -> Path:
    probe = root / "data" / "smollm2-135m" / "probe"
    probe.parent.mkdir(parents=True)
    shutil.copytree(SHIPPED, probe, ignore=shutil.ignore_patterns("card.json", "MODEL_CARD.md", "test_split.jsonl"))
    return probe


def test_a_probe_no_finished_stage_recorded_is_not_picked_up_and_the_reason_is_said(tmp_path):
    probe = _trained_here(tmp_path)
    cfg = load_config(None, [f"paths.data={tmp_path / 'data'}"])
    choice = choose_probe(None, cfg)
    assert choice.path == SHIPPED and "no dvc.lock records it" in choice.note and f"--model {probe}" in choice.note


def test_the_default_takes_a_probe_a_finished_dvc_stage_wrote_and_drops_it_once_it_changes(tmp_path):
    dvc = Path(sys.executable).parent / "dvc"
    if not dvc.exists():
        pytest.skip("needs dvc (the pipeline extra)")
    src = tmp_path / "src"
    shutil.copytree(SHIPPED, src, ignore=shutil.ignore_patterns("card.json", "MODEL_CARD.md", "test_split.jsonl"))
    repo = tmp_path / "repo"
    repo.mkdir()
    run = lambda *a: subprocess.run(a, cwd=repo, check=True, capture_output=True, text=True)  # noqa: E731
    run("git", "init", "-q")
    run(str(dvc), "init", "-q")
    run(str(dvc), "stage", "add", "-q", "-n", "train", "-o", "data/smollm2-135m/probe",
        f"mkdir -p data/smollm2-135m && cp -r {src} data/smollm2-135m/probe")
    run(str(dvc), "repro", "-q")
    probe = repo / "data" / "smollm2-135m" / "probe"
    lock = (repo / "dvc.lock").read_text()
    assert dvc_dir_md5(probe) in lock  # DVC's own hash of the folder, recomputed without DVC
    cfg = load_config(None, [f"paths.data={repo / 'data'}"])
    assert choose_probe(None, cfg).path == probe and choose_probe(None, cfg).note is None
    (probe / "config.json").write_text((probe / "config.json").read_text() + "\n")  # a run rewriting it
    choice = choose_probe(None, cfg)
    assert choice.path == SHIPPED and "differs from what dvc.lock's stage train finished with" in choice.note
