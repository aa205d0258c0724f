"""The conformal guarantees of `spanuq calibrate`, checked by simulation on exchangeable answers,
and the stored thresholds tied to the probe's weights."""
import json
import math
from pathlib import Path

import numpy as np
import pytest

from spanuq.score import guarantee as store
from spanuq.metrics.conformal import AnswerClaims, _packed, fdp, fit, fit_factuality, fit_fdr, hb_pvalue, outcome, split_check


def draw(rng, n: int) -> list[AnswerClaims]:
    """Answers with 1-8 claims; a wrong claim tends to score higher, not always (an imperfect probe)."""
    out = []
    for i in range(n):
        k = int(rng.integers(1, 9))
        hard = rng.random()
        wrong = rng.random(k) < 0.15 + 0.5 * hard
        scores = np.clip(rng.normal(0.35 + 0.3 * wrong + 0.1 * hard, 0.15), 0, 1)
        out.append(AnswerClaims(f"a{i}", scores, wrong))
    return out


def test_factuality_holds_at_every_alpha_and_is_not_needlessly_conservative():
    rng = np.random.default_rng(0)
    for alpha in (0.05, 0.1, 0.2):
        failures = []
        for _ in range(800):
            cal, new = draw(rng, 100), draw(rng, 1)
            f = fit_factuality(cal, alpha)
            failures.append(outcome(new, f.threshold)["failure_rate"])
        rate, se = np.mean(failures), np.std(failures) / math.sqrt(len(failures))
        k = math.floor(alpha * 101)
        assert rate <= k / 101 + 3 * se, (alpha, rate)
        # the split-conformal upper bound: P(fail) >= (k - 1) / (n + 1) without ties
        assert rate >= (k - 1) / 101 - 3 * se, (alpha, rate)


def test_factuality_edge_cases():
    answers = [AnswerClaims("a", np.array([0.2, 0.9]), np.array([False, True])),
               AnswerClaims("b", np.array([0.3]), np.array([False]))]
    assert fit_factuality(answers, 0.05).threshold is None  # k = 0: keep nothing
    only_right = [AnswerClaims(str(i), np.array([0.5]), np.array([False])) for i in range(30)]
    assert fit_factuality(only_right, 0.1).threshold == 1.0  # no wrong claim anywhere: keep everything
    f = fit_factuality([AnswerClaims(str(i), np.array([i / 20]), np.array([True])) for i in range(1, 20)], 0.1)
    assert f.threshold < 0.1 and f.threshold == pytest.approx(0.1)  # k = 2: just below r_(2) = 0.1


def test_hoeffding_bentkus_pvalue_is_valid_at_the_boundary():
    rng = np.random.default_rng(1)
    n, alpha, delta = 200, 0.1, 0.1
    p = [hb_pvalue(float(rng.binomial(1, alpha, n).mean()), n, alpha) for _ in range(4000)]
    assert np.mean(np.array(p) <= delta) <= delta
    assert hb_pvalue(0.0, 200, 0.1) < 1e-6 and hb_pvalue(0.2, 200, 0.1) == 1.0


def test_fdr_guarantee_holds_with_probability_one_minus_delta():
    rng = np.random.default_rng(2)
    population = draw(rng, 40_000)  # stands in for E[FDP(λ)]
    packed = _packed(population)
    for alpha in (0.1, 0.2):
        bad = 0
        for _ in range(300):
            f = fit_fdr(draw(rng, 150), alpha, 0.1)
            bad += f.threshold is not None and fdp(population, f.threshold, packed).mean() > alpha
        assert bad / 300 <= 0.1 + 3 * math.sqrt(0.1 * 0.9 / 300), (alpha, bad)


def test_fdr_keeps_more_as_alpha_grows_and_fit_dispatches():
    rng = np.random.default_rng(3)
    answers = draw(rng, 400)
    kept = [outcome(answers, fit(answers, "fdr", a, 0.1).threshold)["kept_share"] for a in (0.05, 0.1, 0.2)]
    assert kept[0] <= kept[1] <= kept[2] and kept[2] > 0
    with pytest.raises(ValueError, match="unknown guarantee"):
        fit(answers, "coverage", 0.1)
    with pytest.raises(ValueError, match="alpha"):
        fit(answers, "factuality", 1.5)


