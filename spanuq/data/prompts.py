"""The ``prompts`` stage: choose the prompts every backbone answers (paper App. D.1).

Three sources (``prompts.source``):

* ``bundled`` (offline default): the hand-checked set shipped in
  ``spanuq/data/bundled/prompts.jsonl`` - five domains in the paper's styles, famous
  and obscure subjects mixed, reference answers (with aliases) on factoid prompts;
* ``file``: a user's own JSONL or CSV (:func:`load_prompt_file`);
* ``hub``: the paper's datasets through Hugging Face ``datasets`` (:mod:`spanuq.data.hub`).

``n_prompts`` are drawn with ``prompts.proportions`` (domain -> fraction) by
:func:`spanuq.data.mix.mix`: deterministic for a seed, a smaller ``n`` selects a
prefix of a larger one, and a domain that runs short is filled from the others.
Each prompt then gets a provisional split stratified by domain
(:func:`spanuq.data.splits.assign_splits`); the label stage re-stratifies by
domain x uncertainty bin.  ``prompts.grounded: N`` adds N questions with their sources from the
grounded training pairs (:mod:`spanuq.data.grounded`), in train and dev only.  Writes ``data/prompts.jsonl`` and ``data/prompts_report.json``.

This module must stay light: ``spanuq prompts`` imports neither torch nor transformers.
"""
from __future__ import annotations

import csv
import hashlib
import json
import logging
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, get_args

from pydantic import ValidationError

from ..config import Config, PromptsConfig
from ..pipeline.files import read_user_text, write_json, write_jsonl
from ..pipeline.paths import StagePaths
from ..pipeline.records import TRAIN_ONLY, Domain, Prompt
from .language import language_name, other_language
from .mix import counts, mix, stratified_order
from .splits import SPLITS, assign_splits

log = logging.getLogger(__name__)

DOMAINS: tuple[str, ...] = get_args(Domain)
PAPER_N_PROMPTS = 19_994  # the paper's benchmark size (train 17,494 + dev 500 + test 2,000)
BIO_TEMPLATES = ("Write a biography of {}.", "Tell me a bio of {}.", "Tell me about {}.")
FILE_COLUMNS = ("id", "domain", "text", "references", "split", "meta", "response", "context")


# ------------------------------------------------------------------ bundled set
def bundled_path() -> Path:
    """The bundled prompt file inside the installed package."""
    return Path(str(resources.files("spanuq.data") / "bundled" / "prompts.jsonl"))


def load_bundled() -> list[Prompt]:
    """All bundled prompts, in file order."""
    path = bundled_path()
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    out.append(Prompt.model_validate_json(line))
                except ValidationError as e:
                    raise ValueError(f"{path}:{n}: not a valid prompt record ({e.errors()[0]['msg']})") from None
    return out


def _substratum(p: Prompt) -> str:
    """Inside a domain, interleave these so every prefix mixes easy and hard subjects."""
    return p.meta.get("popularity") or p.meta.get("kind") or p.meta.get("source") or ""


def order_domain(prompts: list[Prompt], seed: int) -> list[Prompt]:
    """One domain's prompts in selection order: hash-shuffled, sub-strata interleaved by size."""
    return stratified_order(prompts, seed, _substratum)


def select_prompts(prompts: list[Prompt], n: int | None, proportions: dict[str, float], seed: int) -> list[Prompt]:
    """``n`` prompts (None: all) mixed by domain ``proportions``; see :mod:`spanuq.data.mix`.

    Domains absent from ``proportions`` are used only after the others run out.
    """
    pools: dict[str, list[Prompt]] = {}
    for p in prompts:
        pools.setdefault(p.domain, []).append(p)
    ordered = {d: order_domain(ps, seed) for d, ps in pools.items()}
    return mix(ordered, {d: w for d, w in proportions.items() if w > 0}, n)


