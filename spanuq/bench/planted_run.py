"""`spanuq bench planted`: does û rank a planted wrong fact above the right one?

    run_planted(cfg, probe="shipped")                       # the bundled pair files, every source
    run_planted(cfg, probe=..., facts="my_prompts.jsonl", sources=("templated", "own"))

Every twin of every pair (`spanuq.bench.planted`) is scored through the public API as a given
answer, ``SpanUQ.score_many([{"prompt", "response"}])``. A twin's *slot score* is the û of the
shown span that overlaps its slot most (character IoU; the evaluate stage's rule), or the
answer's û_seq when no shown span touches it; the slot is *covered* when that overlap reaches
IoU 0.3. Per pair:

    pair accuracy = 1 if slot score(planted) > slot score(correct), 0.5 on a tie, else 0

Controls on the same twins: the backbone's own surprisal of the slot, −Σ log p(slot tokens |
prompt, answer before them) and its per-token mean (teacher-forced, what the backbone knows); an
entity/number tagger (1 where spaCy or a number pattern marks the slot, else 0: it cannot tell
twins apart); û_seq. Intervals: 95% bootstrap over questions (the pairs of one question are
resampled together). Also reported: the share of correct slots a reader sees as likely wrong
(û ≥ 0.5, û ≥ the display threshold) and the ECE of slot scores against 0 (correct) / 1
(planted).

Writes ``data/<backbone>/bench/planted.{json,md}`` (``--name`` changes the stem); the backbone's
own answers are cached beside it (``planted-answers.jsonl``), so a re-run generates nothing.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from ..config import Config
from ..metrics.ece import expected_calibration_error
from ..pipeline.cache import content_hash
from ..pipeline.files import iter_jsonl, read_json, sha256_file, write_json, write_jsonl
from .metrics import mean_ci
from .planted import FACTS, PASTED, SOURCES, PlantedPair, Twin, own_pairs, pasted_pairs, read_facts, templated_pairs, \
    templates

COVER_IOU = 0.3
METHODS = ("spanuq", "surprisal_sum", "surprisal_mean", "tagger", "u_seq")
NAMES = {"spanuq": "SpanUQ û", "surprisal_sum": "surprisal (slot)", "surprisal_mean": "surprisal / token",
         "tagger": "entity+number tagger", "u_seq": "û_seq"}


def slot_score(result, slot: tuple[int, int]) -> tuple[float, float]:
    """(û of the shown span overlapping ``slot`` most — û_seq when none does, its IoU)."""
    from ..model.span_ops import char_iou

    best, u = 0.0, float(result.u_seq)
    for s in result.spans:
        iou = char_iou((s.start, s.end), slot)
        if iou > best:
            best, u = iou, float(s.u)
    return u, best


def own_answers(uq, rows: list[dict], cache: Path, progress: bool) -> dict[str, str]:
    """The backbone's answer to each row's question, generated once and cached by content."""
    keyed = {r["id"]: content_hash({"backbone": uq.backbone_name, "prompt": r["text"], "system": uq.system_prompt,
                                    "max_new_tokens": uq.cfg.score.max_new_tokens, "stop": uq.cfg.generate.stop})
             for r in rows}
    have = {x["key"]: x["answer"] for x in iter_jsonl(cache)} if cache.exists() else {}
    todo = [r for r in rows if keyed[r["id"]] not in have]
    if todo:
        results = uq.score_many([r["text"] for r in todo], progress=progress, return_errors=True)
        new = [{"key": keyed[r["id"]], "prompt": r["text"], "answer": res.answer}
               for r, res in zip(todo, results) if not isinstance(res, Exception)]  # a failure is not cached
        write_jsonl(cache, [{"key": k, "answer": a} for k, a in have.items()] + new)
        have.update({x["key"]: x["answer"] for x in new})
    return {i: have[k] for i, k in keyed.items() if k in have}


def slot_surprisal(uq, prompts: list[str], twins: list[Twin], batch_size: int = 8) -> list[tuple[float, float]]:
    """(−Σ log p, its mean per token) of each twin's slot tokens, teacher-forced after the
    chat-templated prompt: the tokens whose characters overlap the slot."""
    from ..llm.loading import chat_prompt

    return slot_nll(uq, [chat_prompt(uq.tok, p, uq.system_prompt) for p in prompts], twins, batch_size)


def slot_nll(uq, contexts: list[str], twins: list[Twin], batch_size: int = 8) -> list[tuple[float, float]]:
    """(−Σ log p, its mean per token) of each twin's slot tokens, teacher-forced after ``contexts``
    (strings the backbone reads before the answer, as they are)."""
    from ..llm.loading import token_ids, token_offsets
    from ..llm.states import token_logprobs

    out = []
    for s in range(0, len(twins), batch_size):
        cs, ts = contexts[s: s + batch_size], twins[s: s + batch_size]
        enc = [token_offsets(uq.tok, t.text) for t in ts]
        pids = [token_ids(uq.tok, c) for c in cs]
        lps = token_logprobs(uq.model, pids, [ids for ids, _ in enc], uq.tok.pad_token_id or 0)
        for t, (_, offs), lp in zip(ts, enc, lps):
            idx = [k for k, (a, b) in enumerate(offs) if b > t.slot[0] and a < t.slot[1]]
            nll = -lp[idx] if idx else np.zeros(1)
            out.append((float(nll.sum()), float(nll.mean())))
    return out


def tagged(nlp, twins: list[Twin]) -> list[float]:
    from .controls import entity_number_spans

    spans = entity_number_spans(nlp, [t.text for t in twins])
    return [float(any(e > t.slot[0] and s < t.slot[1] for s, e in sp)) for t, sp in zip(twins, spans)]


def outcome(planted: float, correct: float) -> float:
    return 1.0 if planted > correct + 1e-12 else (0.5 if abs(planted - correct) <= 1e-12 else 0.0)


def score_pairs(uq, pairs: list[PlantedPair], nlp, progress: bool) -> list[dict]:
    """Every method's score of both twins of every pair (one `score_many` over distinct twins)."""
    twins = [(p.prompt, t) for p in pairs for t in (p.correct, p.planted)]
    distinct = list(dict.fromkeys((q, t.text) for q, t in twins))
    res = uq.score_many([{"prompt": q, "response": a} for q, a in distinct], progress=progress, return_errors=True)
    by_text = dict(zip(distinct, res))
    surprisal = slot_surprisal(uq, [q for q, _ in twins], [t for _, t in twins])
    tags = tagged(nlp, [t for _, t in twins])
    rows = []
    for i, p in enumerate(pairs):
        row = {"pair": p.as_dict()}
        for j, (name, twin) in enumerate((("correct", p.correct), ("planted", p.planted))):
            r = by_text[(p.prompt, twin.text)]
            if isinstance(r, Exception):
                row["error"] = f"{name}: {r}"
                break
            u, iou = slot_score(r, twin.slot)
            row[name] = {"spanuq": u, "iou": iou, "covered": iou >= COVER_IOU, "u_seq": float(r.u_seq),
                         "surprisal_sum": surprisal[2 * i + j][0], "surprisal_mean": surprisal[2 * i + j][1],
                         "tagger": tags[2 * i + j], "status": r.status, "flag": r.flag_threshold}
        rows.append(row)
    return rows


