"""`spanuq bench grounded` and the with-sources calibration: the pair files (by case, disjoint from
training), the string-overlap control, the fit choosing its terms on validation, and — on the real
SmolLM2 backbone — the bench and `spanuq recalibrate --grounded` end to end."""
from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest

from spanuq.bench.grounded import CASES, KINDS, PAIRS, TRAIN_PAIRS, in_source, pasted, read_pairs
from spanuq.train.grounded_slots import SlotReading

REPO = TRAIN_PAIRS.parents[3]


def test_the_bundled_pairs_hold_every_case_and_kind_as_their_case_says():
    pairs = read_pairs(PAIRS)
    assert {p.case for p in pairs} == set(CASES) and {p.kind for p in pairs} == set(KINDS)
    for p in pairs:
        source = " ".join(p.context)
        stated = {v: in_source(v, p.context) == 1.0 for v in (p.correct.value, p.planted.value)}
        assert p.correct.text[:p.correct.slot[0]] == p.planted.text[:p.planted.slot[0]]  # one fact differs
        assert p.planted.value != p.correct.value
        assert stated[p.planted.value] == (p.case == "a")  # (a): string overlap cannot tell the twins apart
        if p.case in ("a", "b"):
            assert p.correct.value in source
        if p.case in ("c", "d") and p.kind in ("year", "number"):
            assert not stated[p.correct.value]  # in other words (c) or not at all (d)


def test_training_pairs_share_no_subject_passage_or_question_with_the_bench():
    bench, train = read_pairs(PAIRS), read_pairs(TRAIN_PAIRS)
    assert not {p.group for p in bench} & {p.group for p in train}
    assert not {c for p in bench for c in p.context} & {c for p in train for c in p.context}
    assert not {p.prompt for p in bench} & {p.prompt for p in train}
    # nor does the bench name a training subject anywhere in its sources, or the other way round
    names = re.compile(r"\b(" + "|".join(sorted({q.group for q in train})) + r")\b")
    assert not any(names.search(c) for p in bench for c in p.context)


def test_a_pair_file_that_does_not_fit_gets_an_error_naming_the_row(tmp_path):
    good = json.loads(PAIRS.read_text().splitlines()[0])
    for change, message in (({"context": []}, "non-empty list"), ({"context": "a string"}, "non-empty list"),
                            ({"slot": [0, 999]}, "outside the answer"), ({"case": "e"}, "case must be"),
                            ({"wrong": good["answer"][slice(*good["slot"])]}, "equals the right one")):
        path = tmp_path / "pairs.jsonl"
        path.write_text(json.dumps({**good, **change}) + "\n")
        with pytest.raises(ValueError, match=message) as e:
            read_pairs(path)
        assert good["id"] in str(e.value)
    path.write_text(json.dumps({k: v for k, v in good.items() if k != "wrong"}) + "\n")
    with pytest.raises(ValueError, match="missing wrong"):
        read_pairs(path)


def test_the_overlap_control_reads_words_of_the_value_in_the_sources():
    ctx = ("Chlorine was discovered by Carl Wilhelm Scheele in 1774.",)
    assert in_source("1774", ctx) == 1.0 and in_source("1776", ctx) == 0.0
    assert in_source("Wilhelm Ostwald", ctx) == 0.5  # one of its two words
    assert pasted("When?", ctx) == ctx[0] + "\n\nWhen?"


def readings_where_surprisal_decides(n_subjects: int = 30, seed: int = 0) -> list[SlotReading]:
    """Slots whose raw û says nothing and whose surprisal after the source tells right from wrong
    (as copying a stated value does), in the four cases."""
    rng = np.random.default_rng(seed)
    out = []
    for g in range(n_subjects):
        for case in CASES:
            pair = f"s{g}-{case}"
            for twin in ("correct", "planted"):
                y = 1.0 if twin == "planted" or case == "d" else 0.0
                s = rng.normal(9.0 if y else 1.0, 1.5)
                out.append(SlotReading(pair, f"subject{g}", case, "year", twin, y, float(rng.uniform(0.2, 0.8)),
                                       max(0.0, s), float(rng.uniform(1, 3)), True))
    return out