# ------------------------------------------------------------------ a user's file
def content_id(text: str, domain: str = "custom", prefix: str = "file") -> str:
    """A stable id from the content: ``file-<sha1[:12]>``."""
    digest = hashlib.sha1((domain + "\x1f" + text).encode("utf-8")).hexdigest()
    return f"{prefix}-{digest[:12]}"


def parse_references(value: Any, where: str, csv_cell: bool = False) -> list[str]:
    """References from a file: a list of strings or one string; in CSV, ``a|b|c`` or a JSON list."""
    if value is None:
        return []
    if isinstance(value, str):
        s = value.strip()
        if not s:
            return []
        if csv_cell:
            if s.startswith("["):
                try:
                    value = json.loads(s)
                except json.JSONDecodeError:
                    raise ValueError(f"{where}: `references` looks like a JSON list but is not valid JSON") from None
            else:
                return [r.strip() for r in s.split("|") if r.strip()]
        else:
            return [s]
    if isinstance(value, list) and all(isinstance(r, (str, int, float)) and not isinstance(r, bool) for r in value):
        return [str(r).strip() for r in value if str(r).strip()]
    raise ValueError(f"{where}: `references` must be a list of strings or a string, got {type(value).__name__}")


def _row_to_prompt(row: dict[str, Any], where: str, max_chars: int, csv_row: bool) -> Prompt:
    if "text" not in row or row["text"] is None:
        raise ValueError(f"{where}: missing `text`")
    text = row["text"]
    if not isinstance(text, str):
        raise ValueError(f"{where}: `text` must be a string, got {type(text).__name__}")
    text = text.strip()
    if not text:
        raise ValueError(f"{where}: empty `text`")
    if len(text) > max_chars:
        raise ValueError(f"{where}: `text` has {len(text):,} characters, more than the limit of "
                         f"{max_chars:,} (prompts.max_chars)")
    domain = row.get("domain")
    domain = domain.strip() if isinstance(domain, str) else domain
    if domain in (None, ""):
        domain = "custom"
    if domain not in DOMAINS:
        raise ValueError(f"{where}: domain {domain!r} is not one of {', '.join(DOMAINS)}")
    refs = parse_references(row.get("references"), where, csv_cell=csv_row)
    split = row.get("split")
    split = split.strip() if isinstance(split, str) else split
    if split in (None, ""):
        split = None
    elif split not in SPLITS:
        raise ValueError(f"{where}: split {split!r} is not one of {', '.join(SPLITS)}")
    response = row.get("response")
    if response in (None, ""):
        response = None
    elif not isinstance(response, str):
        raise ValueError(f"{where}: `response` must be a string, got {type(response).__name__}")
    elif not response.strip():
        raise ValueError(f"{where}: `response` is only whitespace (leave it out to let the backbone answer)")
    elif len(response) > max_chars:
        raise ValueError(f"{where}: `response` has {len(response):,} characters, more than the limit of "
                         f"{max_chars:,} (prompts.max_chars)")
    context = parse_context(row.get("context"), where, csv_cell=csv_row)
    pid = row.get("id")
    if isinstance(pid, (int, float)) and not isinstance(pid, bool):
        pid = str(pid)
    if pid is not None and not isinstance(pid, str):
        raise ValueError(f"{where}: `id` must be a string, got {type(pid).__name__}")
    keyed = text if response is None else text + "\x1f" + response
    if context is not None:  # the same question with other sources is another prompt
        keyed += "\x1f" + json.dumps(context, ensure_ascii=False, sort_keys=True)
    pid = (pid or "").strip() or content_id(keyed, domain)
    meta: dict[str, str] = {"source": "file"}
    extra = row.get("meta")
    if isinstance(extra, str) and csv_row and extra.strip().startswith("{"):
        try:
            extra = json.loads(extra)
        except json.JSONDecodeError:
            raise ValueError(f"{where}: `meta` looks like a JSON object but is not valid JSON") from None
    if isinstance(extra, dict):
        meta.update({str(k): v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for k, v in extra.items()})
    elif extra not in (None, ""):
        raise ValueError(f"{where}: `meta` must be an object")
    for k, v in row.items():  # any other column is kept as metadata
        if k not in FILE_COLUMNS and k is not None and v not in (None, ""):
            meta[str(k)] = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
    return Prompt(id=pid, domain=domain, text=text, references=refs, split=split, meta=meta, response=response,
                  context=context)


