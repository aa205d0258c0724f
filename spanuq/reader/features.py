"""What the with-sources reader reads of each answer word: how the sources back it, as cheap measurements.

For an answer read against sources (passages) after a question (possibly none), each word of the answer
(`answer_words`: runs of letters and digits, a number with its separators, a hyphenated word, or one
punctuation mark) gets a row of `FEATURES`:

* **lexical** — whether its form occurs in the sources: anywhere (``absent_all``), in the k source sentences
  most like the answer sentence's query (``absent_top{1,3,5}``; the query is the question and the answer
  sentence, by the encoder's sentence embeddings), or as a prefix of a source word (``absent_stem``: inflection);
  a number's digits compared without separators, number words with their digits (`spanuq.context.numbers`);
* **aligned** — the highest cosine between the word's contextual state (the mean of its word pieces, the
  answer read by the encoder) and any word piece of the sources, of all and of the top-k sentences
  (``align_all``, ``align_top{1,3,5}``): BERTScore's recall, per word;
* **retrieval** — how like its best source sentences the answer sentence's query is (``sim_top1``, ``sim_top3``);
* **the question** — whether the word is in the question (``in_question``); how much less the source sentences
  holding it speak of the question than the sentence that speaks of it most (``question_gap``: 0 for a word in
  that sentence; 1 when the word is nowhere in the sources or there is no question); and, where the sources hold
  the word, the largest share of the question's other content words within `NEAR` words of it in one source
  sentence (``question_near``) and in that whole sentence (``question_sentence``): an answer to the question
  stands by the words that ask for it ("ran on the Fox network" for "Which network did House run on?");
* **the answer sentence** — the same two shares with the other content words of the word's answer sentence that the
  sources hold (``answer_near``, ``answer_sentence``; 1 when there are none): a fact stands in the sources beside the
  words it is said with, so a name swapped in from another sentence of the passage is in the sources but not beside
  them;
* **the word itself** — punctuation, function word, number, capitalised, word pieces, its place in its
  sentence, how often the sources hold it, how many sentences the sources have.

None of these reads the backbone: its readings (each word's surprisal with and without the sources,
`BACKBONE_FEATURES`) are `spanuq.reader.backbone`'s, read beside these when the reader was trained with them.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ..context.focus import sentence_spans
from ..context.numbers import with_digits
from .encoder import Encoded, SourceEncoder

_WORD = re.compile(r"\d+(?:[.,:/]\d+)*|\w+(?:['’-]\w+)*|[^\w\s]", re.UNICODE)
_FORM = re.compile(r"\w+", re.UNICODE)
FUNCTION_WORDS = frozenset("""a an and are as at be been being but by for from had has have he her hers him his i
    in into is it its me my of on or our she than that the their them then there these they this those to us was
    we were which who whom whose will with would you your also not no nor so such what when where how why all any
    each other both either neither can could may might must shall should do does did done about after before over
    under between through during while if because although though until upon within without against among
    very more most less least only just""".split())
STEM = 5  # a word and a source word sharing their first STEM letters (both at least that long) match by stem
TOP_K = (1, 3, 5)
NEAR = 8  # words either side of a source word that count as near it (``question_near``)
MAX_SENTENCE_CHARS = 600  # a longer source "sentence" (a table, a list) is read in pieces of about this length

FEATURES = ("absent_all", "absent_stem", "absent_top1", "absent_top3", "absent_top5",
            "align_all", "align_top1", "align_top3", "align_top5", "sim_top1", "sim_top3",
            "in_question", "question_gap", "question_near", "question_sentence", "answer_near", "answer_sentence",
            "punct", "function", "number", "capital", "pieces", "place", "log_count", "log_sentences")
# trained on only with ``reader.answer_sentence`` (off in every preset: docs/grounded.md weighs them)
ANSWER_SENTENCE_FEATURES = ("answer_near", "answer_sentence")
BACKBONE_FEATURES = ("surprisal_given", "surprisal_without", "surprisal_change")  # `spanuq.reader.backbone`
READER_FEATURES = FEATURES + BACKBONE_FEATURES  # every column a reader's net may be trained on


@dataclass(frozen=True)
class WordRows:
    """The answer's words (character spans), their feature rows (n, len(FEATURES)), the answer sentence of each,
    and the passage holding the source word piece each is most like (its ``align_all``)."""

    words: list[tuple[int, int]]
    x: np.ndarray
    sentence: list[int]
    passage: list[int]


def answer_words(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in _WORD.finditer(text)]


def forms(text: str) -> list[str]:
    """Lower-case word forms of ``text``, numbers without their separators."""
    return [w.lower() for w in _FORM.findall(re.sub(r"(?<=\d)[,.](?=\d{3}\b)", "", text))]


def source_sentences(passages: list[str]) -> tuple[list[str], list[int]]:
    """Every sentence of every passage (a line break ends one too; a long one in pieces at whitespace): what the
    sources are read as; and the passage of each."""
    out, of = [], []
    for k, p in enumerate(passages):
        for line in p.split("\n"):
            for s, e in sentence_spans(line):
                piece = line[s:e].strip()
                while len(piece) > MAX_SENTENCE_CHARS:
                    cut = piece.rfind(" ", 0, MAX_SENTENCE_CHARS)
                    cut = cut if cut > 0 else MAX_SENTENCE_CHARS
                    out.append(piece[:cut])
                    of.append(k)
                    piece = piece[cut:].strip()
                if piece:
                    out.append(piece)
                    of.append(k)
    return (out, of) if out else ([""], [0])


def _nearness(fs: list[str], words: set[str], positions: dict, sent_forms: list[list[str]], alone: float = 0.0
              ) -> tuple[float, float]:
    """Of a word whose forms are ``fs``, over the source sentences holding it: the largest share of ``words`` (but
    its own) within `NEAR` words of it, and in the whole sentence (``question_near`` / ``question_sentence`` with
    the question's content words; ``answer_near`` / ``answer_sentence`` with the content words of its answer
    sentence that the sources hold).  0 for a word the sources do not hold; ``alone`` when ``words`` has no other."""
    q = words - set(fs)
    if not fs or fs[0] not in positions:
        return 0.0, 0.0
    if not q:
        return alone, alone
    near = whole = 0.0
    for k, j in positions[fs[0]]:
        words = sent_forms[k]
        near = max(near, len(q & set(words[max(0, j - NEAR): j + NEAR + 1])) / len(q))
        whole = max(whole, len(q & set(words)) / len(q))
    return near, whole


def _word_states(enc: Encoded, spans: list[tuple[int, int]], dim: int) -> np.ndarray:
    """Each character span's contextual state: the unit-norm mean of the word pieces overlapping it."""
    out = np.zeros((len(spans), dim), np.float32)
    for i, (s, e) in enumerate(spans):
        k = (enc.offsets[:, 0] < e) & (enc.offsets[:, 1] > s)
        if k.any():
            v = enc.tokens[k].mean(0)
            out[i] = v / (np.linalg.norm(v) + 1e-9)
    return out


