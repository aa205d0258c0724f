"""Labels: claims anchored in the greedy answer, support across samples, soft span labels u*."""
import json

import pytest

from spanuq.label.targets import char_span_to_tokens, span_targets
from spanuq.llm.loading import token_offsets
from spanuq.pipeline.files import read_records, write_jsonl
from spanuq.pipeline.paths import StagePaths
from spanuq.pipeline.records import Claim, Generation, LabeledResponse, Prompt, Sample

from judge_server import ScriptedJudge


@pytest.fixture(scope="module")
def tok():
    from spanuq.config import load_config
    from spanuq.llm.loading import load_tokenizer

    return load_tokenizer(load_config(None))


def generation(tok, prompt_id: str, greedy: str, samples: list[str], truncated: tuple[int, ...] = ()) -> Generation:
    """A generation record; ``truncated`` lists the samples cut off by the token budget."""
    def sample(text, cut=False):
        return Sample(text=text, token_ids=tok(text, add_special_tokens=False)["input_ids"] if text else [],
                      finish_reason="length" if cut else "stop")

    return Generation(prompt_id=prompt_id, backbone="smollm2-135m", prompt_text="q", chat_prompt="q",
                      greedy=sample(greedy), samples=[sample(s, i in truncated) for i, s in enumerate(samples)],
                      decoding={}, seed=0)


def claim(text: str, span: str, support=(1.0,)) -> Claim:
    start = text.index(span)
    return Claim(id=f"c{start}", prompt_id="p", text=span, start=start, end=start + len(span), support=list(support))


# ---------------------------------------------------------------- character → token spans
@pytest.mark.parametrize("text,span", [
    ("Rusalka was composed by Antonín Dvořák in 1901.", "Antonín Dvořák"),
    ("東京は日本の首都です。", "日本"),
    ("Café ☕ costs 3€ — naïve 😀 test", "3€"),
])
def test_multibyte_characters_map_to_the_tokens_that_spell_them(tok, text, span):
    c = claim(text, span)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    (target,), lost = span_targets([c], text, ids, tok)
    assert lost == 0 and target.text == span
    decoded = tok.decode(ids[target.tok_start: target.tok_end + 1])
    assert span in decoded  # every byte of every character of the span is covered
    assert len(decoded.strip()) <= len(span) + 2  # ...and not much more


def test_overlapping_claims_stay_overlapping(tok):
    text = "Marie Curie won the Nobel Prize in Physics in 1903."
    claims = [claim(text, "the Nobel Prize in Physics"), claim(text, "Physics"), claim(text, "1903", (0.0, 1.0))]
    ids = tok(text, add_special_tokens=False)["input_ids"]
    targets, _ = span_targets(claims, text, ids, tok)
    big, small, year = targets
    assert big.tok_start <= small.tok_start <= small.tok_end <= big.tok_end
    assert year.u == 0.5 and year.tok_start > big.tok_end


def test_a_span_outside_the_text_is_counted_not_placed(tok):
    text = "Paris is the capital of France."
    _, offsets = token_offsets(tok, text)
    assert char_span_to_tokens(offsets, 100, 105) is None
    bad = Claim(id="x", prompt_id="p", text="x", start=100, end=105, support=[1.0])
    targets, lost = span_targets([bad], text, tok(text, add_special_tokens=False)["input_ids"], tok)
    assert targets == [] and lost == 1


def test_tokens_from_another_tokenizer_are_refused(tok):
    with pytest.raises(ValueError, match="re-run `spanuq generate`"):
        span_targets([], "Paris.", [1, 2, 3, 4, 5, 6, 7], tok)


# ---------------------------------------------------------------- the offline labeller
@pytest.fixture(scope="module")
def offline(tok):
    from spanuq.config import load_config
    from spanuq.label.align import make_aligner
    from spanuq.label.offline import OfflineLabeller

    cfg = load_config(None)
    return OfflineLabeller(cfg.label, make_aligner(cfg.label))


AUSTRALIA = Prompt(id="au", domain="triviaqa", text="What is the capital of Australia?", references=["Canberra"])


def test_a_right_answer_is_as_uncertain_as_the_samples_disagree(offline, tok):
    g = generation(tok, "au", "The capital of Australia is Canberra.", [
        "Canberra is the capital of Australia.", "The capital of Australia is Canberra.",
        "Australia's capital city is Sydney.", "It is Sydney.", "The capital is Canberra, in the ACT."])
    res = offline.label(g, AUSTRALIA)
    by_span = {g.greedy.text[c.start:c.end]: c for c in res.claims}
    assert res.status == "ok" and "Canberra" in by_span
    assert by_span["Canberra"].u == pytest.approx(0.4)  # 3 of 5 samples name Canberra
    assert "reference:match" in by_span["Canberra"].evidence


def test_a_wrong_answer_gets_u_one_however_often_it_is_repeated(offline, tok):
    g = generation(tok, "au", "The capital of Australia is Sydney.", ["The capital of Australia is Sydney."] * 4)
    res = offline.label(g, AUSTRALIA)
    by_span = {g.greedy.text[c.start:c.end]: c for c in res.claims}
    assert by_span["Sydney"].u == 1.0 and "reference:mismatch" in by_span["Sydney"].evidence
    assert "Australia" not in by_span and res.stats["prompt_copies"] >= 1  # copied from the question: no claim


@pytest.mark.parametrize("answer, slot", [
    ("The capital of Australia is Canberra, not Sydney.", "correct"),
    ("The capital of Australia is Sydney.", "wrong"),
    ("I am not sure which city that is.", None),  # names nothing: no slot to judge
    ("", None),
])
def test_the_answer_slot_judge_reads_the_references(offline, answer, slot):
    from spanuq.label.offline import answer_slot

    assert answer_slot(offline.nlp, answer, AUSTRALIA, offline.cfg) == slot
    no_refs = AUSTRALIA.model_copy(update={"references": []})
    assert answer_slot(offline.nlp, "The capital of Australia is Sydney.", no_refs, offline.cfg) is None