def test_split_check_reports_the_held_out_distribution():
    rng = np.random.default_rng(4)
    s = split_check(draw(rng, 200), "factuality", 0.1, n_splits=50)
    assert s["n_cal"] == s["n_test"] == 100 and s["rate_q05"] <= s["rate_mean"] <= s["rate_q95"]
    assert 0 < s["kept_mean"] < 1


def test_stored_thresholds_are_tied_to_the_weights(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights one")
    answers = draw(np.random.default_rng(5), 120)
    f = fit(answers, "factuality", 0.1)
    path = store.write(tmp_path, [(f, outcome(answers, f.threshold))], {"source": "sim", "n_answers": 120}, 0.5, 0.3)
    g = store.load(tmp_path, "factuality", 0.1)
    assert g.threshold == f.threshold and "1 − α = 0.90" in g.statement()
    with pytest.raises(KeyError, match="no fdr threshold"):
        store.load(tmp_path, "fdr", 0.1, 0.1)
    f2 = fit(answers, "fdr", 0.2, 0.1)  # a second entry is added, the first kept
    store.write(tmp_path, [(f2, outcome(answers, f2.threshold))], {"source": "sim", "n_answers": 120}, 0.5, 0.3)
    assert [e["guarantee"] for e in json.loads(path.read_text())["thresholds"]] == ["factuality", "fdr"]
    (tmp_path / "model.safetensors").write_bytes(b"weights two")  # the probe was retrained
    with pytest.raises(ValueError, match="fitted for the probe with weights sha256"):
        store.load(tmp_path, "factuality", 0.1)


def test_doc_tables_replace_only_their_block(tmp_path):
    from spanuq.conformal.doc import BEGIN, END, clopper_pearson, write_block

    page = tmp_path / "g.md"
    page.write_text("no markers here\n")
    with pytest.raises(ValueError, match="needs one line"):
        write_block(page, "x\n")
    page.write_text(f"a\n{BEGIN}\nold\n{END}\nb\n")
    write_block(page, "| new |\n")
    assert page.read_text() == f"a\n{BEGIN}\n| new |\n{END}\nb\n"
    from scipy.stats import binom

    lo, hi = clopper_pearson(2, 59)  # exact: each end leaves 2.5% of the binomial's mass beyond 2 / 59
    assert binom.cdf(2, 59, hi) == pytest.approx(0.025) and binom.sf(1, 59, lo) == pytest.approx(0.025)
    assert clopper_pearson(0, 10)[0] == 0 and clopper_pearson(10, 10)[1] == 1


def test_calibrate_command_fits_on_the_shipped_test_split(tmp_path, repo_root, monkeypatch):
    """`spanuq calibrate` as a user runs it: the shipped probe's stored test split (40 answers here).
    The shipped probe lies inside the package (here, an editable install: the repository), which is
    not the user's to write: the thresholds go to the user's data folder, and scoring reads them there."""
    import os
    import subprocess
    import sys

    from spanuq.conformal.doc import BEGIN, END
    from spanuq.score.shipped import shipped_dir

    shipped = shipped_dir("smollm2-135m") / "conformal.json"
    shipped_before = shipped.read_bytes()
    home = tmp_path / "share"
    page = tmp_path / "guarantees.md"
    page.write_text(f"# Guarantees\n\nprose kept\n\n{BEGIN}\nold numbers\n{END}\n\nmore prose\n")
    r = subprocess.run([sys.executable, "-m", "spanuq.cli", "calibrate", "--model", "shipped", "--limit", "40",
                        "--alpha", "0.1", "0.2", "--guarantee", "factuality", "fdr", "--check", "20",
                        "--json", "--doc", str(page)], capture_output=True, text=True, timeout=900, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(repo_root), "XDG_DATA_HOME": str(home)})
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert shipped.read_bytes() == shipped_before  # the package is left as installed
    out = Path(got["file"])
    assert out.parent == home / "spanuq" / "conformal" and out.name.startswith("smollm2-135m-")
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    fact = next(row for row in got["rows"] if row["guarantee"] == "factuality" and row["alpha"] == 0.2)
    assert store.load(shipped.parent, "factuality", 0.2).threshold == fact["threshold"]  # what scoring reads
    assert got["n_answers"] == 40 and got["n_claims"] > 40 and len(got["rows"]) == 4
    for row in got["rows"]:
        assert row["splits"]["n_splits"] == 20 and 0 <= row["calibration"]["kept_share"] <= 1
        if row["guarantee"] == "factuality":
            assert row["bound"] == math.floor(row["alpha"] * 41) / 41
    doc = json.loads(out.read_text())
    assert doc["fitted_on"]["n_answers"] == 40 and len([t for t in doc["thresholds"] if t["n_answers"] == 40]) == 4
    assert {t["alpha"] for t in doc["thresholds"]} >= {0.05}  # the shipped α = 0.05 kept beside this fit
    assert doc["probe_sha256"] == json.loads((repo_root / "spanuq/probes/smollm2-135m/card.json").read_text()
                                             )["weights"]["sha256"]
    # the docs' tables: written from this run between the markers, the prose around them kept
    text = page.read_text()
    assert "old numbers" not in text and text.startswith("# Guarantees\n\nprose kept\n") and "more prose" in text
    tables = text.split(BEGIN)[1].split(END)[0]
    assert "spanuq calibrate --model shipped --limit 40" in tables and "**40 answers," in tables
    fact = next(row for row in got["rows"] if row["guarantee"] == "factuality" and row["alpha"] == 0.1)
    line = next(x for x in tables.splitlines() if x.startswith("| factuality | 0.10 |") and "[" in x)
    assert f"{fact['splits']['rate_mean']:.3f} [{fact['splits']['rate_q05']:.3f}" in line
    assert f"≤ {fact['bound']:.3f}" in tables