def word_rows(encoder: SourceEncoder, passages: list[str], answer: str, question: str | None = None) -> WordRows:
    """The feature rows of ``answer``'s words read against ``passages`` after ``question`` (module docstring)."""
    words = answer_words(answer)
    if not words:
        return WordRows([], np.zeros((0, len(FEATURES)), np.float32), [], [])
    sents, passage_of = source_sentences([with_digits(p) for p in passages])
    sent_words = [forms(s) for s in sents]
    sent_forms = [set(w) for w in sent_words]
    positions: dict[str, list[tuple[int, int]]] = {}
    for k, ws in enumerate(sent_words):
        for j, f in enumerate(ws):
            positions.setdefault(f, []).append((k, j))
    all_forms = set().union(*sent_forms)
    stems = {f[:STEM] for f in all_forms if len(f) >= STEM}
    counts: dict[str, int] = {}
    for fs in sent_forms:
        for f in fs:
            counts[f] = counts.get(f, 0) + 1
    a_sents = [(s, e) for s, e in sentence_spans(answer)] or [(0, len(answer))]
    q = (question or "").strip()
    q_forms = set(forms(q))
    q_content = {f for f in q_forms if f not in FUNCTION_WORDS}
    a_content = [{f for f in forms(with_digits(answer[s:e])) if f not in FUNCTION_WORDS and f in all_forms}
                 for s, e in a_sents]
    queries = [(q + " " + answer[s:e]).strip() for s, e in a_sents]
    encoded = encoder.encode(sents + [answer] + queries + ([q] if q else []))
    src, ans, qenc = encoded[: len(sents)], encoded[len(sents)], encoded[len(sents) + 1: len(sents) + 1 + len(queries)]
    S = np.stack([e.sentence for e in src])  # (m, d)
    if any(len(e.tokens) for e in src):
        piece_rows = np.concatenate([e.tokens for e in src])
        piece_sent = np.concatenate([np.full(len(e.tokens), j) for j, e in enumerate(src)])
    else:  # sources without a word piece: nothing aligns
        piece_rows, piece_sent = np.zeros((1, encoder.dim), np.float32), np.zeros(1, np.int64)
    q_sim = (S @ encoded[-1].sentence) if q else None
    states = _word_states(ans, words, encoder.dim)
    align = piece_rows @ states.T  # (pieces, words)
    rows, sent_of, best = [], [], []
    log_m = math.log(len(sents))
    for i, (s, e) in enumerate(words):
        k = next((j for j, (a, b) in enumerate(a_sents) if a <= s < b), len(a_sents) - 1)
        sims = S @ qenc[k].sentence
        order = np.argsort(-sims, kind="stable")
        text = answer[s:e]
        fs = forms(with_digits(text))
        word_in = lambda pool: float(all(f in pool for f in fs)) if fs else 1.0  # noqa: E731
        top_forms = {t: set().union(*(sent_forms[j] for j in order[:t])) for t in TOP_K}
        col = align[:, i]
        top_align = {t: float(col[np.isin(piece_sent, order[:t])].max(initial=-1.0)) for t in TOP_K}
        holding = [j for j, f in enumerate(sent_forms) if fs and all(x in f for x in fs)]
        if q_sim is not None and holding:
            gap = float(q_sim.max() - q_sim[holding].max())
        else:
            gap = 1.0
        a, b = a_sents[k]
        rows.append([
            1.0 - word_in(all_forms),
            1.0 - (float(all(f in all_forms or (len(f) >= STEM and f[:STEM] in stems) for f in fs)) if fs else 1.0),
            *(1.0 - word_in(top_forms[t]) for t in TOP_K),
            float(col.max(initial=-1.0)), *(top_align[t] for t in TOP_K),
            float(sims[order[0]]), float(sims[order[:3]].mean()),
            float(bool(fs) and all(f in q_forms for f in fs)), gap,
            *_nearness(fs, q_content, positions, sent_words), *_nearness(fs, a_content[k], positions, sent_words, alone=1.0),
            float(not fs), float(bool(fs) and all(f in FUNCTION_WORDS for f in fs)),
            float(any(c.isdigit() for c in text)), float(text[:1].isupper()),
            float(encoder.n_pieces(text)), (s - a) / max(1, b - a),
            math.log1p(min((counts.get(f, 0) for f in fs), default=0)), log_m,
        ])
        sent_of.append(k)
        best.append(passage_of[int(piece_sent[int(np.argmax(col))])] if len(col) else 0)
    return WordRows(words, np.asarray(rows, np.float32), sent_of, best)