MENDEL = Prompt(id="gm", domain="triviaqa", text="Who discovered the laws of inheritance by breeding pea plants?",
                references=["Gregor Mendel", "Mendel"])
MAURITIUS = Prompt(id="mu", domain="triviaqa", text="What is the capital of Mauritius?", references=["Port Louis"])
BAGHDAD = Prompt(id="bg", domain="triviaqa", text="Which river flows through Baghdad?", references=["Tigris"])
KINSHASA = Prompt(id="ks", domain="triviaqa", text="On which river does Kinshasa stand?", references=["Congo River"])


@pytest.mark.parametrize("prompt, answer, slot, wrong_spans", [
    # wrong in the name, not in the nationality that describes it
    (MENDEL, "The laws of inheritance were discovered by the British scientist Charles Darwin in 1834.",
     "wrong", ["Charles Darwin"]),
    # a region where a capital was asked for: no capital named, right or wrong
    (MAURITIUS, "Mauritius is an island in the Indian Ocean, east of Madagascar.", "wrong", ["Madagascar"]),
    (MAURITIUS, "Mauritius is a French territory located in the Indian Ocean.", None, []),
    # a river is a region-kind answer where the question asks for one
    (KINSHASA, "Kinshasa stands on the Amazon River in South America.", "wrong", ["Amazon River", "South America"]),
    # the right answer named where the parser finds no entity: nothing in the answer is wrong
    (BAGHDAD, "The Tigris River, which originates in southern Iraq and flows through the city of Mosul, is long.",
     "correct", []),
])
def test_only_spans_of_the_kind_the_question_asks_for_are_its_answer_slot(offline, tok, prompt, answer, slot,
                                                                          wrong_spans):
    from spanuq.label.offline import answer_slot

    assert answer_slot(offline.nlp, answer, prompt, offline.cfg) == slot
    res = offline.label(generation(tok, prompt.id, answer, [answer] * 3), prompt)
    assert [answer[c.start:c.end] for c in res.claims if "reference:mismatch" in c.evidence] == wrong_spans


def test_a_span_copied_from_the_prompt_is_not_a_target(offline, tok):
    p = Prompt(id="mc", domain="biography", text="Who was Marie Curie?")
    g = generation(tok, "mc", "Marie Curie was a Polish physicist who won the Nobel Prize in 1903.",
                   ["Marie Curie was a Polish physicist.", "Marie Curie won the Nobel Prize in 1903."])
    res = offline.label(g, p)
    spans = [g.greedy.text[c.start:c.end] for c in res.claims]
    assert "Marie Curie" not in spans and "1903" in spans
    assert res.stats["prompt_copies"] == 1


def test_contradicting_samples_never_back_a_claim_offline(offline, tok):
    """Embedding similarity alone matched "capital is Sydney" with "capital is Canberra" (cosine 0.88)
    and "born in 1879" with "born in 1880" (0.94); key terms must agree first."""
    no_refs = Prompt(id="au2", domain="longform_qa", text="What is the capital of Australia?")
    g = generation(tok, "au2", "The capital of Australia is Sydney.", ["The capital of Australia is Canberra."] * 4)
    assert {g.greedy.text[c.start:c.end]: c.u for c in offline.label(g, no_refs).claims}["Sydney"] == 1.0
    einstein = Prompt(id="ae", domain="biography", text="Tell me a bio of Albert Einstein.")
    g = generation(tok, "ae", "Albert Einstein was born in 1879 in Ulm.", ["Albert Einstein was born in 1880 in Ulm."] * 4)
    by_span = {g.greedy.text[c.start:c.end]: c.u for c in offline.label(g, einstein).claims}
    assert by_span["1879"] == 1.0 and by_span["Ulm"] == 0.0


def test_a_truncated_sample_abstains_on_claims_it_never_reached(offline, tok):
    p = Prompt(id="al", domain="biography", text="Tell me a bio of Ada Lovelace.")
    greedy = "Ada Lovelace was born in 1815 in London. She later worked with Charles Babbage on his engine."
    full = "Ada Lovelace was born in 1815. She worked with Charles Babbage."
    cut = "Ada Lovelace was born in 1815."  # stopped by the token budget before any collaborator
    g = generation(tok, "al", greedy, [full, full, cut, cut], truncated=(2, 3))
    by_span = {g.greedy.text[c.start:c.end]: c for c in offline.label(g, p).claims}
    babbage = by_span["Charles Babbage"]
    assert babbage.u == 0.0 and len(babbage.support) == 2 and "abstained:2" in babbage.evidence
    assert len(by_span["1815"].support) == 4  # an early claim: every sample reached it
    # a sample that ends on its own is evidence: the same two short samples, not truncated, count against
    g2 = generation(tok, "al", greedy, [full, full, cut, cut])
    assert {g2.greedy.text[c.start:c.end]: c.u for c in offline.label(g2, p).claims}["Charles Babbage"] == 0.5


def test_a_sample_that_reaches_a_claim_is_never_an_abstention(offline, tok):
    """Cut off by the budget, but past the claim's position: the sample had room to say it and did
    not, so it votes against; one that says the claim votes for it however short it is."""
    p = Prompt(id="al", domain="biography", text="Tell me a bio of Ada Lovelace.")
    greedy = "Ada Lovelace was born in 1815 in London."
    reached = "Ada Lovelace was a poet born in Paris, where she wrote about engines and looms for years"
    says_it = "Born in London."
    g = generation(tok, "al", greedy, [reached, says_it, reached], truncated=(0, 1, 2))
    london = {g.greedy.text[c.start:c.end]: c for c in offline.label(g, p).claims}["London"]
    assert greedy.index("London") < len(reached)  # the cut samples ran past the claim
    assert london.support == [0.0, 1.0, 0.0] and not any(e.startswith("abstained") for e in london.evidence)
    assert london.u == pytest.approx(2 / 3)


