"""How often does the language check (`spanuq.data.language`) flag English, and how often other languages?

English: every prompt, greedy answer and sample of the runs given (``generations.jsonl`` files), and
the questions and answers of Mu-SHROOM English files when ``--mushroom DIR`` is given.  Other
languages: ``tests/fixtures/other_languages.tsv`` (one answer a line) or ``--other FILE``.  Prints,
for a few rules around the shipped one (letters ≥ MIN_LETTERS and P(expected) < MAX_P_EXPECTED),
the texts flagged on each side, then the English texts the shipped rule flags.

    python experiments/language_rule.py data/smollm2-135m/generations.jsonl [--mushroom DIR]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spanuq.data import language  # noqa: E402


def english_texts(generations: list[Path], mushroom: Path | None) -> list[str]:
    texts: list[str] = []
    for path in generations:
        with path.open(encoding="utf-8") as f:
            for line in f:
                g = json.loads(line)
                texts += [g["prompt_text"], g["greedy"]["text"], *(s["text"] for s in g.get("samples", []))]
    for path in sorted(mushroom.glob("mushroom.en-*.jsonl")) if mushroom else []:
        with path.open(encoding="utf-8") as f:
            for line in f:
                item = json.loads(line)
                texts += [item["model_input"], item["model_output_text"]]
    return texts


def other_texts(path: Path) -> list[tuple[str, str]]:
    rows = [line.rstrip("\n").split("\t", 1) for line in path.open(encoding="utf-8")]
    return [(code, text) for code, text in rows if not code.startswith("#")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("generations", nargs="+", type=Path)
    ap.add_argument("--mushroom", type=Path, help="a folder with Mu-SHROOM English files (mushroom.en-*.jsonl)")
    ap.add_argument("--other", type=Path, default=REPO / "tests" / "fixtures" / "other_languages.tsv")
    args = ap.parse_args()
    english = english_texts(args.generations, args.mushroom)
    other = other_texts(args.other)
    t0 = time.perf_counter()
    guesses = [language.guess_language(t, ("en",), min_letters=0) for t in english]
    per_text_ms = (time.perf_counter() - t0) / max(1, len(english)) * 1000
    other_guesses = [language.guess_language(t, ("en",), min_letters=0) for _, t in other]
    letters = [language.letters(t) for t in english]
    other_letters = [language.letters(t) for _, t in other]
    print(f"{len(english):,} English texts, {len(other)} in {len({c for c, _ in other})} other languages; "
          f"{per_text_ms:.2f} ms a text")
    print("| letters ≥ | P(English) < | English texts flagged | other-language texts flagged |")
    print("|---|---|---|---|")
    for min_letters in (10, 20, 40):
        for max_p in (0.001, 0.01, 0.05):
            flag = [g.p_expected < max_p and n >= min_letters for g, n in zip(guesses, letters)]
            hit = [g.p_expected < max_p and n >= min_letters for g, n in zip(other_guesses, other_letters)]
            mark = " (shipped)" if (min_letters, max_p) == (language.MIN_LETTERS, language.MAX_P_EXPECTED) else ""
            print(f"| {min_letters}{mark} | {max_p} | {sum(flag)} / {len(flag)} | {sum(hit)} / {len(hit)} |")
    print("\nEnglish texts the shipped rule flags (read them: some are answers the backbone wrote in another language):")
    for t, g, n in zip(english, guesses, letters):
        if n >= language.MIN_LETTERS and g.p_expected < language.MAX_P_EXPECTED:
            print(f"  {g.code} P(en) {g.p_expected:.4f}  {t[:110]!r}")
    missed = [(c, t) for (c, t), g, n in zip(other, other_guesses, other_letters)
              if not (n >= language.MIN_LETTERS and g.p_expected < language.MAX_P_EXPECTED)]
    print(f"\nother-language texts the shipped rule leaves: {len(missed)}")
    for c, t in missed:
        print(f"  {c}  {t!r}")


if __name__ == "__main__":
    main()