def parse_context(value: Any, where: str, csv_cell: bool = False) -> list | None:
    """A row's ``context`` (sources: a list of passages, `spanuq.context.passages`; in a CSV cell, a JSON
    list), checked as the scorer checks a request's; None when the row has none."""
    from ..context.passages import ContextError, as_passages
    from ..config import ScoreConfig

    if value is None or (csv_cell and isinstance(value, str) and not value.strip()):
        return None
    if csv_cell and isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(f"{where}: `context` must be a JSON list of passages in a CSV cell") from None
    limits = ScoreConfig()
    try:
        as_passages(value, limits.max_context_chars, limits.max_context_passages)
    except ContextError as e:
        raise ValueError(f"{where}: {e}") from None
    return list(value)


def _iter_jsonl_rows(path: Path, text: str) -> Iterable[tuple[int, dict]]:
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{n}: not valid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{n}: each line must be a JSON object with a `text` field, "
                             f"got {type(row).__name__}")
        yield n, row


def _iter_csv_rows(path: Path, text: str) -> Iterable[tuple[int, dict]]:
    import io

    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
    if reader.fieldnames is None:
        return
    fields = [(f or "").strip() for f in reader.fieldnames]
    if "text" not in fields:
        raise ValueError(f"{path}:1: no `text` column (columns: {', '.join(fields) or 'none'})")
    reader.fieldnames = fields
    prev = reader.line_num
    for row in reader:
        start, prev = prev + 1, reader.line_num
        if None in row:  # more cells than header columns
            raise ValueError(f"{path}:{start}: {len(fields) + len(row[None])} cells but the header has "
                             f"{len(fields)} columns (quote cells that contain '{delimiter}')")
        if all((v or "").strip() == "" for v in row.values()):
            continue
        yield start, row


def load_prompt_file(path: str | Path, max_chars: int = 20_000) -> list[Prompt]:
    """Prompts from a user's JSONL or CSV file; errors name the file and line.

    Columns/fields: ``text`` (required); ``domain`` (one of the Domain values, default
    ``custom``); ``references`` (JSONL: a list of strings or a string; CSV: alternatives
    separated by ``|``, or a JSON list); ``id`` (default: ``file-<sha1 of domain+text>``);
    ``split`` (train|dev|test, kept as given); ``meta`` (an object); ``response`` (an answer
    written elsewhere: it is labelled and read teacher-forced instead of the backbone's own
    answer, and the default id covers it, so one question may come with several answers);
    ``context`` (sources: a list of passages, strings or ``{"text", "id"?, "title"?}``; the backbone
    answers with them in its input and the label comes from them, docs/labels.md); any other column is kept in ``meta``.  Text may be in any language (UTF-8).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".json", ".ndjson", ".csv", ".tsv"):
        raise ValueError(f"{path}: unsupported file type {suffix or '(none)'!r}; use .jsonl or .csv")
    text = read_user_text(path, "prompts file")
    is_csv = suffix in (".csv", ".tsv")
    rows = _iter_csv_rows(path, text) if is_csv else _iter_jsonl_rows(path, text)
    out: list[Prompt] = []
    seen: dict[str, int] = {}
    for line, row in rows:
        where = f"{path}:{line}"
        p = _row_to_prompt(row, where, max_chars, csv_row=is_csv)
        if p.id in seen:
            what = "id" if row.get("id") not in (None, "") else "prompt (same domain and text)"
            raise ValueError(f"{where}: duplicate {what} {p.id!r}, first seen on line {seen[p.id]}")
        seen[p.id] = line
        out.append(p)
    if not out:
        raise ValueError(f"{path}: no prompts found (expected one JSON object or CSV row per prompt with a `text`)")
    return out


# ------------------------------------------------------------------ the stage
def with_splits(prompts: list[Prompt], pcfg: PromptsConfig) -> list[Prompt]:
    """Provisional splits stratified by domain; splits given in a user's file are kept."""
    todo = [i for i, p in enumerate(prompts) if p.split is None]
    if not todo:
        return prompts
    target = pcfg.split_sizes or pcfg.split_fractions
    if pcfg.split_sizes and len(todo) != len(prompts):
        target = pcfg.split_fractions  # sizes describe the whole set, not the unsplit rest
    sub = [prompts[i] for i in todo]
    splits = assign_splits(sub, [p.domain for p in sub], target, pcfg.seed)
    out = list(prompts)
    for i, s in zip(todo, splits):
        out[i] = prompts[i].model_copy(update={"split": s})
    return out