def test_a_silent_sample_abstains_when_omissions_do_not_count_against(offline, tok):
    """`label.omission: abstain`: a sample that says nothing about a claim (no key term, no sentence
    near it) abstains; one that speaks of it with another value still votes against."""
    p = Prompt(id="al", domain="biography", text="Tell me a bio of Ada Lovelace.")
    greedy = "Ada Lovelace was born in 1815 in London."
    g = generation(tok, "al", greedy, ["Ada Lovelace was born in 1815 in London.",
                                       "Ada Lovelace was born in 1820 in London.",
                                       "Lovelace wrote the first published algorithm for an engine."])
    paper = {greedy[c.start:c.end]: c for c in offline.label(g, p).claims}["1815"]
    assert paper.support == [1.0, 0.0, 0.0]  # Eq. 11: silence counts against
    from spanuq.label.offline import OfflineLabeller

    abstain = OfflineLabeller(offline.cfg.model_copy(update={"omission": "abstain"}), offline.aligner, offline.nlp)
    year = {greedy[c.start:c.end]: c for c in abstain.label(g, p).claims}["1815"]
    assert year.support == [1.0, 0.0] and year.u == 0.5 and "abstained:1" in year.evidence


def test_the_tie_at_the_positive_threshold_counts_as_wrong(offline, tok):
    """u* = 0.5 (half the voters back the claim) is a positive, in the metrics and the label report."""
    from spanuq.metrics.uq import is_positive, negatives, span_metrics
    from spanuq.label.summary import label_report
    from spanuq.pipeline.records import SpanTarget

    assert is_positive(0.5) and not is_positive(0.4999) and is_positive(0.5, 0.5)
    m = span_metrics([0.5, 0.5, 0.0, 1.0], [0.9, 0.8, 0.1, 0.7])
    assert m["n_pos"] == 3 and negatives(m) == "1/4" and m["auroc"]["value"] == 1.0
    p = Prompt(id="al", domain="biography", text="Tell me a bio of Ada Lovelace.")
    g = generation(tok, "al", "Ada Lovelace was born in 1815.", ["She was born in 1815.", "She was born in 1820."])
    year = {g.greedy.text[c.start:c.end]: c for c in offline.label(g, p).claims}["1815"]
    assert year.u == 0.5  # one of two samples
    spans = [SpanTarget(claim_id="a", text="1815", char_start=0, char_end=4, tok_start=0, tok_end=0, u=year.u),
             SpanTarget(claim_id="b", text="x", char_start=5, char_end=6, tok_start=1, tok_end=1, u=0.2)]
    rec = LabeledResponse(prompt_id="al", domain="biography", split="train", response="x", n_tokens=2,
                          spans=spans, u_seq=0.35, status="ok")
    u = label_report([rec], [0.1, 0.4])["u"]
    assert u["below_threshold"] == 0.5 and u["at_threshold"] == 1


def truth_of(offline, tok, cases: list[tuple[Prompt, str, list[str]]]) -> dict:
    from spanuq.label.truth import truth_check

    rows = [t for p, greedy, samples in cases for t in offline.label(generation(tok, p.id, greedy, samples), p).truth]
    return truth_check(rows, bootstrap=0), rows


CAPITALS = [Prompt(id=c, domain="triviaqa", text=f"What is the capital of {c}?", references=[r])
            for c, r in [("Kenya", "Nairobi"), ("Peru", "Lima"), ("Norway", "Oslo"), ("Chile", "Santiago")]]


def test_the_truth_check_rewards_a_teacher_whose_u_tells_right_from_wrong(offline, tok):
    """Right answers the samples repeat, wrong answers they do not: u* (reference rule held out)
    ranks every wrong slot above every right one."""
    (kenya, peru, norway, chile) = CAPITALS
    check, rows = truth_of(offline, tok, [
        (kenya, "The capital of Kenya is Nairobi.", ["Nairobi is the capital of Kenya."] * 3),
        (peru, "The capital of Peru is Lima.", ["Lima.", "It is Lima.", "The capital is Cusco."]),
        (norway, "The capital of Norway is Bergen.", ["It is Oslo.", "Oslo.", "The capital is Trondheim."]),
        (chile, "The capital of Chile is Valparaíso.", ["Santiago.", "It is Santiago.", "Santiago, Chile."]),
    ])
    assert [(r["anchor"], r["slot"]) for r in rows] == [("Nairobi", "correct"), ("Lima", "correct"),
                                                         ("Bergen", "wrong"), ("Valparaíso", "wrong")]
    assert [r["u"] for r in rows] == pytest.approx([0.0, 1 / 3, 1.0, 1.0])
    assert check["auroc"]["value"] == 1.0 and (check["correct"], check["wrong"]) == (2, 2)
    assert check["u_wrong"]["below_threshold"] == 0.0 and check["u_correct"]["below_threshold"] == 1.0


def test_the_truth_check_is_not_set_by_the_reference_rule(offline, tok):
    """A model that repeats its wrong answers and wavers on its right ones: the training labels
    still mark the wrong slot u* = 1 (reference rule), but the check sees u* without the rule
    and reports the teacher's self-consistency as inverted (AUROC 0)."""
    (kenya, peru, norway, chile) = CAPITALS
    cases = [
        (kenya, "The capital of Kenya is Nairobi.", ["Mombasa.", "It is Mombasa.", "Kisumu."]),
        (peru, "The capital of Peru is Lima.", ["Cusco.", "It is Arequipa.", "Cusco, Peru."]),
        (norway, "The capital of Norway is Bergen.", ["Bergen."] * 3),
        (chile, "The capital of Chile is Valparaíso.", ["Valparaíso.", "It is Valparaíso.", "Valparaíso!"]),
    ]
    check, rows = truth_of(offline, tok, cases)
    assert check["auroc"]["value"] == 0.0
    bergen = offline.label(generation(tok, "Norway", *cases[2][1:]), norway).claims[0]
    assert bergen.u == 1.0 and "reference:mismatch" in bergen.evidence  # the label itself is the rule's


