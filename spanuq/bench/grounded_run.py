"""`spanuq bench grounded`: does û rank a fact the sources contradict above the one they state?

    run_grounded(cfg, probe="shipped")                    # the bundled pairs (spanuq/bench/grounded/pairs.jsonl)
    run_grounded(cfg, probe=..., facts="my_pairs.jsonl")  # the user's own pairs, same format

Every twin of every pair (`spanuq.bench.grounded`) is scored through the public API as a given
answer, twice: with the sources as the product takes them (``SpanUQ.score_many([{"prompt",
"response", "context"}])``, the headline row; only where the installed scorer takes ``context``)
and with the sources pasted above the question (``pasted``: the only way before ``context``
existed). A twin's slot score is the planted bench's (`spanuq.bench.planted_run.slot_score`: the
û of the shown span overlapping the slot most, û_seq when none does). Per pair:

    pair accuracy = 1 if slot score(planted) > slot score(correct), 0.5 on a tie, else 0

Controls on the same twins: string overlap with the sources as the backbone reads them, their
number words with their digits (1 − the share of the slot's words found in them,
`spanuq.bench.grounded.in_source`, `spanuq.context.numbers`); the backbone's surprisal of the slot given the
sources, −Σ log p(slot tokens | sources, question, answer before them), read after the same input
the headline row reads (`slot_nll`); the same surprisal without the sources (what the backbone
knows); an entity/number tagger (it cannot tell twins apart). Intervals: 95% bootstrap over
subjects (the pairs of one ``group`` are resampled together). Also: the share of right facts
at û ≥ 0.5 where the source states them (cases a–c: should be low) and where it is silent (case
d: unsupported, should be high).

Writes ``data/<backbone>/bench/grounded.{json,md}`` (``--name`` changes the stem); each twin's
readings are kept beside it by content (``grounded-cache.jsonl``), so a run that stopped, or a
second run with another reading, reads only what is new.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from ..config import Config
from ..pipeline.cache import content_hash
from ..pipeline.files import iter_jsonl, read_json, sha256_file, write_json, write_jsonl
from ..context.numbers import with_digits
from .grounded import CASE_NAMES, CASES, KINDS, PAIRS, GroundedPair, in_source, pasted, read_pairs
from .metrics import mean_ci
from .planted_run import COVER_IOU, fmt, outcome, slot_nll, slot_score, tagged

READINGS = ("context", "pasted")  # the product with `context`; the sources pasted into the prompt
CONTROLS = ("overlap", "surprisal_source", "surprisal_none", "tagger")
NAMES = {"context": "SpanUQ û (context)", "pasted": "SpanUQ û (pasted)", "overlap": "string overlap",
         "surprisal_source": "surprisal given source", "surprisal_none": "surprisal, no source",
         "tagger": "entity+number tagger"}


def takes_context() -> bool:
    """Whether the installed scorer takes sources as ``context`` (a `ScoreRequest` field)."""
    from ..score.schema import ScoreRequest

    return "context" in ScoreRequest.model_fields


def source_chat(uq, prompt: str, context: tuple[str, ...], reading: str) -> str:
    """The backbone's input the answer is read after: the product's rendering of the sources
    (`spanuq.context.chat.question_chat`) for ``context``, the chat-templated pasted prompt for ``pasted``."""
    from ..llm.loading import chat_prompt

    if reading == "context":
        from ..context.chat import question_chat

        return question_chat(uq.tok, prompt, context, uq.system_prompt).chat
    return chat_prompt(uq.tok, pasted(prompt, context), uq.system_prompt)


def requests(pairs: list[GroundedPair], reading: str) -> list[tuple[tuple, dict]]:
    """(key, score request) of each twin of each pair, correct then planted."""
    out = []
    for p in pairs:
        for t in (p.correct, p.planted):
            if reading == "context":
                out.append(((p.prompt, p.context, t.text), {"prompt": p.prompt, "response": t.text,
                                                             "context": list(p.context)}))
            else:
                q = pasted(p.prompt, p.context)
                out.append(((q, t.text), {"prompt": q, "response": t.text}))
    return out


class Cache:
    """Per-twin results of a run, kept by content (what was read, by which probe and mapping), so an
    interrupted or partial run (``readings=("pasted",)`` first, ``context`` later) reads nothing twice.
    Errors are never kept."""

    def __init__(self, path: Path | None):
        self.path = path
        self.have = {x["key"]: x["value"] for x in iter_jsonl(path)} if path is not None and path.exists() else {}

    def values(self, keys: list[str], compute) -> list:
        """The value of each key: kept ones as kept, the others from ``compute(indices)`` (then kept).
        The file is read again first: another run may have kept some since."""
        if self.path is not None and self.path.exists():
            self.have.update({x["key"]: x["value"] for x in iter_jsonl(self.path)})
        todo = [i for i, k in enumerate(keys) if k not in self.have]
        if todo:
            new = dict(zip(todo, compute(todo)))
            self.have.update({keys[i]: v for i, v in new.items() if not isinstance(v, str)})
            if self.path is not None:
                write_jsonl(self.path, [{"key": k, "value": v} for k, v in self.have.items()])
            return [new[i] if i in new else self.have[k] for i, k in enumerate(keys)]
        return [self.have[k] for k in keys]


def score_reading(uq, pairs: list[GroundedPair], reading: str, progress: bool, cache: Cache) -> list[dict | str]:
    """Per twin (correct, planted of each pair): its slot score, the slot's cover and û_seq under
    ``reading``, or the error text."""
    reqs = requests(pairs, reading)
    twins = [t for p in pairs for t in (p.correct, p.planted)]
    mapping = uq.calibration.for_source("given", grounded=reading == "context").as_dict()
    rendered = [source_chat(uq, p.prompt, p.context, reading) if reading == "context" else None
                for p in pairs for _ in (0, 1)]  # the sources as the product renders them
    keys = [content_hash({"reading": reading, "probe": uq.probe_source, "calibration": mapping,
                          "system": uq.system_prompt, "request": req, "slot": list(t.slot),
                          "focus": uq.cfg.score.context_focus_tokens, **({"input": chat} if chat else {})})
            for (_, req), t, chat in zip(reqs, twins, rendered)]

    def compute(todo: list[int]) -> list:
        distinct = dict(reqs[i] for i in todo)
        res = dict(zip(distinct, uq.score_many(list(distinct.values()), progress=progress, return_errors=True)))
        out = []
        for i in todo:
            r = res[reqs[i][0]]
            if isinstance(r, Exception):
                out.append(f"{reading}: {r}")
                continue
            u, iou = slot_score(r, twins[i].slot)
            out.append({"u": u, "iou": iou, "covered": iou >= COVER_IOU, "status": r.status, "flag": r.flag_threshold,
                        "u_seq": float(r.u_seq) if r.u_seq is not None else None})
        return out

    return cache.values(keys, compute)


def slot_nll_cached(uq, contexts: list[str], twins: list, cache: Cache) -> list[tuple[float, float]]:
    keys = [content_hash({"nll": uq.backbone_name, "context": c, "text": t.text, "slot": list(t.slot)})
            for c, t in zip(contexts, twins)]
    return cache.values(keys, lambda todo: [list(x) for x in slot_nll(uq, [contexts[i] for i in todo],
                                                                      [twins[i] for i in todo])])


def score_pairs(uq, pairs: list[GroundedPair], nlp, readings: tuple[str, ...], progress: bool,
                cache: Cache | None = None) -> list[dict]:
    """Every reading's and control's score of both twins of every pair. The surprisal given the
    sources is read after the product's rendering where the scorer takes ``context``."""
    from ..llm.loading import chat_prompt

    cache = cache or Cache(None)
    twins = [t for p in pairs for t in (p.correct, p.planted)]
    ctx = [p.context for p in pairs for _ in (0, 1)]
    by_reading = {r: score_reading(uq, pairs, r, progress, cache) for r in readings}
    control = "context" if takes_context() else "pasted"
    given = slot_nll_cached(uq, [source_chat(uq, p.prompt, p.context, control) for p in pairs for _ in (0, 1)],
                            twins, cache)
    none = slot_nll_cached(uq, [chat_prompt(uq.tok, p.prompt, uq.system_prompt) for p in pairs for _ in (0, 1)],
                           twins, cache)
    tags = tagged(nlp, twins)
    rows = []
    for i, p in enumerate(pairs):
        row = {"pair": p.as_dict()}
        for j, name in enumerate(("correct", "planted")):
            k = 2 * i + j
            errors = [by_reading[r][k] for r in readings if isinstance(by_reading[r][k], str)]
            if errors:
                row["error"] = f"{name}: {errors[0]}"
                break
            t = (p.correct, p.planted)[j]
            row[name] = {**{r: by_reading[r][k]["u"] for r in readings},
                         **{f"{r}_detail": by_reading[r][k] for r in readings},
                         "overlap": 1.0 - in_source(t.value, [with_digits(c) for c in ctx[k]]),  # as read
                         "surprisal_source": given[k][0],
                         "surprisal_none": none[k][0], "tagger": tags[k]}
        rows.append(row)
    return rows