def test_a_conformal_threshold_flags_spans_and_drop_keeps_only_what_it_covers(scorer, tmp_path):
    """score.conformal_alpha: every result says which spans are above the fitted threshold, and
    refine --mode drop keeps only the sentences the guarantee covers (nothing when it holds the answer back)."""
    import shutil

    from spanuq import SpanUQ
    from spanuq.conformal.claims import claims_of, shipped_examples
    from spanuq.model.checkpoint import load_checkpoint
    from spanuq.score.shipped import shipped_dir

    probe = tmp_path / "probe"
    shutil.copytree(scorer.checkpoint, probe)
    shutil.copy(shipped_dir("smollm2-135m") / "test_split.jsonl", probe)  # labelled answers to fit on
    uq0 = SpanUQ(load_checkpoint(probe), scorer.cfg, scorer.model, scorer.tok, probe, threshold=scorer.threshold)
    answers = claims_of(uq0, shipped_examples(uq0, limit=30))
    fitted = [fit(answers, "factuality", a) for a in (0.1, 0.5)]
    store.write(probe, [(f, outcome(answers, f.threshold)) for f in fitted], {"source": "test", "n_answers": 30},
                0.5, 0.3)
    for f in fitted:
        cfg = scorer.cfg.model_copy(update={"score": scorer.cfg.score.model_copy(
            update={"conformal_alpha": f.alpha})})
        uq = SpanUQ(load_checkpoint(probe), cfg, scorer.model, scorer.tok, probe, threshold=scorer.threshold)
        r = uq.score("What is the capital of Australia?", response="Canberra is the capital of Australia. It was "
                                                                   "founded in 1913. Its lake is named after Griffin.")
        c = r.conformal
        lam = -1 if f.threshold is None else f.threshold
        assert c.threshold == f.threshold and c.flagged == [k for k, s in enumerate(r.spans) if s.u > lam]
        assert c.abstain == (r.u_seq > lam)
        refined = uq.refine(r.prompt, r.answer, mode="drop")
        if c.abstain:
            assert refined.answer == "" and refined.after is None
        else:  # every span left in the refined answer is under the threshold
            assert all(s.u_before <= lam for s in refined.spans if s.action == "kept")
            assert {s.start for s in refined.spans if s.action == "dropped"} >= {r.spans[k].start for k in c.flagged}