# ---------------------------------------------------------------- likelihood votes
@pytest.fixture(scope="module")
def likelihood():
    from spanuq.config import load_config
    from spanuq.label.likelihood import AnchorLikelihood

    return AnchorLikelihood(load_config(None))  # the real SmolLM2, loaded on first use


def asked(tok, prompt: Prompt, greedy: str, samples: list[str]) -> Generation:
    """A generation whose chat prompt is the one the backbone would have seen."""
    from spanuq.llm.loading import chat_prompt

    return generation(tok, prompt.id, greedy, samples).model_copy(update={"chat_prompt": chat_prompt(tok, prompt.text)})


def test_likelihood_votes_count_the_backbone_s_confidence_in_a_claim_as_pseudo_samples(offline, tok, likelihood):
    """u* = 1 − (Σ_s support_s + w·p̄)/(S + w): with samples that never name the capital, the
    vote alone calls "Canberra" and "Zanzibar" equally wrong; the backbone's own probability of
    each, where the answer said it, tells them apart."""
    from spanuq.label.offline import OfflineLabeller

    ask = Prompt(id="au-open", domain="custom", text="What is the capital of Australia?")
    quiet = ["I am not sure about that.", "Australia is a large country.", "It has many cities."]
    gens = {city: asked(tok, ask, f"The capital of Australia is {city}.", quiet) for city in ("Canberra", "Zanzibar")}
    plain = {c: offline.label(g, ask).claims for c, g in gens.items()}
    assert {c: [x.u for x in cl if x.text.endswith(c + ".")] for c, cl in plain.items()} == {
        "Canberra": [1.0], "Zanzibar": [1.0]}
    lab = OfflineLabeller(offline.cfg.model_copy(update={"likelihood_votes": 10.0}), offline.aligner, offline.nlp,
                          likelihood)
    u = {}
    for city, g in gens.items():
        (c,) = [c for c in lab.label(g, ask).claims if g.greedy.text[c.start:c.end] == city]
        (p_bar,) = likelihood.probs(g, [(c.start, c.end)])
        assert 0 < p_bar < 1 and c.likelihood == pytest.approx(p_bar)
        assert c.u == pytest.approx(1 - (sum(c.support) + 10 * p_bar) / (len(c.support) + 10))
        assert any(e.startswith("likelihood:") for e in c.evidence)
        u[city] = c.u
    assert u["Canberra"] < u["Zanzibar"] < 1.0


def test_a_wrong_slot_stays_wrong_and_the_truth_check_sees_the_likelihood_votes(offline, tok, likelihood):
    from spanuq.label.offline import OfflineLabeller

    lab = OfflineLabeller(offline.cfg.model_copy(update={"likelihood_votes": 10.0}), offline.aligner, offline.nlp,
                          likelihood)
    norway = CAPITALS[2]
    res = lab.label(asked(tok, norway, "The capital of Norway is Bergen.", ["Bergen."] * 3), norway)
    (bergen,) = [c for c in res.claims if "reference:mismatch" in c.evidence]
    assert bergen.u == 1.0 and bergen.likelihood is None  # the reference rule's label, whatever the model believed
    (row,) = res.truth  # held out: three votes for Bergen and the backbone's own belief in it
    assert row["slot"] == "wrong" and 0.0 < row["u"] < 1.0


def test_the_likelihood_pass_is_the_same_batched_or_alone(tok, likelihood):
    from spanuq.label.likelihood import AnchorLikelihood

    gens = [asked(tok, p, f"The capital of {p.id} is {p.references[0]}, a city of {n} people.", ["x"])
            for p, n in zip(CAPITALS, ("4 million", "10 million", "700,000", "6 million"))]
    likelihood.prefetch(gens, progress=False)  # one right-padded batch
    alone = AnchorLikelihood(likelihood.cfg)
    alone._model, alone._tok = likelihood._model, likelihood._tok
    for g in gens:
        span = [(g.greedy.text.index("is ") + 3, len(g.greedy.text))]
        assert alone.probs(g, span) == pytest.approx(likelihood.probs(g, span), rel=1e-5)


def test_without_references_labels_are_self_consistency(offline, tok):
    p = Prompt(id="b", domain="biography", text="Tell me a bio of Ada Lovelace.")
    g = generation(tok, "b", "Ada Lovelace was born in 1815 in London.", [
        "Ada Lovelace was born in 1815.", "Ada Lovelace, born in 1815, was a mathematician.",
        "Ada Lovelace was born in 1820 in Paris.", "Born in 1815, Ada Lovelace wrote about the engine."])
    by_span = {g.greedy.text[c.start:c.end]: c.u for c in offline.label(g, p).claims}
    assert by_span["1815"] < by_span["London"]  # 3/4 samples repeat the year, none the city
    assert by_span["London"] == 1.0


def test_a_sample_read_as_an_answer_is_labelled_against_the_greedy_answer_and_the_other_samples(offline, tok):
    from spanuq.label.sample_answers import parse, sample_answer, sample_answers

    p = Prompt(id="b", domain="biography", text="Tell me a bio of Ada Lovelace.")
    g = generation(tok, "b", "Ada Lovelace was born in 1815 in London.", [
        "Ada Lovelace was born in 1820 in Paris.",           # 0: a sample that disagrees
        "Ada Lovelace was born in 1815 in London.",          # 1: the greedy answer again: not a new answer
        "Ada Lovelace was born in 1815, in London I think",  # 2: cut off by its budget
        "Ada Lovelace, born in 1815, was a mathematician.",  # 3
    ], truncated=(2,))
    kids = sample_answers(g, 5)
    assert [parse(k.prompt_id) for k in kids] == [("b", 0), ("b", 3)]  # stopped, new, non-empty samples only
    paris = sample_answer(g, 0)
    assert paris.greedy.text == g.samples[0].text and len(paris.samples) == len(g.samples)
    assert paris.samples[0].text == g.greedy.text  # the greedy answer votes, the answer itself does not
    by_span = {paris.greedy.text[c.start:c.end]: c for c in offline.label(paris, p).claims}
    # voters: greedy (1815, London), 1 (1815, London), 2 (cut off: 1815, London), 3 (1815): none says 1820 or Paris
    assert by_span["1820"].u == 1.0 and by_span["Paris"].u == 1.0
    assert len(by_span["1820"].support) == len(g.samples)
    # sample 3's year: the greedy answer and samples 1, 2 back it, sample 0 says 1820
    year = {kids[1].greedy.text[c.start:c.end]: c.u for c in offline.label(kids[1], p).claims}["1815"]
    assert year == pytest.approx(1 / 4)


