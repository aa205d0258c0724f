"""The offline labeller: soft span labels from self-consistency, with no judge service and no corpus.

It stands in for the paper's judge pipeline (App. D.2) on a machine with no API
and no Wikipedia dump.  For one greedy answer with S samples:

1. **Claims** — `units.extract_units`: spaCy finds clauses and, in each, the
   anchors of atomic claims (entities, dates, numbers, one noun chunk).  The
   anchor's characters are the span; its clause, made self-contained, is the
   claim text.  A span that only repeats the prompt ("Marie Curie" for "Who was
   Marie Curie?") asserts nothing and is dropped (`terms.is_prompt_copy`).
2. **Alignment + support in sample s** — a claim counts as *made* in sample s by
   two signals: its key terms (the entity / number / chunk) occur in s
   (`terms.TextIndex`), and its claim text is semantically close to some
   sentence of s whose key terms agree (`align.KeyTermAligner`: MiniLM cosine ≥
   threshold and the claim's own term — for a chunk claim every number / date /
   name of its clause — also in that sentence, so "born 1880" never backs
   "born 1879").  Named and numeric claims hinge on
   the term:

       support_s = 1    term in s and a close sentence in s
                   0.5  term in s but said in another context
                   0    term absent (s names something else, or nothing)

   Chunk claims (no entity) count each signal as half: 1 if both, 0.5 if one.

   A sample cut off by the token budget (finish reason ``length``) *abstains* on
   a claim it does not back and never reached (the claim starts, in the greedy
   answer, after as many characters as the whole sample has): it had no room to
   say it, so it is no evidence against it.  A claim on which every sample
   abstains is dropped.  A sample that says nothing about a claim at all (no key
   term, no sentence near it even before the key-term gate) votes against it, as in
   the paper; ``label.omission: abstain`` makes it abstain instead, which lowers the
   truth check (`truth.py`; docs/results.md): a model that goes quiet about a claim
   when asked again is itself a sign the claim is wrong.
3. **Verification against references** (bundled prompts carry acceptable
   answers).  A claim whose anchor matches a reference answer is verified
   correct, so its support stays the sample agreement.  For factoid domains
   (TriviaQA, long-form QA), when no claim of the greedy answer matches any
   reference, the answer's own candidates (named or numeric spans of its first
   sentence not copied from the question, of the kind the question asks for:
   no nationality or region where a person or a city is asked, answer_kinds.tsv)
   are verified *unsupported* in every sample: u* = 1, however consistently the model repeats
   them — the paper's rule that a claim is supported in sample s only if an
   equivalent claim there is also verified correct.

   u*_k = 1 − mean over voting samples s of support_s(k)        (paper Eq. 11)

4. **Likelihood votes** (``label.likelihood_votes`` = w > 0): the backbone's own
   probability p̄_k of the claim's anchor tokens in the greedy answer counts as w more
   samples (`likelihood.py`): u*_k = 1 − (Σ_s support_s(k) + w·p̄_k) / (S_k + w).  A claim
   the reference rule calls wrong keeps u* = 1.

**Rows with sources** (a prompt with ``context``: the backbone answered with the passages in its
input).  The label comes from the source, not from what the backbone would say again: the passages
are the only voter (the samples are not read), each claim's u* = 1 − support in the source:

    u* = 0    the claim's terms are in the source and a source sentence is close to it (step 2)
    u* = 0.5  its terms are in the source, said in another context (`SOURCE_PARTIAL`)
    u* = 1    the source does not name it

and the reference rule (step 3) decides the answer slot where the row carries references: a row's
references are the facts its source states (the grounded rows' right value, in the source's words or
others, `spanuq.data.grounded`), so a slot naming one gets u* = 0 and an answer candidate of the asked
kind that names none (a value the source contradicts, even one the source mentions elsewhere) u* = 1.
A row without references whose source is silent on the fact labels it from the source alone: unsupported.
Likelihood votes and the truth check are left out (they read the backbone, not the source).

What this measures: mostly *self-consistency* (would the model say this again?)
plus reference checks on the answer slot.  What it misses: a claim the model
states consistently but wrongly, where no reference covers it, gets a low u*.
The judge labeller (`judge_labeller.py`) is the paper's method.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import regex

from ..config import LabelConfig
from ..pipeline.cache import RecentValues
from ..pipeline.records import Claim, Generation, Prompt, Sample
from .align import Aligner
from .terms import TextIndex, is_prompt_copy, numbers_in
from .truth import truth_row
from .units import Unit, extract_units, load_spacy

VERSION = 4  # bump when the rules change: keys the per-item cache
# a claim whose terms the source names in another context: neither stated nor absent (u* = 0.5, counted wrong)
SOURCE_PARTIAL = 0.5
FACTOID_DOMAINS = {"triviaqa", "longform_qa"}


@dataclass
class LabelResult:
    """What a labeller found for one generation."""

    claims: list[Claim]
    status: str = "ok"  # ok | empty | no_claims | error
    error: str | None = None
    stats: dict[str, int] = field(default_factory=dict)
    truth: list[dict] = field(default_factory=list)  # answer-slot spans for the truth check (`truth.py`)


def split_sentences(nlp, texts: list[str]) -> list[list[str]]:
    """Sentences of each text (spaCy's parser-based segmentation); empty text → []."""
    out = []
    for doc in nlp.pipe(texts):
        out.append([s.text.strip() for s in doc.sents if s.text.strip()])
    return out


def term_support(unit: Unit, sample: TextIndex, close: bool, min_score: float, partial: float = 0.5) -> float:
    """support_s of one claim in one sample (module docstring, step 2); ``partial``: the credit
    when only one signal holds (``label.partial_support``)."""
    present = all(sample.contains(t, min_score) for t in unit.terms) if unit.terms else False
    if unit.kind in ("entity", "number"):
        return (1.0 if close else partial) if present else 0.0
    return 1.0 if (present and close) else (partial if (present or close) else 0.0)


def abstains(sample: Sample, claim_start: int) -> bool:
    """A truncated sample abstains on a claim that starts beyond the length it reached."""
    return sample.finish_reason == "length" and claim_start >= len(sample.text)


def vote(support: list[float], samples: list[Sample], claim_start: int,
         silent: list[bool] | None = None) -> tuple[list[float], int]:
    """The votes of the samples that do not abstain (module docstring), and the abstentions.

    ``silent[s]``: sample s says nothing about the claim (``label.omission: abstain``); a silent
    sample that does not back the claim abstains like a truncated one."""
    silent = silent or [False] * len(support)
    votes = [x for x, s, q in zip(support, samples, silent) if x > 0 or not (q or abstains(s, claim_start))]
    return votes, len(support) - len(votes)


def _matches(anchor: str, references: list[str], min_score: float) -> bool:
    a = TextIndex(anchor)
    return any(a.contains(r, min_score) or TextIndex(r).contains(anchor, min_score) for r in references)


def names_reference(text: str, references: list[str], min_score: float) -> bool:
    """Does the text name an accepted answer anywhere (claim span or not)?"""
    ix = TextIndex(text)
    return any(ix.contains(r, min_score) for r in references if r.strip())


ANSWER_KINDS = Path(__file__).with_name("answer_kinds.tsv")


@lru_cache(maxsize=1)
def answer_kinds() -> dict[str, frozenset[str]]:
    """{spaCy label: the question words that ask for it} (answer_kinds.tsv): a span with one of
    these labels is an answer candidate only where the question asks for its kind."""
    rows = [line.split("\t") for line in ANSWER_KINDS.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")]
    return {label: frozenset(words.split()) for label, words in rows}


def candidate_labels(question: str, references: list[str], nlp=None) -> Callable[[str], bool]:
    """Can a span with this spaCy label be the answer slot of ``question``?  Yes, unless the label
    is one of `answer_kinds` and neither the question asks for it nor (``nlp`` given) spaCy
    labels a reference answer so."""
    words = set(regex.findall(r"\p{L}+", question.lower()))
    ref_labels = {e.label_ for d in nlp.pipe(references) for e in d.ents} if nlp is not None else set()
    asked = {label for label, cues in answer_kinds().items() if cues & words or label in ref_labels}
    return lambda label: label not in answer_kinds() or label in asked


def reference_verdicts(units: list[Unit], answer: str, prompt: Prompt, min_score: float,
                       nlp=None) -> dict[int, str]:
    """{unit index: "match" | "mismatch"} from the prompt's reference answers (step 3).

    The answer's candidates are called wrong only when the answer names no accepted answer
    anywhere (not only in a claim span: "The Tigris River, which ..." is right even where
    the parser finds no entity in it), and a span of a kind the question does not ask for
    (answer_kinds.tsv: a nationality, a language, a region) is no candidate — "the British
    scientist Charles Darwin" is wrong in its name, not in its adjective; "Mauritania is a
    country in West Africa" names no capital, wrong or right (`candidate_labels`).  ``nlp``
    (spaCy) tells the references' labels."""
    refs = [r for r in prompt.references if r.strip()]
    if not refs:
        return {}
    verdicts = {i: "match" for i, u in enumerate(units)
                if (u.named or u.kind == "number") and _matches(u.anchor, refs, min_score)}
    if verdicts or prompt.domain not in FACTOID_DOMAINS:
        return verdicts
    if names_reference(answer, refs, min_score):
        return verdicts
    # no span of the answer is a reference: its answer candidates are wrong
    numeric = any(numbers_in(r) for r in refs)
    asked = candidate_labels(prompt.text, refs, nlp)
    first_end = _first_sentence_end(answer)
    question = TextIndex(prompt.text)
    for i, u in enumerate(units):
        kind_ok = u.kind == "number" if numeric else (u.named and u.kind != "number")
        kind_ok = kind_ok and asked(u.label)
        if kind_ok and u.start < first_end and not question.contains(u.anchor, min_score):
            verdicts[i] = "mismatch"
    return verdicts


def sentence_ends(text: str) -> list[int]:
    """One past the end of each sentence of ``text`` (a ``.!?`` or newline followed by a space or
    the end, not in the first three characters); the last is always ``len(text)``."""
    ends = [i + 1 for i, ch in enumerate(text)
            if ch in ".!?\n" and (i + 1 == len(text) or text[i + 1].isspace()) and i > 2]
    return ends if ends and ends[-1] == len(text) else ends + [len(text)]


def _first_sentence_end(text: str) -> int:
    return sentence_ends(text)[0]


def answer_slot(nlp, answer: str, prompt: Prompt, cfg: LabelConfig) -> str | None:
    """The label-truth check's verdict on one answer's *answer slot* (`truth.py`): ``"correct"``
    when a named or numeric span — or, failing one, the answer's text — names a reference answer,
    ``"wrong"`` when none does and the answer names a candidate of the kind the question asks for
    (factoid domains), None when the rule judges no span (no references, an answer that names
    nothing of that kind, a non-factoid miss).  The same
    claims, prompt-copy filter and reference rule as `OfflineLabeller.label`."""
    if not answer.strip() or not [r for r in prompt.references if r.strip()]:
        return None
    units = [u for u in extract_units(nlp(answer), cfg.min_span_chars, cfg.max_spans)
             if not is_prompt_copy(u.anchor, prompt.text, cfg.term_min_score)]
    verdicts = reference_verdicts(units, answer, prompt, cfg.term_min_score, nlp)
    if not verdicts:  # right where the answer names a reference outside every claim span
        return "correct" if names_reference(answer, prompt.references, cfg.term_min_score) else None
    return "correct" if verdicts[min(verdicts)] == "match" else "wrong"


class OfflineLabeller:
    """`label(generation, prompt) -> LabelResult` with self-consistency soft labels."""

    name = "offline"
    version = VERSION

    def __init__(self, cfg: LabelConfig, aligner: Aligner, nlp=None, likelihood=None):
        self.cfg = cfg
        self.aligner = aligner
        self.nlp = nlp if nlp is not None else load_spacy(cfg.spacy_model)
        # a prompt's samples are split again for every answer labelled against them (sample answers)
        self.sentences = RecentValues(20_000)
        # `likelihood.AnchorLikelihood` (or anything with its ``probs``): needed when label.likelihood_votes > 0
        self.likelihood = likelihood
        if cfg.likelihood_votes > 0 and likelihood is None:
            raise ValueError("label.likelihood_votes > 0 needs the backbone's likelihood (AnchorLikelihood)")

    def label(self, gen: Generation, prompt: Prompt) -> LabelResult:
        answer = gen.greedy.text
        if not answer.strip():
            return LabelResult([], "empty")
        found = extract_units(self.nlp(answer), self.cfg.min_span_chars, self.cfg.max_spans)
        units = [u for u in found if not is_prompt_copy(u.anchor, prompt.text, self.cfg.term_min_score)]
        stats = {"units": len(found), "prompt_copies": len(found) - len(units)}
        if not units:
            return LabelResult([], "no_claims", stats=stats)
        if prompt.context is not None:
            return self._from_source(gen, prompt, units, stats)
        gen_samples = [s for s in gen.samples if s.finish_reason != "error"]
        samples = [s.text for s in gen_samples]
        if not samples:
            return LabelResult([], "error", "every sample failed to generate")
        sentences = self.sentences.many(samples, lambda texts: split_sentences(self.nlp, texts))
        # a named or numeric claim must find its own term in the sentence; a chunk claim every
        # number and name of its clause (`KeyTermAligner`)
        own_terms = [u.terms if u.kind in ("entity", "number") else None for u in units]
        close, near = self._closeness([u.text for u in units], sentences, prompt.text, own_terms)  # (K, S) bool
        indexes = [TextIndex(s) for s in samples]
        refs = [r for r in prompt.references if r.strip()]
        # the slots' verdicts: applied to the labels only with use_references, always kept for the truth check
        verdicts = reference_verdicts(units, answer, prompt, self.cfg.term_min_score, self.nlp) if refs else {}
        w = self.cfg.likelihood_votes
        p_bar = self.likelihood.probs(gen, [(u.start, u.end) for u in units]) if w > 0 else [None] * len(units)
        claims, truth = [], []
        stats.update(abstentions=0, no_votes=0, truncated_samples=sum(s.finish_reason == "length" for s in gen_samples))
        for k, u in enumerate(units):
            support = [term_support(u, ix, bool(close[k, s]), self.cfg.term_min_score, self.cfg.partial_support)
                       for s, ix in enumerate(indexes)]
            silent = ([not (near[k, s] or any(ix.contains(t, self.cfg.term_min_score) for t in u.terms))
                       for s, ix in enumerate(indexes)] if self.cfg.omission == "abstain" else None)
            blind, abstained = vote(support, gen_samples, u.start, silent)  # self-consistency alone
            verdict = verdicts.get(k) if self.cfg.use_references else None
            if verdict == "mismatch":
                votes, abstained = [0.0] * len(samples), 0
            elif verdict == "match":  # a sample naming any accepted answer makes the same, correct claim
                support = [1.0 if any(ix.contains(r, self.cfg.term_min_score) for r in refs) else x
                           for x, ix in zip(support, indexes)]
                votes, abstained = vote(support, gen_samples, u.start, silent)
            else:
                votes = blind
            stats["abstentions"] += abstained
            if not votes:
                stats["no_votes"] += 1
                continue
            agree = sum(x == 1.0 for x in votes)
            evidence = ([f"samples:{agree}/{len(votes)} agree"] + ([f"abstained:{abstained}"] if abstained else [])
                        + ([f"reference:{verdict}"] if verdict else []))
            cid = f"{gen.prompt_id}:{k}"
            if p_bar[k] is not None:
                evidence.append(f"likelihood:{p_bar[k]:.3f}x{w:g}")
            # a claim the reference rule calls wrong stays wrong whatever the model's confidence
            lik = None if verdict == "mismatch" else p_bar[k]
            claims.append(Claim(id=cid, prompt_id=gen.prompt_id, text=u.text, start=u.start, end=u.end,
                                support=votes, evidence=evidence, likelihood=lik,
                                likelihood_weight=w if lik is not None else 0.0))
            if k in verdicts and blind and prompt.domain in FACTOID_DOMAINS and not truth:
                # the answer slot: the first span the reference rule judges (units are in text order)
                truth.append(truth_row(cid, gen.prompt_id, u.anchor, verdicts[k], blind, p_bar[k], w))
        stats.update(reference_match=sum(v == "match" for v in verdicts.values()),
                     reference_mismatch=sum(v == "mismatch" for v in verdicts.values()))
        return LabelResult(claims, "ok" if claims else "no_claims", stats=stats, truth=truth)

    def _from_source(self, gen: Generation, prompt: Prompt, units: list[Unit], stats: dict) -> LabelResult:
        """The labels of an answer given with sources (module docstring, "Rows with sources"): one vote per
        claim, the source's, instead of the samples'."""
        source = "\n".join(p if isinstance(p, str) else p["text"] for p in prompt.context)
        sentences = self.sentences.many([source], lambda texts: split_sentences(self.nlp, texts))
        own_terms = [u.terms if u.kind in ("entity", "number") else None for u in units]
        close, _ = self._closeness([u.text for u in units], sentences, prompt.text, own_terms)
        index = TextIndex(source)
        refs = [r for r in prompt.references if r.strip()]
        verdicts = reference_verdicts(units, gen.greedy.text, prompt, self.cfg.term_min_score, self.nlp) if refs else {}
        claims = []
        for k, u in enumerate(units):
            verdict = verdicts.get(k)
            if verdict is not None:  # the reference is what the source states (in its words or others)
                vote_, said = (1.0 if verdict == "match" else 0.0), f"reference:{verdict}"
            else:
                vote_ = term_support(u, index, bool(close[k, 0]), self.cfg.term_min_score, SOURCE_PARTIAL)
                said = {1.0: "source:states", 0.0: "source:silent"}.get(vote_, "source:mentions")
            claims.append(Claim(id=f"{gen.prompt_id}:{k}", prompt_id=gen.prompt_id, text=u.text, start=u.start,
                                end=u.end, support=[vote_], evidence=[said]))
        stats.update(from_source=len(claims), reference_match=sum(v == "match" for v in verdicts.values()),
                     reference_mismatch=sum(v == "mismatch" for v in verdicts.values()))
        return LabelResult(claims, "ok" if claims else "no_claims", stats=stats)

    def _closeness(self, claims: list[str], sentences: list[list[str]], context: str = "",
                   terms: list | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Two (K, S) masks: is some sentence of sample s close to claim k (aligner score ≥
        threshold), and is one *near* it before the key-term gate (the sample speaks of the
        claim, whatever it says: ``label.omission``)?"""
        flat = [t for sent in sentences for t in sent]
        out = np.zeros((len(claims), len(sentences)), dtype=bool)
        near = out.copy()
        if not flat:
            return out, near
        if terms is not None and hasattr(self.aligner, "nlp"):
            scores, raw = self.aligner.scores(claims, flat, context, terms, with_raw=True)
        else:
            scores = raw = self.aligner.scores(claims, flat, context)
        col = 0
        for s, sent in enumerate(sentences):
            if sent:
                out[:, s] = scores[:, col: col + len(sent)].max(axis=1) >= self.aligner.threshold
                near[:, s] = raw[:, col: col + len(sent)].max(axis=1) >= self.aligner.threshold
            col += len(sent)
        return out, near