def build_prompts(pcfg: PromptsConfig, progress: bool = True) -> list[Prompt]:
    """The prompts of one run (before splits), by ``pcfg.source``."""
    if pcfg.n_prompts is not None and pcfg.n_prompts < 1:
        raise ValueError(f"prompts.n_prompts must be >= 1 or null (all), got {pcfg.n_prompts}")
    bad = {d: w for d, w in pcfg.proportions.items() if d not in DOMAINS or w < 0}
    if bad:
        raise ValueError(f"prompts.proportions: unknown domain or negative weight {bad}; domains: {', '.join(DOMAINS)}")
    if pcfg.source == "bundled":
        pool = load_bundled()
        chosen = select_prompts(pool, pcfg.n_prompts, pcfg.proportions, pcfg.seed)
    elif pcfg.source == "file":
        if not pcfg.file:
            raise ValueError("prompts.source=file needs prompts.file=<path to a .jsonl or .csv>")
        pool = load_prompt_file(pcfg.file, pcfg.max_chars)
        if pcfg.n_prompts is None or pcfg.n_prompts >= len(pool):
            chosen = pool  # the whole file, in file order
        else:  # keep the file's own domain mix
            own = {d: c / len(pool) for d, c in counts(pool, lambda p: p.domain).items()}
            chosen = select_prompts(pool, pcfg.n_prompts, own, pcfg.seed)
    elif pcfg.source == "hub":
        from .hub import load_hub_prompts

        chosen = load_hub_prompts(pcfg, pcfg.n_prompts or PAPER_N_PROMPTS, progress=progress)
        pool = chosen
    else:  # pragma: no cover - the config's Literal rejects it first
        raise ValueError(f"unknown prompts.source {pcfg.source!r}")
    if pcfg.n_prompts is not None and len(chosen) < pcfg.n_prompts:
        log.warning("prompts: asked for %d prompts, the %s source has %d", pcfg.n_prompts, pcfg.source, len(chosen))
    return chosen