def test_empty_and_claimless_answers_are_recorded_with_a_status(offline, tok):
    assert offline.label(generation(tok, "au", "", ["Canberra."]), AUSTRALIA).status == "empty"
    assert offline.label(generation(tok, "au", "Hmm, okay!", ["Canberra."]), AUSTRALIA).status == "no_claims"


# ---------------------------------------------------------------- the label stage
PROMPTS = [
    AUSTRALIA,
    Prompt(id="fr", domain="longform_qa", text="What is the capital of France?", references=["Paris"]),
    Prompt(id="ww", domain="longform_qa", text="When did World War II end?", references=["1945"]),
    Prompt(id="bio", domain="biography", text="Tell me a bio of Ada Lovelace."),
    Prompt(id="empty", domain="eli5", text="Why is the sky blue?"),
    Prompt(id="none", domain="eli5", text="Say something."),
    Prompt(id="es", domain="custom", text="¿Cuál es la capital de España?", references=["Madrid"]),
]


def write_inputs(cfg, tok):
    paths = StagePaths.from_config(cfg)
    gens = [
        generation(tok, "au", "The capital of Australia is Sydney.", ["Canberra.", "Sydney is the capital."]),
        generation(tok, "fr", "The capital of France is Paris.", ["Paris.", "The capital of France is Paris."]),
        generation(tok, "ww", "World War II ended in 1945 in Europe.", ["It ended in 1945.", "In 1944."]),
        generation(tok, "bio", "Ada Lovelace was an English mathematician born in 1815.",
                   ["Ada Lovelace, born in 1815, was a mathematician.", "Ada Lovelace was a French poet."]),
        generation(tok, "empty", "", ["Rayleigh scattering.", "Because of Rayleigh scattering."]),
        generation(tok, "none", "Hmm, okay!", ["Hello.", "Okay."]),
        generation(tok, "es", "La capital de España es Madrid.", ["Madrid.", "Es Madrid."]),
    ]
    write_jsonl(paths.prompts, PROMPTS)
    write_jsonl(paths.generations, gens)
    return paths


def test_label_stage_writes_labels_report_and_plot_and_resumes(make_cfg, tok):
    from spanuq.label.stage import run_label

    cfg = make_cfg("label.sample_answers=0")  # the greedy answers alone (sample answers: the test below)
    paths = write_inputs(cfg, tok)
    run_label(cfg, progress=False)
    recs = {r.prompt_id: r for r in read_records(paths.labels, LabeledResponse)}
    assert recs["empty"].status == "empty" and recs["none"].status == "no_claims"
    assert recs["empty"].u_seq is None and recs["empty"].spans == []
    au = recs["au"]
    assert au.status == "ok" and au.n_tokens > 0 and au.u_seq == pytest.approx(sum(s.u for s in au.spans) / len(au.spans))
    assert {r.split for r in recs.values()} <= {"train", "dev", "test"}
    report = json.loads(paths.label_report.read_text())
    assert report["responses"] == 7 and report["status"]["ok"] == 5 and report["spans"] == sum(len(r.spans) for r in recs.values())
    assert sum(report["u"]["histogram"]["counts"]) == report["spans"]
    assert json.loads(paths.run_log("label").read_text())["cache"]["misses"] == 7  # how the run went: its log
    assert (paths.label_plots / "labels.png").stat().st_size > 1000
    # the truth check: one answer slot per factoid answer with references (Sydney wrong; Paris, 1945 right)
    truth = report["truth"]
    assert (truth["correct"], truth["wrong"]) == (2, 1) and truth["auroc"]["value"] is not None
    assert (paths.label_plots / "truth.png").stat().st_size > 1000
    assert 0 <= report["u"]["below_threshold"] <= 1
    claims = read_records(paths.claims, Claim)
    assert len(claims) >= report["spans"]
    # a re-run labels nothing again and gives the same labels
    before = paths.labels.read_text()
    run_label(cfg, progress=False)
    assert json.loads(paths.run_log("label").read_text())["cache"] == {"hits": 7, "misses": 0}
    assert paths.labels.read_text() == before
    assert json.loads(paths.label_report.read_text()) == report  # the same inputs, the same report