def summarise(rows: list[dict], methods: tuple[str, ...], readings: tuple[str, ...], bootstrap: int,
              seed: int) -> dict:
    """Pair accuracy of every method by case × kind (and over all kinds, all cases a–c), and the
    share of right facts at û ≥ 0.5 by case; pairs that could not be scored are counted."""
    ok = [r for r in rows if "error" not in r]
    cells: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in ok:
        case, kind = r["pair"]["case"], r["pair"]["kind"]
        for key in ((case, kind), (case, "all")) + (((("a–c", kind), ("a–c", "all"))) if case != "d" else ()):
            cells[key].append(r)
    order = {k: i for i, k in enumerate(CASES + ("a–c", "all") + KINDS)}
    table = []
    for (case, kind), rs in sorted(cells.items(), key=lambda kv: (order[kv[0][0]], order[kv[0][1]])):
        groups = np.array([r["pair"]["group"] for r in rs])
        row = {"case": case, "kind": kind, "pairs": len(rs), "subjects": len(set(groups)),
               "coverage": {x: float(np.mean([r["correct"][f"{x}_detail"]["covered"] and
                                              r["planted"][f"{x}_detail"]["covered"] for r in rs])) for x in readings}}
        for m in methods:
            row[m] = mean_ci(np.array([outcome(r["planted"][m], r["correct"][m]) for r in rs]), bootstrap, seed,
                             groups=groups)
        right = {x: mean_ci(np.array([float(r["correct"][x] >= 0.5) for r in rs]), bootstrap, seed, groups=groups)
                 for x in readings}
        row["right_u_ge_0.5"] = right
        row["wrong_u_ge_0.5"] = {x: mean_ci(np.array([float(r["planted"][x] >= 0.5) for r in rs]), bootstrap, seed,
                                             groups=groups) for x in readings}
        table.append(row)
    return {"pairs": len(rows), "scored_pairs": len(ok), "errors": [r["error"] for r in rows if "error" in r],
            "table": table}