def test_the_fit_chooses_the_terms_that_read_the_answer_against_the_source_on_validation():
    from spanuq.train.grounded_calibration import calibrate_grounded, evaluate, fit, held_out

    readings = readings_where_surprisal_decides()
    assert 0 < sum(held_out(f"subject{g}") for g in range(30)) < 30
    entry, info = calibrate_grounded(readings, precision=0.9)
    assert info["variant"] == "surprisal" and entry["surprisal"] > 0 and entry["fact_spans"] is True
    v = info["validation"]
    assert v["surprisal"]["log_loss"] < v["platt"]["log_loss"]
    assert v["surprisal"]["pair_accuracy_b"] > 0.9 and v["surprisal"]["right_u_ge_0.5"] < 0.1
    assert v["platt"]["pair_accuracy_b"] < 0.8  # û alone cannot: the data says so, not the test
    assert evaluate(fit("surprisal", readings), readings)["silent_u_ge_0.5"] > 0.9  # unsupported reads as such
    # calibration beside the figures: the surprisal mapping has the lower Brier score on validation, both a low ECE
    assert v["surprisal"]["brier"] < v["platt"]["brier"] and 0 <= v["surprisal"]["ece"] < 0.05
    assert v["surprisal"]["wrong_u_ge_0.5"] > 0.9 and {"right_u_ge_0.5_a", "right_u_ge_0.5_c"} <= set(v["surprisal"])


def readings_where_lookback_decides(n_subjects: int = 30, seed: int = 0) -> list[SlotReading]:
    """Slots like `readings_where_surprisal_decides`, except in case c: there the right value, stated in other
    words, surprises the backbone as much as a wrong one, and only one attention head (of 12) looks back at
    the sources more over the right value than over the wrong one."""
    rng = np.random.default_rng(seed)
    out = []
    for r in readings_where_surprisal_decides(n_subjects, seed):
        s = r.surprisal
        if r.case == "c":
            s = max(0.0, rng.normal(9.0, 1.5))
        heads = rng.uniform(0.2, 0.4, 12)
        if r.case != "d":  # where the sources state the value, head 7 reads it there
            heads[7] += 0.3 if r.label == 0 else 0.0
        out.append(SlotReading(r.pair, r.group, r.case, r.kind, r.twin, r.label, r.u_raw, s, r.entropy, True,
                               tuple(heads)))
    return out


def test_the_lookback_variant_is_chosen_where_the_heads_read_a_fact_in_other_words():
    from spanuq.model.calibration import Calibration, span_terms
    from spanuq.train.grounded_calibration import calibrate_grounded, with_grounded

    readings = readings_where_lookback_decides()
    entry, info = calibrate_grounded(readings, precision=0.9)
    v = info["validation"]
    assert info["variant"] == "lookback" and len(entry["lookback"]) == 12
    assert v["lookback"]["log_loss"] < v["surprisal"]["log_loss"]
    assert v["surprisal"]["right_u_ge_0.5_c"] > 0.5 and v["lookback"]["right_u_ge_0.5_c"] < 0.2
    assert v["lookback"]["wrong_u_ge_0.5"] > 0.9
    assert max(range(12), key=lambda k: abs(entry["lookback"][k])) == 7  # the head that reads the sources
    # stored as JSON numbers in the probe's config, read back as the with-sources mapping of given answers
    cal = Calibration.from_dict(json.loads(json.dumps(with_grounded(Calibration(), entry).as_dict())))
    g = cal.for_source("given", grounded=True)
    assert g.reads_lookback and not cal.for_source("given").reads_lookback and "lookback" not in cal.as_dict()
    lr = np.tile(np.array(readings[0].lookback), (3, 1))
    terms = span_terms([0.5, 2.0, 1.0], [1.0, 0.3, 0.2], [(0, 1)], lr)
    assert terms.shape == (1, 14) and np.allclose(terms[0], [2.5, 1.0, *readings[0].lookback])
    with pytest.raises(ValueError, match="lookback ratios"):
        g.scores([0.5], [[2.5, 1.0]])  # a span read without the heads' attention is refused, not mis-scored
    # `spanuq recalibrate --grounded` chooses among evaluate.grounded_variants: lookback is asked for, not default
    from spanuq.config import load_config

    default = load_config(REPO / "params.yaml").evaluate.grounded_variants
    assert "lookback" not in default
    assert calibrate_grounded(readings, precision=0.9, variants=default)[1]["variant"] == "surprisal"