def test_sample_answers_join_training_only_from_training_prompts(make_cfg, tok):
    from spanuq.label.answer_ids import is_given
    from spanuq.label.sample_answers import parent_id, parse, read_answers
    from spanuq.label.stage import run_label

    cfg = make_cfg("label.sample_answers=1", "prompts.split_by=prompts")
    paths = write_inputs(cfg, tok)
    held_out = {"fr": "test", "ww": "dev"}
    write_jsonl(paths.prompts, [p.model_copy(update={"split": held_out.get(p.id, "train")}) for p in PROMPTS])
    run_label(cfg, progress=False)
    recs = {r.prompt_id: r for r in read_records(paths.labels, LabeledResponse)}
    kids = {k: r for k, r in recs.items() if parent_id(k) != k and not is_given(k)}  # given answers: dev's
    assert kids and {r.split for r in kids.values()} == {"train"}
    parents = {parent_id(k) for k in kids}
    assert parents <= {"au", "bio", "es", "empty", "none"}  # training prompts only, none of dev/test
    assert len(kids) == len(parents)  # one sample each
    report = json.loads(paths.label_report.read_text())
    assert report["responses"] == len(PROMPTS)  # the run's own answers; the sample answers apart
    assert report["sample_answers"]["answers"] == len(kids)
    assert report["sample_answers"]["spans"] == sum(len(r.spans) for r in kids.values())
    # the stages after `label` read them rebuilt from their prompt's record, with the greedy answer voting
    answers = {g.prompt_id: g for g in read_answers(paths.generations, paths.labels)}
    gens = {g.prompt_id: g for g in read_records(paths.generations, Generation)}
    for k, r in kids.items():
        g, i = gens[parent_id(k)], parse(k)[1]
        assert answers[k].greedy.text == g.samples[i].text == r.response
        assert answers[k].samples[0].text == g.greedy.text
    from spanuq.baselines.context import AnswerContext

    ctx = AnswerContext.from_files(paths.generations, paths.labels, paths.claims).answers
    assert all(ctx[k].answer == r.response and ctx[k].question == gens[parent_id(k)].prompt_text
               for k, r in kids.items())
    # switching it off labels the same greedy answers from the cache and drops the sample answers
    before = {k: r for k, r in recs.items() if k not in kids}
    run_label(make_cfg("prompts.split_by=prompts", "label.sample_answers=0"), progress=False)
    again = {r.prompt_id: r for r in read_records(paths.labels, LabeledResponse)}
    assert again == before
    assert json.loads(paths.run_log("label").read_text())["cache"]["misses"] == 0


# ---------------------------------------------------------------- the judge path
def judge_cfg(make_cfg, url: str, *more: str):
    """The judge on the run's own answers (the scripted judge's counts are of them: no sample answers)."""
    return make_cfg("label.method=judge", f"label.judge.base_url={url}", "label.judge.backoff_s=0.01",
                    "label.judge.max_retries=2", "label.judge.concurrency=2", "label.sample_answers=0", *more)


def test_judge_labels_spans_from_verified_sample_claims(make_cfg, tok):
    from spanuq.label.stage import run_label

    with ScriptedJudge(truths=("Paris", "1945")) as server:
        cfg = judge_cfg(make_cfg, server.base_url)
        paths = write_inputs(cfg, tok)
        run_label(cfg, progress=False)
        n_calls = len(server.requests)
    recs = {r.prompt_id: r for r in read_records(paths.labels, LabeledResponse)}
    paris = {s.text: s.u for s in recs["fr"].spans}
    assert paris["Paris"] == 0.0  # both samples make the claim and it is verified supported
    ww = {s.text: s.u for s in recs["ww"].spans}
    assert ww["1945"] == 0.5  # sample 2 says 1944: no equivalent claim there
    run = json.loads(paths.run_log("label").read_text())
    assert run["judge"]["calls"] == n_calls and run["judge"]["requests"] <= n_calls
    # the second run is served from the judge cache and the label cache: zero calls
    with ScriptedJudge() as server:
        run_label(judge_cfg(make_cfg, server.base_url), progress=False)
        assert server.requests == []


def test_contradicting_sample_claims_never_back_a_judged_claim(make_cfg, tok):
    """With the scripted judge, greedy "Sydney" used to inherit support from samples saying
    "Canberra" (u* 0.5): the embedding alignment now needs the key terms to agree."""
    from spanuq.label.stage import run_label

    cfg = None
    with ScriptedJudge(truths=("Canberra", "1880", "Einstein", "Ulm")) as server:
        cfg = judge_cfg(make_cfg, server.base_url)
        paths = StagePaths.from_config(cfg)
        prompts = [Prompt(id="au2", domain="longform_qa", text="What is the capital of Australia?"),
                   Prompt(id="ae", domain="biography", text="Tell me a bio of Albert Einstein.")]
        gens = [generation(tok, "au2", "The capital of Australia is Sydney.", ["The capital of Australia is Canberra."] * 3),
                generation(tok, "ae", "Einstein was born in 1879 in Ulm.", ["Einstein was born in 1880 in Ulm."] * 3)]
        write_jsonl(paths.prompts, prompts)
        write_jsonl(paths.generations, gens)
        run_label(cfg, progress=False)
    recs = {r.prompt_id: {s.text: s.u for s in r.spans} for r in read_records(paths.labels, LabeledResponse)}
    assert recs["au2"]["Sydney"] == 1.0 and "Australia" not in recs["au2"]
    assert recs["ae"]["1879"] == 1.0 and recs["ae"]["Ulm"] == 0.0


def test_a_judge_outage_is_never_cached_and_the_next_run_labels_what_failed(make_cfg, tok):
    from spanuq.label.stage import LabelFailures, run_label

    with ScriptedJudge() as server:
        cfg = judge_cfg(make_cfg, server.base_url)
        paths = write_inputs(cfg, tok)
        server.down = 503  # every request: 503 until the client's retries run out
        with pytest.raises(LabelFailures, match=r"6 of 7 answers could not be labelled .*re-run"):
            run_label(cfg, progress=False)
    with ScriptedJudge() as server:  # healthy again
        run_label(judge_cfg(make_cfg, server.base_url), progress=False)
    report = json.loads(paths.label_report.read_text())
    assert json.loads(paths.run_log("label").read_text())["cache"] == {"hits": 1, "misses": 6}  # only the empty answer was labelled (and cached) before
    assert report["status"].get("error", 0) == 0 and report["status"]["ok"] >= 4


def test_a_reply_that_is_not_json_is_a_clear_error_not_a_traceback(make_cfg, tok):
    from spanuq.label.stage import LabelFailures, run_label

    with ScriptedJudge() as server:
        cfg = judge_cfg(make_cfg, server.base_url, "label.judge.concurrency=1", "label.judge.max_retries=1")
        paths = write_inputs(cfg, tok)
        write_jsonl(paths.generations, read_records(paths.generations, Generation)[:1])
        server.script = [b"<html>502 Bad Gateway</html>"] * 2
        with pytest.raises(LabelFailures, match="not JSON"):
            run_label(cfg, progress=False)