def markdown(record: dict) -> str:
    s, methods, readings = record["summary"], record["methods"], record["readings"]
    lines = [f"# Grounded pairs: {record['probe']['source']}", "",
             f"{s['scored_pairs']} of {s['pairs']} pairs scored ({record['facts']}); pair accuracy = share of pairs whose "
             "planted slot scores above the correct one (ties 0.5), 95% bootstrap over subjects. Cases: "
             + "; ".join(f"({k}) {v}" for k, v in CASE_NAMES.items()) + ".", "",
             "| case | kind | pairs | " + " | ".join(NAMES[m] for m in methods) + " | "
             + " | ".join(f"right at û ≥ 0.5 ({x}) | wrong at û ≥ 0.5 ({x})" for x in readings) + " |",
             "|---|---|---|" + "---|" * (len(methods) + 2 * len(readings))]
    for r in s["table"]:
        lines.append(f"| {r['case']} | {r['kind']} | {r['pairs']} | " + " | ".join(fmt(r[m]) for m in methods)
                     + " | " + " | ".join(f"{fmt(r['right_u_ge_0.5'][x])} | {fmt(r['wrong_u_ge_0.5'][x])}"
                                          for x in readings) + " |")
    lines += ["", "Right / wrong at û ≥ 0.5: the share of correct / planted twins whose slot reads likely wrong "
              "(right ones, cases a–c: the source states the fact, lower is better; case d: the source is silent, "
              "so the right value is unsupported too)."]
    return "\n".join(lines) + "\n"


def run_grounded(cfg: Config, probe: str | None = None, facts: str | Path | None = None, name: str = "grounded",
                 bootstrap: int = 1000, seed: int = 0, progress: bool = True, limit: int | None = None,
                 readings: tuple[str, ...] | None = None) -> Path:
    """Read the pairs, score them under each reading and every control, write the table; returns the
    JSON file. ``readings``: default ``context`` and ``pasted`` where the scorer takes ``context``,
    else ``pasted`` alone. ``limit``: the pairs of the first N subjects only (a quick look)."""
    from .. import SpanUQ
    from ..label.units import load_spacy
    from ..model.checkpoint import calibration_sha256
    from ..score.scorer import resolve_checkpoint

    readings = readings or (READINGS if takes_context() else ("pasted",))
    bad = set(readings) - set(READINGS)
    if bad or not readings:
        raise ValueError(f"unknown readings {sorted(bad)}; choose from {', '.join(READINGS)}")
    if "context" in readings and not takes_context():
        raise ValueError("this scorer takes no `context`: read the sources pasted (readings=('pasted',))")
    pairs = read_pairs(facts or PAIRS)
    if limit is not None:
        subjects = set(list(dict.fromkeys(p.group for p in pairs))[:limit])
        pairs = [p for p in pairs if p.group in subjects]
    ckpt = resolve_checkpoint(probe, cfg)
    backbone = (read_json(ckpt / "config.json").get("extra") or {}).get("backbone") or cfg.backbone.name
    nlp = load_spacy(cfg.label.spacy_model)
    bench_dir = Path(cfg.paths.data) / backbone / "bench"
    with SpanUQ.load(ckpt, cfg=cfg) as uq:
        scored = score_pairs(uq, pairs, nlp, readings, progress, Cache(bench_dir / f"{name}-cache.jsonl"))
        probe_info = {"path": str(uq.checkpoint), "source": uq.probe_source,
                      "sha256": sha256_file(ckpt / "model.safetensors"), "calibration_sha256": calibration_sha256(ckpt)}
    methods = readings + CONTROLS
    record = {"benchmark": "grounded pairs", "probe": probe_info, "facts": str(facts or PAIRS),
              "readings": list(readings), "methods": list(methods),
              "surprisal_source_read_after": "context" if takes_context() else "pasted",
              "bootstrap": {"resamples": bootstrap, "unit": "subject", "seed": seed},
              "summary": summarise(scored, methods, readings, bootstrap, seed), "items": scored}
    out = bench_dir / f"{name}.json"
    write_json(out, record)
    out.with_suffix(".md").write_text(markdown(record), encoding="utf-8")
    return out
