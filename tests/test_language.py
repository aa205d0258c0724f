"""An answer in a language the probe was not trained on is scored, and the result says so."""
import json
from pathlib import Path

import pytest

from spanuq.data.language import guess_language, language_name, language_warnings, other_language
from spanuq.data.prompts import prompts_report
from spanuq.config import PromptsConfig
from spanuq.pipeline.records import Prompt
from spanuq.score.views import fragment, terminal_view

OTHER = [line.rstrip("\n").split("\t", 1)
         for line in (Path(__file__).parent / "fixtures" / "other_languages.tsv").open(encoding="utf-8")
         if not line.startswith("#")]
ENGLISH = [
    "Friedrich Georg Wilhelm Friedrich Nietzsche was a German philosopher born in Röcken in 1844.",
    "Der Spiegel is a German weekly news magazine published in Hamburg.",
    "The capital of Kazakhstan is Astana (Астана), formerly known as Nur-Sultan.",
    "Marie Curie was a Polish–French physicist; she called polonium after Poland (Polska).",
]


@pytest.mark.parametrize("code, text", OTHER, ids=[c for c, _ in OTHER])
def test_an_answer_in_another_language_is_named(code, text):
    guess = other_language(text)
    assert guess is not None and guess.p_expected < 0.001
    assert guess.name == language_name(code) and guess.code == code


@pytest.mark.parametrize("text", ["玛丽·居里（1867年—1934年）是波兰裔法国籍物理学家、化学家。",
                                  "居里夫人在1903年获得诺贝尔物理学奖，1911年获得诺贝尔化学奖。"])
def test_mandarin_is_named_chinese_not_one_of_its_varieties(text):
    """The identifier's Chinese varieties (Wu, Cantonese) count as Chinese (languages.tsv's macrolanguage
    column): standard written Chinese that it puts nearer Wu is reported as Chinese (zh)."""
    guess = other_language(text)
    assert (guess.code, guess.name) == ("zh", "Chinese")
    assert "looks like Chinese (zh), not English" in language_warnings(text, ["en"])[0]
    assert other_language(text, expected=("en", "zh")) is None  # and Chinese allowed means all of it


@pytest.mark.parametrize("text", ENGLISH)
def test_english_with_foreign_names_and_scripts_is_english(text):
    assert guess_language(text) is not None  # long enough to be judged (its top guess may be German:
    assert other_language(text) is None  # what counts is how likely English is, not which language wins)


def test_too_short_to_tell_is_not_judged():
    assert guess_language("Qui était Marie Curie ?") is None  # 18 letters
    assert other_language("玛丽·居里是谁？") is None
    assert other_language(OTHER[0][1], expected=("en", "fr")) is None  # French is allowed here


def test_the_score_of_a_french_answer_carries_a_warning(scorer):
    french = scorer.score("Qui était Marie Curie ?", response=OTHER[0][1])
    assert french.spans  # scored all the same: nothing is lost
    [warning] = french.warnings
    assert "French (fr)" in warning and "trained on English" in warning
    assert french.status == "unverified" and french.status_reasons[0].code == "language"  # not judged: says so
    assert f"unverified (language): {warning}" in terminal_view(french, colour_on=False)
    assert 'class="uq-warning uq-unverified"' in fragment(french)
    assert json.loads(french.model_dump_json())["warnings"] == [warning]
    english = scorer.score("Who was Nietzsche?", response=ENGLISH[0])
    assert english.warnings == [] and "warning" not in terminal_view(english, colour_on=False)


def test_the_check_follows_score_languages(scorer):
    languages = scorer.cfg.score.languages
    try:
        scorer.cfg.score.languages = ["en", "fr"]
        assert scorer.score("Qui était Marie Curie ?", response=OTHER[0][1]).warnings == []
        scorer.cfg.score.languages = None
        assert scorer.score("Wer war Marie Curie?", response=OTHER[2][1]).warnings == []
    finally:
        scorer.cfg.score.languages = languages


def test_the_prompts_report_lists_prompts_in_other_languages():
    prompts = [Prompt(id=f"file-{i}", domain="custom", text=t) for i, t in enumerate(
        ["Who wrote the opera Carmen, and when was it first performed?", OTHER[0][1], OTHER[1][1], OTHER[2][1],
         "Wer?"])]
    prompts.append(Prompt(id="file-5", text="Who?", response=OTHER[3][1]))  # another system's answer, in German
    prompts.append(Prompt(id="file-6", text="Who?", response=ENGLISH[1]))
    report = prompts_report(prompts, PromptsConfig(source="file", file="own.jsonl"))
    assert report["other_languages"] == {"fr": ["file-1", "file-2"], "de": ["file-3", "file-5"]}
