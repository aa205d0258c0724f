"""The backbone's own samples as more training answers (`label.sample_answers: k`).

The teacher labels a prompt's greedy answer y_0 against its S samples y_1..y_S (paper Eq. 11:
u*_c = 1 − mean_s support_s(c)).  Each sample is itself an answer of the same backbone to the
same prompt, so sample y_i is labelled the same way against the *other* S answers — the greedy
one and the S − 1 remaining samples (leave-one-out: the same number of votes) — and read
teacher-forced like any answer:

    u*_c(y_i) = 1 − (1/S) Σ_{j ∈ {0..S}, j ≠ i} support_j(c).

k samples of every training prompt give up to (k + 1)× the training answers with no more
generation.  Only prompts of the training split get them (a dev or test question never reaches
training through its samples), and a sample is used only when it ended on its own, is not
empty and is not the greedy answer again.  A sample answer is named ``<prompt id>@sample<i>``:
the extract stage and the baselines rebuild it from its prompt's generation record.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from ..pipeline.files import read_records
from ..pipeline.records import Generation, LabeledResponse, Prompt

MARK = "@sample"


def answer_id(prompt_id: str, i: int) -> str:
    """The id of sample ``i`` (0-based) of ``prompt_id`` read as an answer."""
    return f"{prompt_id}{MARK}{i}"


def parse(answer: str) -> tuple[str, int] | None:
    """``(prompt id, sample index)`` of a sample answer's id; None for any other id."""
    head, sep, tail = answer.rpartition(MARK)
    return (head, int(tail)) if sep and head and tail.isdigit() else None


def parent_id(answer: str) -> str:
    """The prompt an answer belongs to (itself for an ordinary answer): a sample answer's, or a
    given answer's (`spanuq.label.given`)."""
    from .given import parent_id as given_parent

    parsed = parse(answer)
    return parsed[0] if parsed else given_parent(answer)


def usable(gen: Generation, k: int) -> list[int]:
    """The first ``k`` samples of ``gen`` that can stand as answers: stopped on their own (not cut off
    by the budget, no error), not empty, and not the greedy answer again."""
    greedy = gen.greedy.text.strip()
    out = []
    for i, s in enumerate(gen.samples):
        if len(out) == k:
            break
        if s.finish_reason == "stop" and s.token_ids and s.text.strip() and s.text.strip() != greedy:
            out.append(i)
    return out


def sample_answer(gen: Generation, i: int) -> Generation:
    """Sample ``i`` of ``gen`` as an answer, with the greedy answer and the other samples as its
    S voters (leave-one-out)."""
    if gen.answer_given:
        raise ValueError(f"{gen.prompt_id}: its answer was written elsewhere; its samples are not read as answers")
    others = [s for j, s in enumerate(gen.samples) if j != i]
    return gen.model_copy(update={"prompt_id": answer_id(gen.prompt_id, i), "greedy": gen.samples[i],
                                  "samples": [gen.greedy, *others]})


def sample_answers(gen: Generation, k: int) -> list[Generation]:
    """Up to ``k`` of ``gen``'s samples as answers (`usable`)."""
    return [] if gen.answer_given else [sample_answer(gen, i) for i in usable(gen, k)]


def sample_prompt(prompt: Prompt, answer: str) -> Prompt:
    """The prompt record of a sample answer: its prompt's text, domain and references, in train."""
    return prompt.model_copy(update={"id": answer, "split": "train"})


def with_sample_answers(gens: list[Generation], answers: Iterable[str]) -> list[Generation]:
    """``gens`` and, after them, the sample answers named in ``answers`` (the ids of labels.jsonl),
    rebuilt from their prompts' records."""
    by_id = {g.prompt_id: g for g in gens}
    out = list(gens)
    for a in answers:
        parsed = parse(a)
        if parsed is None or a in by_id:
            continue
        pid, i = parsed
        g = by_id.get(pid)
        if g is None or i >= len(g.samples):
            raise KeyError(f"labels.jsonl names sample answer {a!r}, which generations.jsonl does not hold; "
                           "re-run `spanuq label`")
        out.append(sample_answer(g, i))
    return out


def read_answers(generations: str | Path, labels: str | Path | None = None) -> list[Generation]:
    """Every record of generations.jsonl and, where labels.jsonl exists, the sample answers and
    the given answers (`spanuq.label.given`) it names: every answer a stage after `label` reads."""
    from .given import with_given_answers

    gens = read_records(generations, Generation)
    if labels is None or not Path(labels).exists():
        return gens
    records = read_records(labels, LabeledResponse)
    return with_given_answers(with_sample_answers(gens, (r.prompt_id for r in records)), records)
