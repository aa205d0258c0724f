"""Numbers the sources write in words are read with their digits too.

A source may state a value in words ("discovered in seventeen sixty-six", "position ten") where an
answer writes digits ("1766", "10").  The backbone reads an answer by how well each token follows
its input, so a value it could copy from the sources costs little and one it cannot costs more; in
words, the right year costs as much as a wrong one.  The rendering (`spanuq.context.render`) puts
the digits after each run of number words, in brackets::

    discovered in seventeen sixty-six (1766)      position ten (10)      one hundred and twelve (112)

A run is read as one cardinal ("one hundred and twelve" → 112, "two thousand and five" → 2005)
and, where it is not one, as a year of two pairs ("eighteen ninety-eight" → 1898, "nineteen oh
five" → 1905).  A lone "one" is left as it is: in prose it is a pronoun more often than a number.
The characters of the source a result reports as read (``context_read``) are the source's own.
"""
from __future__ import annotations

import re

UNITS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen".split())}
TENS = {w: 10 * i for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), 2)}
SCALES = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}
NUMBER_WORDS = set(UNITS) | set(TENS) | set(SCALES)
JOINERS = {"and", "oh"}  # inside a run: "one hundred and twelve", "nineteen oh five"
MAX_RUN = 12  # words read as one number at most ("nine hundred and ninety-nine thousand ..." is longer than any kept)
_WORD = re.compile(r"[A-Za-z]+")


def cardinal(words: list[str]) -> int | None:
    """Lower-cased number words read as one cardinal ("one hundred and twelve" → 112); None if they are not one
    ("seventeen sixty" is two numbers)."""
    total, group, last = 0, 0, None
    for w in words:
        if w == "and" and last == "scale":
            continue
        if w in UNITS or w in TENS:
            v = UNITS.get(w, TENS.get(w))
            if last in ("unit", "teen") or (last == "tens" and (w in TENS or v >= 10)):
                return None
            group += v
            last = "tens" if w in TENS else ("teen" if v >= 10 else "unit")
        elif w in SCALES and last is not None:
            if w == "hundred":
                group *= 100
            else:
                total, group = total + group * SCALES[w], 0
            last = "scale"
        else:
            return None
    return total + group if last in ("unit", "teen", "tens", "scale") else None


def year(words: list[str]) -> int | None:
    """Lower-cased number words read as a year of two pairs ("seventeen sixty-six" → 1766, "nineteen oh five" →
    1905, "twenty twenty-four" → 2024); None if they are not one."""
    for cut in range(1, len(words)):
        century, rest = cardinal(words[:cut]), words[cut:]
        if century is None or not 10 <= century <= 99:
            continue
        if rest[0] == "oh" and len(rest) == 2 and UNITS.get(rest[1], 10) < 10:
            return century * 100 + UNITS[rest[1]]
        tail = cardinal(rest)
        if tail is not None and 10 <= tail <= 99:
            return century * 100 + tail
    return None


def value(words: list[str]) -> int | None:
    """The number a run of words states: as a cardinal, else as a year (module docstring)."""
    n = cardinal(words)
    return n if n is not None else year(words)


def runs(text: str) -> list[tuple[int, int, int]]:
    """``(start, end, value)`` of each run of number words in ``text`` that states a number (a lone "one" aside):
    words joined by a space or a hyphen, the longest (of at most `MAX_RUN` words) that reads as one number first
    ("twenty-one and thirty" is 21 and 30)."""
    out, words = [], list(_WORD.finditer(text))
    i = 0
    while i < len(words):
        j = i  # words[i:j] may be one number: number words and joiners, a space or a hyphen apart
        while j < len(words) and j - i < MAX_RUN and (words[j].group().lower() in NUMBER_WORDS
                                                     or (j > i and words[j].group().lower() in JOINERS)):
            if j > i and text[words[j - 1].end():words[j].start()] not in (" ", "-"):
                break
            j += 1
        run = [w.group().lower() for w in words[i:j]]
        k = next((k for k in range(len(run), 0, -1) if run[k - 1] not in JOINERS and value(run[:k]) is not None), 0)
        if k and run[:k] != ["one"]:
            out.append((words[i].start(), words[i + k - 1].end(), value(run[:k])))
        i += max(k, 1)
    return out


def with_digits(text: str) -> str:
    """``text`` with the digits of each of its number-word runs after it, in brackets (module docstring)."""
    out, last = [], 0
    for _, end, n in runs(text):
        out.append(f"{text[last:end]} ({n})")
        last = end
    return "".join(out) + text[last:]