def test_a_cut_off_claim_list_is_asked_again_with_a_larger_budget_or_by_sentence(make_cfg, tok):
    from spanuq.label.stage import run_label

    with ScriptedJudge() as server:
        cfg = judge_cfg(make_cfg, server.base_url, "label.judge.max_tokens=256", "label.judge.max_tokens_cap=1024")
        paths = write_inputs(cfg, tok)
        server.min_tokens = 1024  # cut off at 256 and 512, complete at 1024
        run_label(cfg, progress=False)
        budgets = sorted({r["payload"]["max_tokens"] for r in server.requests})
    report = json.loads(paths.label_report.read_text())
    judge = json.loads(paths.run_log("label").read_text())["judge"]
    assert budgets[:3] == [256, 512, 1024] and judge["truncated"] > 0
    assert judge["truncated_failures"] == 0 and report["status"].get("error", 0) == 0
    with ScriptedJudge() as server:  # a long answer that no budget fits is decomposed sentence by sentence
        cfg = judge_cfg(make_cfg, server.base_url, "label.judge.model=other")
        write_jsonl(paths.generations, [generation(tok, "bio", "Ada Lovelace was born in London in 1815. "
                                                   "She worked with Charles Babbage.", ["Ada Lovelace, 1815."])])
        server.truncate_over = 45
        run_label(cfg, progress=False)
    rec = read_records(paths.labels, LabeledResponse)[0]
    assert rec.status == "ok" and {"London", "Babbage"} <= {s.text for s in rec.spans}
    assert json.loads(paths.label_report.read_text())["labeller"]["decompose_by_sentence"] == 1


def test_a_judge_that_returns_garbage_is_asked_again_then_recorded_as_a_failure(make_cfg, tok):
    from spanuq.label.stage import run_label

    with ScriptedJudge() as server:
        cfg = judge_cfg(make_cfg, server.base_url, "label.judge.max_format_retries=2", "label.judge.concurrency=1")
        paths = write_inputs(cfg, tok)
        server.script = ["Sure! Here are the claims: Sydney", '{"claims": [{"claim": 3}]}', "```json\n{oops"]
        run_label(cfg, progress=False)
        retry = server.requests[1]["payload"]["messages"]
    assert "not valid" in retry[-1]["content"] and retry[-2]["content"].startswith("Sure!")  # error fed back
    recs = {r.prompt_id: r for r in read_records(paths.labels, LabeledResponse)}
    failed = [r for r in recs.values() if r.status == "error"]
    assert len(failed) == 1 and "decomposition failed" in failed[0].error
    report = json.loads(paths.label_report.read_text())
    judge = json.loads(paths.run_log("label").read_text())["judge"]
    assert judge["format_failures"] == 1 and judge["format_errors"] == 3
    assert report["status"]["ok"] >= 4  # the rest of the batch is labelled


def test_rate_limits_and_server_errors_are_retried_with_backoff(make_cfg, tok):
    from spanuq.label.stage import run_label

    with ScriptedJudge() as server:
        cfg = judge_cfg(make_cfg, server.base_url, "label.judge.concurrency=1", "label.judge.max_retries=4")
        paths = write_inputs(cfg, tok)
        server.script = [429, 503, 429]
        run_label(cfg, progress=False)
    report = json.loads(paths.label_report.read_text())
    judge = json.loads(paths.run_log("label").read_text())["judge"]
    assert judge["http_retries"] == 3 and judge["http_failures"] == 0
    assert report["status"].get("error", 0) == 0


def test_a_judge_that_goes_down_stops_the_stage_clearly_and_loses_nothing(make_cfg, tok):
    from spanuq.label.stage import run_label

    cfg0 = make_cfg()
    paths = write_inputs(cfg0, tok)
    gens = read_records(paths.generations, Generation)
    with ScriptedJudge() as server:
        cfg = judge_cfg(make_cfg, server.base_url)
        write_jsonl(paths.generations, gens[:3])  # the judge labels three answers, then goes away
        run_label(cfg, progress=False)
    write_jsonl(paths.generations, gens)
    with pytest.raises(RuntimeError, match=r"3 of 7 answers are labelled and cached"):
        run_label(cfg, progress=False)
    with ScriptedJudge() as server:  # back up (another port): only the missing four are labelled
        run_label(judge_cfg(make_cfg, server.base_url), progress=False)
        asked = {json.dumps(r["payload"]["messages"]) for r in server.requests}
    assert json.loads(paths.run_log("label").read_text())["cache"] == {"hits": 3, "misses": 4}
    assert not any("Sydney is the capital" in a for a in asked)  # answer 1 was not asked again


def test_the_api_key_comes_from_the_environment_and_is_never_written(make_cfg, tok, monkeypatch, tmp_path):
    from spanuq.label.stage import run_label

    monkeypatch.setenv("SPANUQ_TEST_JUDGE_KEY", "sk-test-4f9a1c")
    with ScriptedJudge() as server:
        cfg = judge_cfg(make_cfg, server.base_url, "label.judge.api_key_env=SPANUQ_TEST_JUDGE_KEY")
        write_inputs(cfg, tok)
        run_label(cfg, progress=False)
        assert {r["auth"] for r in server.requests} == {"Bearer sk-test-4f9a1c"}
    for f in tmp_path.rglob("*"):
        if f.is_file() and f.suffix in (".json", ".jsonl", ".yaml", ".log", ".txt"):
            assert "sk-test-4f9a1c" not in f.read_text(errors="ignore"), f
    monkeypatch.delenv("SPANUQ_TEST_JUDGE_KEY")
    with pytest.raises(Exception, match="SPANUQ_TEST_JUDGE_KEY"):
        run_label(judge_cfg(make_cfg, "http://127.0.0.1:9/v1", "label.judge.api_key_env=SPANUQ_TEST_JUDGE_KEY",
                            "label.judge.model=other"), progress=False)


