"""Mu-SHROOM's *unlabelled* English train split as training data: other systems' answers,
read teacher-forced and labelled by SpanUQ's own teacher.

    spanuq bench mushroom-prompts --data mushroom.en-train_nolabel.v1.jsonl --out mushroom-train.jsonl --fold 0/2

writes a prompt file (`spanuq.data.prompts.load_prompt_file`) with one row per answer: the
question as ``text``, the other model's answer as ``response``, split ``train``.  The
pipeline then samples the backbone on each question, asks whether it would say each claim of
the given answer again (the offline teacher) and reads the answer teacher-forced (extract),
so the probe learns from answers written the way the benchmark's are.

The unlabelled train split asks the same 49 questions as the validation split (and none of
the test split's), so a probe trained on all of it has seen every validation question.
``--fold k/n`` keeps the answers whose question falls in fold k of n (a hash of the
question); `spanuq bench mushroom --exclude-questions <that file>` then leaves the
validation answers to those questions out, and the validation split stays unseen.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from ..pipeline.files import iter_jsonl
from .mushroom import SOURCE


def question_key(question: str) -> str:
    """The normalised question (whitespace collapsed, case folded): the unit of a fold."""
    return " ".join(question.split()).casefold()


def question_fold(question: str, n_folds: int) -> int:
    return int(hashlib.sha1(question_key(question).encode("utf-8")).hexdigest(), 16) % n_folds


def parse_fold(spec: str | None) -> tuple[int, int] | None:
    """``"k/n"`` -> (k, n); None -> every answer."""
    if spec is None:
        return None
    try:
        k, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise ValueError(f"--fold must look like 0/2, not {spec!r}") from None
    if not (n >= 2 and 0 <= k < n):
        raise ValueError(f"--fold {spec}: need n >= 2 and 0 <= k < n")
    return k, n


def unlabelled_prompts(path: str | Path, fold: tuple[int, int] | None = None) -> list[dict]:
    """Prompt-file rows of the English unlabelled train file (answers to the questions of ``fold``)."""
    try:
        return _rows(Path(path), fold)
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: cannot read as UTF-8 text ({e.reason} at byte {e.start})") from None


def _rows(path: Path, fold: tuple[int, int] | None) -> list[dict]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (the English unlabelled train file of {SOURCE})")
    rows = []
    for n, rec in enumerate(iter_jsonl(path), 1):
        if str(rec.get("lang", "")).upper() != "EN":
            continue
        q, a = rec.get("model_input"), rec.get("model_output_text")
        if not isinstance(q, str) or not isinstance(a, str):
            raise ValueError(f"{path}: record {n}: a Mu-SHROOM record needs string `model_input` and `model_output_text`")
        if not q.strip() or not a.strip():
            continue
        if fold is not None and question_fold(q, fold[1]) != fold[0]:
            continue
        rows.append({"id": f"mushroom-train-{n:04d}", "domain": "custom", "text": q.strip(), "response": a,
                     "split": "train", "meta": {"source": f"{SOURCE} train_nolabel", "model_id": rec.get("model_id") or ""}})
    if not rows:
        raise ValueError(f"{path}: no English answers" + (f" in fold {fold[0]}/{fold[1]}" if fold else ""))
    return rows


def questions_of(prompt_file: str | Path) -> set[str]:
    """The normalised questions of a prompt file (`--exclude-questions`)."""
    from ..data.prompts import load_prompt_file

    return {question_key(p.text) for p in load_prompt_file(prompt_file)}


def leave_out(items: list, questions: set[str]) -> list:
    """The items (`MushroomItem`) whose question is not among ``questions`` (normalised)."""
    return [x for x in items if question_key(x.model_input) not in questions]
