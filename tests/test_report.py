"""The report stage on metrics written by the real scoring code, opened in headless Chromium."""
from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

from spanuq.baselines.cost import apart_seconds
from spanuq.evaluate.detection import detection_metrics
from spanuq.metrics.uq import defined, undefined
from spanuq.evaluate.scoring import oracle_span_metrics
from spanuq.pipeline.files import write_json

from browser import chromium, load

pytestmark = pytest.mark.skipif(chromium() is None, reason="needs Debian chromium (apt-get install chromium)")


def _examples(n=12, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        k = int(rng.integers(2, 6))
        starts = np.sort(rng.choice(40, size=k, replace=False)) * 3
        spans = np.stack([starts, starts + 2], 1)
        u = rng.uniform(size=k)
        out.append(SimpleNamespace(prompt_id=f"p{i}", domain=["triviaqa", "biography"][i % 2], spans=spans, u=u,
                                   u_seq=float(u.mean())))
    return out


def _write_metrics(root, ec):
    """metrics.json (evaluate) and baselines/{metrics,scores}.json as the two stages write them."""
    test = _examples()
    rng = np.random.default_rng(1)
    score = {"token_entropy": [rng.uniform(size=len(e.u)) for e in test],
             "selfcheck_nli": [np.clip(e.u + rng.normal(0, 0.2, len(e.u)), 0, 1) for e in test]}
    spanuq = oracle_span_metrics([np.clip(e.u + rng.normal(0, 0.1, len(e.u)), 0, 1) for e in test], test, ec, 50)
    spanuq["detection"] = detection_metrics([e.spans[:-1] for e in test], [e.spans for e in test], 0.3, 50)
    spanuq["coverage"] = defined(0.8)
    write_json(root / "metrics.json", {"backbone": "smollm2-135m", "n_responses": len(test),
                                       "n_spans": int(sum(len(e.u) for e in test)), "spanuq": spanuq})
    methods = {k: {**oracle_span_metrics(v, test, ec, 50), "bounded": True, "granularity": "span",
                   "implementation": "embedding NLI stand-in" if k == "selfcheck_nli" else "",
                   "cost": {"method_seconds_per_answer": 0.1, "added_seconds_per_answer": 2.0,
                            "end_to_end_seconds_per_answer": 3.0, "forward_passes_per_answer": 300.0,
                            "generated_tokens_per_answer": 300.0, "nli_calls_per_answer": 25.0}}
               for k, v in score.items()}
    methods["verbalized"] = {"unavailable": "OSError: no backbone here"}
    detectors = {"window20": {"detection": detection_metrics([e.spans for e in test], [e.spans for e in test], 0.3),
                              "coverage": defined(1.0), "span": methods["token_entropy"]["span"],
                              "spans_per_answer": 4.0},
                 "spacy_ner": {"unavailable": "RuntimeError: spaCy pipeline missing"}}
    cost = {"spanuq": {"seconds_per_answer": 0.2, "n_answers": len(test)},
            "decoding": {"greedy_seconds_per_answer": 1.0, "samples_seconds_per_answer": 4.0, "n_answers": 3,
                         "n_samples": 5, "backend": "server"},
            "ratio": {"end_to_end": 0.4, "added": 0.1, "selfcheck_over_spanuq_end_to_end": 2.5,
                      "selfcheck_over_spanuq_added": 10.0}}
    write_json(root / "baselines" / "metrics.json", apart_seconds({
        "label_method": "offline", "n_samples": 5, "nli": "embedding NLI stand-in", "methods": methods,
        "detectors": detectors, "cost": cost})[0])
    write_json(root / "baselines" / "scores.json", {
        "prompt_id": [e.prompt_id for e in test for _ in e.u], "domain": [e.domain for e in test for _ in e.u],
        "u": np.concatenate([e.u for e in test]).tolist(),
        "methods": {k: np.concatenate(v).tolist() for k, v in score.items()},
        "detectors": {"window20": np.concatenate(score["token_entropy"]).tolist()},
        "spanuq": np.concatenate(score["selfcheck_nli"]).tolist()})


def test_the_report_lays_out_every_table_and_opens_in_chromium_without_console_errors(make_cfg, tmp_path):
    from spanuq.report.stage import run_report

    cfg = make_cfg("report.log_mlflow=false")
    root = tmp_path / "data" / cfg.backbone.name
    _write_metrics(root, cfg.evaluate)
    page_path = run_report(cfg, progress=False)
    md = (root / "report" / "report.md").read_text()
    for title in ("Span level", "Sequence level", "Span detection", "Cost per answer", "per domain"):
        assert title in md
    per_domain = md[md.index("Span AUROC per domain"):]
    assert "SpanUQ (ours)" in per_domain  # SpanUQ's every-labelled-span scores reach the per-domain table
    assert "Reliability: SpanUQ over every labelled span" in md
    assert "SelfCheckGPT-NLI (embedding NLI stand-in)" in md
    assert "not run: OSError: no backbone here" in md  # a method that cannot run keeps its row
    assert "partly circular" in md
    cost = md[md.index("Cost per answer"):md.index("per domain")]
    assert "| SelfCheckGPT-NLI (embedding NLI stand-in) | 300.0 | 300.0 | 25.0 |" in cost  # the work, not the seconds
    assert "runs/baselines.json" in cost and "cheaper" not in md

    page = load(page_path.resolve().as_uri(), tmp_path / "profile", screenshot=tmp_path / "report.png")
    assert page.console == [], page.console
    assert len(re.findall(r"<table>", page.dom)) == 5
    assert page.dom.count('<img alt="') >= 3 and 'class="ours"' in page.dom
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_a_page_with_a_script_error_is_caught(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body><table></table>'
                   "<script>missing_function();</script></body></html>")
    page = load(bad.as_uri(), tmp_path / "profile")
    assert any("missing_function" in m for m in page.console)


def test_the_ablation_table_appears_when_ablation_runs_exist(make_cfg, tmp_path):
    from spanuq.report.stage import run_report

    cfg = make_cfg("report.log_mlflow=false")
    root = tmp_path / "data" / cfg.backbone.name
    _write_metrics(root, cfg.evaluate)
    row = {"name": "w/o UCIR", "set": {"probe.ucir": False}, "train_seconds": 42.0, "metrics": {
        "span": {"auroc": defined(0.61), "mae": defined(0.2), "spearman": undefined("constant")},
        "detection": {"precision": defined(0.5), "recall": defined(0.75), "f1": defined(0.6),
                      "mean_iou": defined(0.7)}, "coverage": defined(0.75)}}
    write_json(root / "ablation" / "ablation.json", {"meta": {"n_train": 60, "n_test_spans": 79}, "rows": [row]})
    run_report(cfg, progress=False)
    md = (root / "report" / "report.md").read_text()
    assert "Ablations" in md and "60 train answers" in md
    assert "| w/o UCIR | 0.610 | 0.200 | n/a (constant) | 0.500 | 0.750 | 0.600 | 0.750 | 0.700 | 42 |" in md


def test_the_mushroom_table_appears_when_the_benchmark_has_run(make_cfg, tmp_path):
    from spanuq.report.stage import run_report

    cfg = make_cfg("report.log_mlflow=false")
    root = tmp_path / "data" / cfg.backbone.name
    _write_metrics(root, cfg.evaluate)
    settings = {"soft": "u v>=0.3", "hard": {"variant": "u v>=0.3", "threshold": 0.45}}
    row = {"key": "spanuq", "name": "SpanUQ probe (ours)", "iou": defined(0.41, [0.35, 0.47]),
           "cor": defined(0.33, [0.28, 0.38]), "settings": settings,
           "delta_vs_entities_numbers": {"iou": defined(0.05, [0.01, 0.09]), "cor": defined(-0.02, [-0.06, 0.02])}}
    write_json(root / "bench" / "mushroom-test.json", {
        "split": "test", "n_items": 154, "n_skipped": 0, "rows": [row], "test_read": 1, "forced": False,
        "settings_file": "s.json", "bootstrap": {"resamples": 1000},
        "probe": {"path": "probe", "sha256": "ab" * 32}, "data": {"source": "x.jsonl", "sha256": "cd" * 32},
        "anchors": {"split": "test", "n_items": 154, "source": {"repository": "r", "files": ["f"], "commit": "c"},
                    "anchors": [{"name": "best IoU", "iou": 0.651, "cor": 0.629}]}})
    run_report(cfg, progress=False)
    md = (root / "report" / "report.md").read_text()
    assert "Mu-SHROOM English test split" in md and "Test read 1 of this probe" in md
    assert ("| SpanUQ probe (ours) | 0.410 [0.35, 0.47] | 0.330 [0.28, 0.38] | 0.050 [0.01, 0.09] | "
            "-0.020 [-0.06, 0.02] | soft: u v>=0.3; hard: u v>=0.3 > 0.45 |") in md
    assert "| leaderboard: best IoU | 0.651 | 0.629 |" in md