# ---------------------------------------------------------------- the real llama.cpp judge
@pytest.mark.server
def test_judge_plumbing_against_the_real_llama_cpp_server(llama_server, make_cfg, tok, tmp_path):
    """SmolLM2 is a poor judge; this checks the plumbing: grammar-constrained JSON validated
    against the schema, spans anchored (or repaired / dropped), verdicts, and a second run
    served entirely from the cache."""
    from spanuq.label.stage import run_label

    corpus = tmp_path / "corpus.jsonl"
    write_jsonl(corpus, [{"id": "w1", "title": "Paris", "text": "Paris is the capital and largest city of France."},
                         {"id": "w2", "title": "World War II", "text": "World War II ended in 1945."},
                         {"id": "w3", "title": "Canberra", "text": "Canberra is the capital city of Australia."}])
    cfg = judge_cfg(make_cfg, llama_server.base_url, "label.judge.response_format=json_object+schema",
                    "label.judge.max_tokens=256", "label.judge.max_tokens_cap=512", "label.judge.timeout_s=600",
                    "label.judge.concurrency=1", f"label.corpus={corpus}")
    paths = write_inputs(cfg, tok)
    gens = read_records(paths.generations, Generation)
    write_jsonl(paths.generations, gens[:2])
    from spanuq.label.stage import run_index

    run_index(cfg, progress=False)
    label_tolerating_no_labels(cfg)
    report = json.loads(paths.label_report.read_text())
    j = json.loads(paths.run_log("label").read_text())["judge"]
    assert j["requests"] + j["cache_hits"] >= 2 * 3 and j["calls"] >= j["requests"]  # 2 x (greedy + 2 samples)
    assert j["format_failures"] <= j["requests"] // 2  # grammar-constrained JSON mostly validates
    assert report["labeller"]["dropped"] + report["claims"] > 0  # spans were anchored or dropped
    for r in read_records(paths.labels, LabeledResponse):
        for s in r.spans:  # every kept span is a real piece of the answer
            assert r.response[s.char_start:s.char_end] == s.text and 0 <= s.tok_start <= s.tok_end < r.n_tokens
            assert 0.0 <= s.u <= 1.0
    # second run: zero calls, all from the cache
    label_tolerating_no_labels(cfg)
    run2 = json.loads(paths.run_log("label").read_text())
    assert run2["cache"]["misses"] == 0 and run2["judge"]["calls"] == 0


def label_tolerating_no_labels(cfg):
    """SmolLM2 as a judge often copies the prompt's example instead of the answer's words, so
    every span may be dropped; the stage then stops with this error, after writing its report."""
    from spanuq.label.stage import run_label

    try:
        run_label(cfg, progress=False)
    except ValueError as e:
        assert "no answer got a label" in str(e)


def test_given_answers_swap_the_answer_slot_and_template_it_for_train_and_dev_prompts(make_cfg, tok):
    from spanuq.label.answer_ids import is_given, parent_id
    from spanuq.label.sample_answers import read_answers
    from spanuq.label.stage import run_label

    cfg = make_cfg("label.given_swaps=true", "label.given_templates=1", "label.given_splits=[train,dev]",
                   "prompts.split_by=prompts")
    paths = write_inputs(cfg, tok)
    more = [Prompt(id="de", domain="triviaqa", text="What is the capital of Germany?", references=["Berlin"]),
            Prompt(id="it", domain="triviaqa", text="What is the capital of Italy?", references=["Rome"])]
    splits = {"fr": "dev", "de": "dev", "ww": "test"}  # wrong values come from answers of the same split
    write_jsonl(paths.prompts, [p.model_copy(update={"split": splits.get(p.id, "train")}) for p in PROMPTS + more])
    write_jsonl(paths.generations, read_records(paths.generations, Generation) + [
        generation(tok, "de", "The capital of Germany is Berlin.", ["Berlin.", "It is Berlin."]),
        generation(tok, "it", "Rome is the capital of Italy.", ["Rome.", "It is Rome."])])
    run_label(cfg, progress=False)
    recs = {r.prompt_id: r for r in read_records(paths.labels, LabeledResponse)}
    given = {k: r for k, r in recs.items() if is_given(k)}
    assert {parent_id(k) for k in given} == {"au", "fr", "de", "it"}  # factoid train/dev prompts; never a test one
    assert all(r.split == recs[parent_id(k)].split for k, r in given.items())
    # "Sydney" (wrong) becomes the reference with u* = 0; "Paris" (right) becomes a planted city with u* = 1
    au, fr = given["au@given-swap"], given["fr@given-swap"]
    assert "Canberra" in au.response and "Sydney" not in au.response
    assert {s.text: s.u for s in au.spans}["Canberra"] == 0.0
    planted = [s for s in fr.spans if s.u == 1.0]
    assert len(planted) == 1 and "Paris" not in fr.response and planted[0].text == "Berlin"
    # templated twins: the reference at u* = 0, a wrong value at u* = 1, the slot their only span
    right, wrong = given["fr@given-t0r"], given["fr@given-t0w"]
    assert [s.u for s in right.spans] == [0.0] and right.spans[0].text == "Paris"
    assert [s.u for s in wrong.spans] == [1.0] and wrong.spans[0].text != "Paris"
    assert json.loads(paths.label_report.read_text())["given_answers"]["dev"]["templated"]["answers"] == 4
    # the stages after `label` read them as given answers of their prompt, with their own tokens
    answers = {g.prompt_id: g for g in read_answers(paths.generations, paths.labels)}
    assert answers["au@given-swap"].answer_given and answers["au@given-swap"].greedy.text == au.response
    assert answers["au@given-swap"].greedy.token_ids == au.token_ids
    assert answers["au@given-swap"].chat_prompt == answers["au"].chat_prompt


def test_a_given_answer_id_says_how_the_answer_was_made():
    from spanuq.label.answer_ids import answer_id, given_kind

    assert given_kind(answer_id("p7", "swap")) == "swap"
    assert given_kind(answer_id("p7", "t0r")) == given_kind(answer_id("p7", "t1w")) == "template"
    assert given_kind("p7") is None and given_kind("p7@sample2") is None
