"""Write the word lists the bundled set's alias checks read (``spanuq/data/bundled/wordlists``).

* ``common_words.txt`` — common English words: the lower-case entries of the
  Debian ``wamerican`` dictionary (``/usr/share/dict/american-english``; proper names
  there are capitalised, so "bolivia" is not a word but "turkey" is) whose Zipf
  frequency (``wordfreq``) is at least 3.5, i.e. more than ~3 per million words.
  An alias that is one of these ("Bell", "Wood", "won") matches ordinary prose.
* ``currency_units.txt`` — currency unit words shared by two or more ISO 4217
  currencies (``pycountry``): "dollar", "peso", "krone", "won"...  An alias that is
  one of these names no country.
* ``function_words.txt`` — spaCy's English stop words that are not number words: the
  words a shown span does not start or end with (`spanuq.model.postprocess.function_words`),
  read from the file so that scoring needs no spaCy.

The lists are committed so the generator is deterministic and needs none of these
packages; re-run this only to refresh them (in any venv)::

    apt-get install wamerican && pip install wordfreq pycountry spacy
    python scripts/make_word_lists.py
"""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "spanuq" / "data" / "bundled" / "wordlists"
MIN_ZIPF = 3.5
DICTIONARY = Path("/usr/share/dict/american-english")
# ISO 4217 codes that are not a country's money: metals, bond units, SDR, test and "no currency" codes
NOT_MONEY = {"XAU", "XAG", "XPT", "XPD", "XBA", "XBB", "XBC", "XBD", "XDR", "XSU", "XUA", "XTS", "XXX"}


def common_words() -> list[str]:
    from wordfreq import zipf_frequency

    if not DICTIONARY.exists():
        raise SystemExit(f"{DICTIONARY} not found: apt-get install wamerican")
    words = {w.strip() for w in DICTIONARY.read_text(encoding="utf-8").splitlines()}
    return sorted(w for w in words if w.isalpha() and w.islower() and zipf_frequency(w, "en") >= MIN_ZIPF)


def currency_units() -> list[str]:
    import pycountry

    units = Counter(re.findall(r"[^\W\d_]+", c.name.lower())[-1] for c in pycountry.currencies
                    if c.alpha_3 not in NOT_MONEY)
    return sorted(w for w, n in units.items() if n >= 2 and len(w) > 2)


def function_words() -> list[str]:
    from spacy.lang.en.lex_attrs import like_num
    from spacy.lang.en.stop_words import STOP_WORDS

    return sorted(w for w in STOP_WORDS if not like_num(w))


def write(name: str, words: list[str], header: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / name).write_text(f"# {header}\n" + "\n".join(words) + "\n", encoding="utf-8")
    print(f"{name}: {len(words)} words")


def main() -> None:
    write("common_words.txt", common_words(),
          f"wamerican lower-case words with wordfreq Zipf >= {MIN_ZIPF} (scripts/make_word_lists.py)")
    write("currency_units.txt", currency_units(),
          "unit words shared by >= 2 ISO 4217 currencies, from pycountry (scripts/make_word_lists.py)")
    write("function_words.txt", function_words(),
          "spaCy's English stop words that are not number words (scripts/make_word_lists.py)")


if __name__ == "__main__":
    main()