def summarise(rows: list[dict], bootstrap: int, seed: int) -> dict:
    """Pair accuracy of every method by source × kind (and all pairs), coverage, and the correct
    slots' scores; pairs that could not be scored are counted, never dropped silently."""
    ok = [r for r in rows if "error" not in r]
    cells: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in ok:
        p = r["pair"]
        for key in ((p["source"], p["kind"]), (p["source"], "all"), ("all", p["kind"]), ("all", "all")):
            cells[key].append(r)
        if p["knew"] is not None:
            cells[("own, knew" if p["knew"] else "own, did not know", "all")].append(r)
    table = []
    order = {k: i for i, k in enumerate(("templated", "own", "own, knew", "own, did not know", "pasted", "all",
                                         "year", "number", "person", "place", "entity"))}
    for (source, kind), rs in sorted(cells.items(), key=lambda kv: (order.get(kv[0][0], 99), order.get(kv[0][1], 99))):
        groups = np.array([r["pair"]["group"] for r in rs])
        row = {"source": source, "kind": kind, "pairs": len(rs), "questions": len(set(groups)),
               "coverage": float(np.mean([r["correct"]["covered"] and r["planted"]["covered"] for r in rs]))}
        for m in METHODS:
            acc = np.array([outcome(r["planted"][m], r["correct"][m]) for r in rs])
            row[m] = mean_ci(acc, bootstrap, seed, groups=groups)
        table.append(row)
    correct = np.array([r["correct"]["spanuq"] for r in ok])
    planted = np.array([r["planted"]["spanuq"] for r in ok])
    flag_c = np.array([r["correct"].get("flag", 0.5) for r in ok])
    flag_p = np.array([r["planted"].get("flag", 0.5) for r in ok])
    unverified = np.array([r["correct"].get("status") == "unverified" for r in ok])
    return {"pairs": len(rows), "scored_pairs": len(ok), "errors": [r["error"] for r in rows if "error" in r],
            "table": table,
            "correct_slots": {"n": len(correct), "mean_u": float(correct.mean()) if len(correct) else None,
                              "share_u_ge_0.5": float((correct >= 0.5).mean()) if len(correct) else None,
                              "share_likely_wrong": float((correct >= flag_c).mean()) if len(correct) else None},
            "planted_slots": {"n": len(planted), "mean_u": float(planted.mean()) if len(planted) else None,
                              "share_u_ge_0.5": float((planted >= 0.5).mean()) if len(planted) else None,
                              "share_likely_wrong": float((planted >= flag_p).mean()) if len(planted) else None},
            "unverified_pairs": int(unverified.sum()),
            "scored_only": {"pairs": int((~unverified).sum()),
                            "spanuq": float(np.mean([outcome(p, c) for p, c, u in zip(planted, correct, unverified)
                                                     if not u])) if (~unverified).any() else None},
            "ece": expected_calibration_error(np.r_[np.zeros(len(correct)), np.ones(len(planted))],
                                              np.r_[correct, planted]) if len(ok) else None}