def prompts_report(prompts: list[Prompt], pcfg: PromptsConfig) -> dict[str, Any]:
    """Counts per domain, per split, with/without references, and where the prompts came from."""
    n = len(prompts)
    per_domain = counts(prompts, lambda p: p.domain)
    per_split = {s: c for s, c in counts(prompts, lambda p: p.split or "none").items()}
    domain_split: dict[str, dict[str, int]] = {}
    refs_by_domain: dict[str, int] = {}
    for p in prompts:
        row = domain_split.setdefault(p.domain, {})
        row[p.split or "none"] = row.get(p.split or "none", 0) + 1
        refs_by_domain[p.domain] = refs_by_domain.get(p.domain, 0) + bool(p.references)
    bio = [p for p in prompts if p.domain == "biography"]
    with_refs = sum(bool(p.references) for p in prompts)
    return {
        "source": pcfg.source,
        "file": str(pcfg.file) if pcfg.source == "file" else None,
        "requested": pcfg.n_prompts,
        "n_prompts": n,
        "seed": pcfg.seed,
        "per_domain": {d: per_domain[d] for d in DOMAINS if d in per_domain},
        "domain_fractions": {d: round(per_domain[d] / n, 4) for d in DOMAINS if d in per_domain} if n else {},
        "target_proportions": dict(pcfg.proportions) if pcfg.source != "file" else None,
        "per_split": {s: per_split[s] for s in (*SPLITS, "none") if s in per_split},
        "per_domain_split": {d: {s: domain_split[d][s] for s in (*SPLITS, "none") if s in domain_split[d]}
                             for d in DOMAINS if d in domain_split},
        "with_references": with_refs,
        "without_references": n - with_refs,
        "with_references_per_domain": {d: refs_by_domain[d] for d in DOMAINS if d in refs_by_domain},
        "biography_popularity": counts(bio, lambda p: p.meta.get("popularity", "unknown")) if bio else {},
        "sources": counts(prompts, lambda p: p.meta.get("source", pcfg.source)),
        # prompts (or their given answers) clearly in another language than the teacher's and the probe's
        # English (spanuq.data.language)
        "other_languages": other_languages(prompts),
        # rows with sources in the backbone's input (a user's `context`, `prompts.grounded`)
        **({"with_context": sum(p.context is not None for p in prompts)} if any(p.context for p in prompts) else {}),
    }


def other_languages(prompts: list[Prompt]) -> dict[str, list[str]]:
    """``{language code: [prompt ids]}`` of the prompts clearly not in English, or whose given answer
    (``response``) is not (most first)."""
    found: dict[str, list[str]] = {}
    for p in prompts:
        guess = other_language(p.text) or (other_language(p.response) if p.response else None)
        if guess is not None:
            found.setdefault(guess.code, []).append(p.id)
    return dict(sorted(found.items(), key=lambda kv: -len(kv[1])))


def report_path(cfg: Config) -> Path:
    return StagePaths.from_config(cfg).prompts.with_name("prompts_report.json")


def added_to_train(pcfg: PromptsConfig) -> list[Prompt]:
    """The prompts of the ``prompts.add_train`` files, every one in the training split."""
    out = []
    for f in pcfg.add_train:
        for p in load_prompt_file(f, pcfg.max_chars):
            out.append(p.model_copy(update={"split": "train", "meta": {**p.meta, TRAIN_ONLY: "true",
                                                                        "added_from": str(f)}}))
    return out


def run_prompts(cfg: Config, progress: bool = True) -> Path:
    """DVC/Prefect entry point: write ``data/prompts.jsonl`` and ``data/prompts_report.json``."""
    pcfg = cfg.prompts
    from .grounded import grounded_prompts

    prompts = (with_splits(build_prompts(pcfg, progress=progress), pcfg) + added_to_train(pcfg)
               + grounded_prompts(pcfg.grounded, pcfg.seed))
    seen: dict[str, str] = {}
    for p in prompts:
        if p.id in seen:
            raise ValueError(f"prompt id {p.id!r} appears twice ({seen[p.id]} and {p.meta.get('added_from') or 'the run'}'s "
                             "prompts); every prompt needs its own id")
        seen[p.id] = p.meta.get("added_from") or "the run"
    out = StagePaths.from_config(cfg).prompts
    write_jsonl(out, prompts)
    report = prompts_report(prompts, pcfg)
    write_json(report_path(cfg), report)
    log.info("prompts: %d from %s %s, splits %s", len(prompts), pcfg.source, report["per_domain"], report["per_split"])
    if report["other_languages"]:
        log.warning("prompts: %d of %d prompts (or the answers given with them) look like another language than "
                    "English (%s; ids in %s): the offline teacher finds claims with English spaCy and the probe "
                    "learns from English answers", sum(map(len, report["other_languages"].values())), len(prompts),
                    ", ".join(f"{language_name(c)} {len(ids)}" for c, ids in report["other_languages"].items()),
                    report_path(cfg))
    return out
