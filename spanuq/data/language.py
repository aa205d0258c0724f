"""Which language a text is in, for the one question SpanUQ asks of it: is this clearly *not* a
language the probe was trained on?

The probe was trained on English answers of an English backbone, labelled by an English teacher
(spaCy's English claims), so its û on a French or Chinese answer is a number from outside its
training.  `other_language` names such an answer's language so the caller can say so; it never
guesses on text too short to tell.

The identifier is py3langid (langid.py's naive Bayes over byte n-grams; its 0.4 model tells 140
languages apart and is an npz file, loaded without pickle).  A text is *clearly other* when it has
at least ``MIN_LETTERS`` letters and the identifier gives the expected languages together a probability
below ``MAX_P_EXPECTED``: the rule `experiments/language_rule.py` chose on this project's English
texts and answers in other languages (its figures are in docs/results.md).  A higher bound flags
long English names; a lower one misses short answers in other languages.  The identifier's
varieties count as their macrolanguage (``languages.tsv``): standard written Chinese that it
puts nearer Wu is Chinese.  Because the rule can still be wrong on English that quotes another
script, callers warn rather than refuse.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import regex

MIN_LETTERS = 20  # below this the identifier's probabilities are close to its priors
MAX_P_EXPECTED = 0.001
MAX_CHARS = 20_000  # the identifier reads at most this many characters of a long text
_LETTER = regex.compile(r"\p{L}")
_NAMES = Path(__file__).with_name("languages.tsv")


@dataclass(frozen=True)
class LanguageGuess:
    code: str  # the identifier's most probable language (ISO 639-1, else 639-3)
    p: float  # its probability
    p_expected: float  # the expected languages' probability together

    @property
    def name(self) -> str:
        return language_name(self.code)


@lru_cache(maxsize=1)
def _identifier():
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def _rows() -> list[list[str]]:
    with _NAMES.open(encoding="utf-8") as f:
        return [row for row in csv.reader(f, delimiter="\t") if row and not row[0].startswith("#")]


@lru_cache(maxsize=1)
def _names() -> dict[str, str]:
    return {row[0]: row[1] for row in _rows()}


@lru_cache(maxsize=1)
def _macro() -> dict[str, str]:
    """A variety's macrolanguage (``wuu`` → ``zh``): the identifier's varieties are reported as it."""
    return {row[0]: row[2] for row in _rows() if len(row) > 2 and row[2]}


def macrolanguage(code: str) -> str:
    """``"wuu"`` → ``"zh"``; a code without a macrolanguage is returned as it is."""
    return _macro().get(code, code)


def language_name(code: str) -> str:
    """``"fr"`` → ``"French"``; an unknown code is returned as it is."""
    return _names().get(code, code)


def letters(text: str) -> int:
    """How many letters (Unicode category L: a CJK character is one) ``text`` has."""
    return len(_LETTER.findall(text[:MAX_CHARS]))


def guess_language(text: str, expected: tuple[str, ...] = ("en",), min_letters: int = MIN_LETTERS
                   ) -> LanguageGuess | None:
    """The identifier's guess, or None when ``text`` has fewer than ``min_letters`` letters."""
    text = text[:MAX_CHARS]
    if letters(text) < min_letters:
        return None
    probs: dict[str, float] = {}
    for c, p in _identifier().rank(text):  # a variety's probability counts for its macrolanguage
        probs[macrolanguage(c)] = probs.get(macrolanguage(c), 0.0) + float(p)
    code = max(probs, key=probs.get)
    expected = tuple(dict.fromkeys(macrolanguage(c) for c in expected))
    return LanguageGuess(code, float(probs[code]), float(sum(probs.get(c, 0.0) for c in expected)))


def other_language(text: str, expected: tuple[str, ...] = ("en",)) -> LanguageGuess | None:
    """The guess when ``text`` is clearly in none of the ``expected`` languages, else None."""
    guess = guess_language(text, expected)
    return guess if guess is not None and guess.p_expected < MAX_P_EXPECTED else None


def language_warnings(answer: str, expected: list[str] | tuple[str, ...] | None) -> list[str]:
    """What a scored answer clearly in none of the ``expected`` languages says beside its scores
    (``score.languages``; none or empty: no check)."""
    guess = other_language(answer, tuple(expected)) if expected else None
    if guess is None:
        return []
    names = " / ".join(language_name(c) for c in expected)
    return [f"the answer looks like {guess.name} ({guess.code}), not {names}: this probe was trained on {names} "
            f"answers, so its scores here come from outside its training (score.languages)"]