def fmt(m: dict) -> str:
    if m.get("value") is None:
        return "–"
    ci = m.get("ci")
    return f"{m['value']:.3f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def markdown(record: dict) -> str:
    s = record["summary"]
    lines = [f"# Planted pairs: {record['probe']['source']}", "",
             f"{s['scored_pairs']} of {s['pairs']} pairs scored; pair accuracy = share of pairs whose planted slot "
             "scores above the correct one (ties 0.5), 95% bootstrap over questions.", "",
             "| source | kind | pairs | questions | " + " | ".join(NAMES[m] for m in METHODS) + " | coverage |",
             "|---|---|---|---|" + "---|" * len(METHODS) + "---|"]
    for r in s["table"]:
        lines.append(f"| {r['source']} | {r['kind']} | {r['pairs']} | {r['questions']} | "
                     + " | ".join(fmt(r[m]) for m in METHODS) + f" | {r['coverage']:.2f} |")
    if record.get("refine"):
        lines += ["", "Refine (regenerate): what it did to answers that were right and to answers that were wrong", "",
                  "| answers | right | right → wrong | wrong | wrong → right | changed |", "|---|---|---|---|---|---|"]
        rows = [(f"{k} twins", v) for k, v in record["refine"]["pairs"].items()]
        rows.append(("the backbone's own answers", record["refine"]["own_answers"]))
        for name, v in rows:
            lines.append(f"| {name} | {v.get('right', 0)} | {v.get('right_to_wrong', 0)} | {v.get('wrong', 0)} | "
                         f"{v.get('wrong_to_right', 0)} | {v.get('changed', 0)} |")
        cases = record["refine"].get("cases") or []
        if cases:
            lines += ["", "What refine changed the verdict of (before → after)", ""]
            for c in cases:
                lines.append(f"- {c['outcome'].replace('_', ' ')} ({c['source']}): {c['prompt']!r}: "
                             f"{c['before']!r} → {c['after']!r}")
    c, p = s["correct_slots"], s["planted_slots"]
    if c["n"]:
        lines += ["", f"Correct slots: mean û {c['mean_u']:.3f}, {c['share_u_ge_0.5']:.1%} at û ≥ 0.5, "
                  f"{c['share_likely_wrong']:.1%} shown as likely wrong (û ≥ the display threshold); planted slots: "
                  f"mean û {p['mean_u']:.3f}, {p['share_u_ge_0.5']:.1%} at û ≥ 0.5, {p['share_likely_wrong']:.1%} "
                  f"shown as likely wrong; ECE of slot scores vs 0/1 {s['ece']:.3f}."]
        if s.get("unverified_pairs"):
            so = s["scored_only"]
            lines.append(f"{s['unverified_pairs']} pairs' correct twin is unverified (the backbone does not know the "
                         f"subject); SpanUQ's pair accuracy over the {so['pairs']} others: "
                         + ("–" if so["spanuq"] is None else f"{so['spanuq']:.3f}") + ".")
    return "\n".join(lines) + "\n"