def test_the_fit_records_the_training_pairs_by_their_place_in_the_repository(tmp_path):
    from spanuq.train.recalibrate import repo_relative

    assert repo_relative(TRAIN_PAIRS) == "spanuq/label/grounded/pairs.jsonl"  # not this machine's folder
    assert repo_relative(tmp_path / "mine.jsonl") == str(tmp_path / "mine.jsonl")  # the user's own, as given


def test_the_with_sources_entry_is_stored_beside_the_others_untouched():
    from spanuq.model.calibration import Calibration
    from spanuq.train.grounded_calibration import with_grounded

    base = Calibration(temperature=1.3, given={"temperature": 20.0, "bias": -1.0, "fact_spans": True})
    entry = {"temperature": 2.0, "bias": -3.0, "surprisal": 0.5, "context": 0.1, "flag": 0.6, "fact_spans": True}
    cal = Calibration.from_dict(json.loads(json.dumps(with_grounded(base, entry).as_dict())))
    assert cal.given == base.given and cal.temperature == 1.3
    assert cal.for_source("given") == base.for_source("given")  # without sources nothing changes
    g = cal.for_source("given", grounded=True)
    assert (g.temperature, g.bias, g.surprisal, g.context, g.flag) == (2.0, -3.0, 0.5, 0.1, 0.6) and g.fact_spans


@pytest.mark.slow
def test_bench_grounded_end_to_end_on_the_real_backbone(make_cfg, probe_dir):
    from spanuq.bench.grounded_run import run_grounded

    cfg = make_cfg()
    out = run_grounded(cfg, probe=str(probe_dir), limit=1, bootstrap=20, progress=False)
    rec = json.loads(out.read_text())
    assert rec["readings"] == ["context", "pasted"]  # the product's `context` input, and pasted as before
    assert rec["summary"]["pairs"] == len(rec["items"]) == 19 and not rec["summary"]["errors"]
    first = rec["items"][0]
    assert first["correct"]["surprisal_source"] > 0 and first["correct"]["surprisal_none"] > 0
    assert {"context", "pasted", "overlap", "tagger"} <= set(first["planted"])
    assert first["correct"]["context_detail"]["status"] == "unverified"  # a random probe has no with-sources mapping
    cells = {(r["case"], r["kind"]) for r in rec["summary"]["table"]}
    assert {("a", "all"), ("d", "all"), ("a–c", "all")} <= cells
    assert out.with_suffix(".md").read_text().startswith("# Grounded pairs")


@pytest.mark.slow
def test_recalibrate_grounded_writes_only_the_with_sources_entry(make_cfg, probe_dir, tmp_path):
    from spanuq.model.checkpoint import load_checkpoint
    from spanuq.train.recalibrate import recalibrate_grounded

    probe = tmp_path / "probe"
    shutil.copytree(probe_dir, probe)
    before = load_checkpoint(probe).calibration
    weights = (probe / "model.safetensors").read_bytes()
    rows = TRAIN_PAIRS.read_text().splitlines()
    small = tmp_path / "pairs.jsonl"  # the year pairs of six subjects: one (Silicon) lands in validation
    chosen = list(dict.fromkeys(json.loads(r)["group"] for r in rows))[:6]
    small.write_text("\n".join(r for r in rows if json.loads(r)["group"] in chosen and json.loads(r)["kind"] == "year")
                     + "\n")
    info = recalibrate_grounded(make_cfg(), probe, small)
    after = load_checkpoint(probe).calibration
    assert (probe / "model.safetensors").read_bytes() == weights
    assert after.grounded["given"] == info["entry"] and after.given == before.given
    assert after.for_source("given") == before.for_source("given")
    assert json.loads((probe / "grounded_calibration.json").read_text())["variant"] in ("platt", "surprisal")


def test_a_run_keeps_what_it_read_and_never_an_error(tmp_path):
    from spanuq.bench.grounded_run import Cache

    path, calls = tmp_path / "cache.jsonl", []

    def compute(todo):
        calls.append(list(todo))
        return ["scorer: busy" if i == 1 else {"u": 0.1 * i} for i in todo]

    first = Cache(path).values(["a", "b", "c"], compute)
    assert first == [{"u": 0.0}, "scorer: busy", {"u": 0.2}]
    again = Cache(path).values(["a", "b", "c"], compute)  # a new run: only the failed one is read again
    assert calls == [[0, 1, 2], [1]] and again[0] == {"u": 0.0} and again[2] == {"u": 0.2}