def run_planted(cfg: Config, probe: str | None = None, facts: str | Path | None = None,
                pasted: str | Path | None = None, sources: tuple[str, ...] = SOURCES, name: str = "planted",
                bootstrap: int = 1000, seed: int = 0, progress: bool = True, limit: int | None = None,
                refine: bool = False) -> Path:
    """Build the pairs, score them and every control, write the table; returns the JSON file.
    ``refine``: also refine every twin and the backbone's own answers and count what got worse
    (`spanuq.bench.planted_refine`)."""
    from .. import SpanUQ
    from ..label.units import load_spacy
    from ..score.scorer import resolve_checkpoint

    bad = set(sources) - set(SOURCES)
    if bad:
        raise ValueError(f"unknown sources {sorted(bad)}; choose from {', '.join(SOURCES)}")
    ckpt = resolve_checkpoint(probe, cfg)
    backbone = (read_json(ckpt / "config.json").get("extra") or {}).get("backbone") or cfg.backbone.name
    bench_dir = Path(cfg.paths.data) / backbone / "bench"
    rows = read_facts(Path(facts) if facts else FACTS)[:limit]
    nlp = load_spacy(cfg.label.spacy_model)
    pairs: list[PlantedPair] = []
    skipped: dict[str, str] = {}
    refined = None
    with SpanUQ.load(ckpt, cfg=cfg) as uq:
        if "templated" in sources:
            pairs += templated_pairs(rows, templates())
        answers = own_answers(uq, rows, bench_dir / f"{name}-answers.jsonl", progress) \
            if "own" in sources or refine else {}
        if "own" in sources:
            own, skipped = own_pairs(rows, answers, nlp)
            pairs += own
        if "pasted" in sources:
            pairs += pasted_pairs(Path(pasted) if pasted else PASTED)[:limit]
        scored = score_pairs(uq, pairs, nlp, progress)
        if refine:
            from .planted_refine import refine_own, refine_twins

            twins, twin_cases = refine_twins(uq, pairs, {r["id"]: r["references"] for r in rows}, progress)
            own_refined, own_cases = refine_own(uq, rows, answers, progress)
            refined = {"pairs": twins, "own_answers": own_refined,
                       "cases": twin_cases + [{**c, "source": "own answer"} for c in own_cases]}
        from ..model.checkpoint import calibration_sha256

        probe_info = {"path": str(uq.checkpoint), "source": uq.probe_source,
                      "sha256": sha256_file(ckpt / "model.safetensors"), "calibration_sha256": calibration_sha256(ckpt)}
    record = {"benchmark": "planted pairs", "probe": probe_info, "sources": list(sources),
              "facts": str(facts or FACTS), "pasted": str(pasted or PASTED) if "pasted" in sources else None,
              "own_skipped": skipped, "bootstrap": {"resamples": bootstrap, "unit": "question", "seed": seed},
              "summary": summarise(scored, bootstrap, seed), "refine": refined, "items": scored}
    out = bench_dir / f"{name}.json"
    write_json(out, record)
    out.with_suffix(".md").write_text(markdown(record), encoding="utf-8")
    return out
