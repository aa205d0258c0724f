"""`spanuq bench real`: the product's own output on real passages with people's marks (`spanuq.bench.real`).

    run_real(cfg, probe="shipped")                       # WiCE test, XQuAD test swaps, own answers
    run_real(cfg, probe="shipped", parts=("marked",), data="mine.jsonl")   # your own marked file

Every item goes through `SpanUQ.score_many` as a user's call would (the answer, its question, ``context``); the
controls read the same items.  Each item's product reading is kept by content beside the output
(``real-cache.jsonl``), so a stopped run, or a second one, reads only what is new.  Writes
``data/<backbone>/bench/real.{json,md}`` with the seconds each part took.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ..config import Config
from ..data.real import RealItem, load_items
from ..metrics.ece import expected_calibration_error
from ..metrics.uq import percentile_ci, rank_auroc, resample_indices
from ..pipeline.cache import content_hash
from ..pipeline.files import iter_jsonl, read_json, sha256_file, write_json
from .grounded_run import Cache
from .metrics import mean_ci
from .planted_run import slot_score
from .real import (CONTROLS, NAMES, absent_words, char_scores, pair_outcome, scored_words, span_word_scores,
                   task_scores, word_chars, word_labels)

PARTS = ("marked", "swaps", "own", "passages")
CONTROL_PIECE = 4_000  # characters of a source the surprisal control reads as one passage


def _request(it: RealItem, response: bool = True) -> dict:
    return {"prompt": it.question, "context": it.sources, **({"response": it.answer} if response else {})}


def product(uq, items: list[RealItem], cache: Cache, progress: bool, response: bool = True) -> list[dict | str]:
    """Per item, what the product returns (its answer, spans, û_seq, red line, status), or the error text."""
    reader = getattr(uq, "reader", None)
    who = {"probe": uq.probe_source, "reader": None if reader is None else sha256_file(reader.folder / "model.safetensors"),
           "calibration": uq.calibration.as_dict()}
    keys = [content_hash({"real": 1, **who, "request": _request(it, response)}) for it in items]

    def compute(todo: list[int]) -> list:
        res = uq.score_many([_request(items[i], response) for i in todo], progress=progress, return_errors=True)
        return [f"{type(r).__name__}: {r}" if isinstance(r, Exception) else
                {"answer": r.answer, "spans": [[s.start, s.end, s.u, s.passage] for s in r.spans], "u_seq": r.u_seq,
                 "flag": r.flag_threshold, "status": r.status, "calibration": r.calibration_source} for r in res]

    return cache.values(keys, compute)


def _spans(r: dict) -> list[tuple[int, int, float]]:
    return [(s[0], s[1], s[2]) for s in r["spans"]]


def surprisal_words(uq, it: RealItem, answer: str, words: list[tuple[int, int]]) -> np.ndarray:
    """Per word, the backbone's surprisal of its tokens (summed) read after the sources — after every window of
    them, the lowest (`spanuq.score.grounded.windows_for`: all of the sources, nothing focused; a run of more than
    `CONTROL_PIECE` characters without a space, which no window could hold, is read in pieces of that length)."""
    from ..context.passages import Passage
    from ..score.grounded import windows_for

    limits = uq.cfg.score.model_copy(update={"context_focus_tokens": 0, "max_context_windows": 10_000})
    passages = []
    for k, p in enumerate(it.sources, 1):
        text = p["text"]
        for s in range(0, len(text), CONTROL_PIECE):
            passages.append(Passage(f"{p.get('id', k)}:{s}", text[s: s + CONTROL_PIECE]))
    windows = windows_for(uq.tok, [{"role": "user", "content": it.question}], passages, uq.system_prompt,
                          uq.max_context, len(uq.tok(answer)["input_ids"]) + 1, limits)
    best = None
    for w in windows:
        s, offsets = uq.surprisal_after(w.chat, answer)
        best = s if best is None else np.minimum(best, s)
    return np.array([float(sum(x for x, (a, b) in zip(best, offsets) if a < e and b > s_)) for s_, e in words])


def _auroc_ci(y, s, groups, bootstrap: int, seed: int) -> dict:
    y, s = np.asarray(y, bool), np.asarray(s, float)
    if y.all() or not y.any():
        return {"value": None}
    out = {"value": round(rank_auroc(y, s), 4)}
    if bootstrap:
        vals = [rank_auroc(y[i], s[i]) for i, _ in resample_indices(np.asarray(groups), len(y), bootstrap, seed)
                if 0 < y[i].sum() < len(i)]
        out["ci"] = [round(x, 4) for x in percentile_ci(vals)]
    return out


def marked_part(uq, items: list[RealItem], nlp, cache: Cache, progress: bool, bootstrap: int, seed: int) -> dict:
    from .controls import entity_number_spans

    got = product(uq, items, cache, progress)
    tags = entity_number_spans(nlp, [it.answer for it in items])
    sur_cache = Cache(cache.path.with_name(cache.path.stem + "-surprisal.jsonl") if cache.path else None)
    sur = sur_cache.values([content_hash({"surprisal": uq.backbone_name, "q": it.question, "sources": it.sources,
                                          "answer": it.answer}) for it in items],
                           lambda todo: [surprisal_words(uq, items[i], items[i].answer, scored_words(items[i].answer)
                                                         ).tolist() for i in todo])
    rows = {m: {"y": [], "s": [], "g": [], "iou": [], "cor": []} for m in ("spanuq",) + CONTROLS}
    errors, statuses = [], {}
    for it, r, tag, su in zip(items, got, tags, sur):
        if isinstance(r, str):
            errors.append(r)
            continue
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
        a, words = it.answer, scored_words(it.answer)
        y = word_labels(words, it.marks)
        su = np.asarray(su, float)
        scores = {"spanuq": span_word_scores(words, _spans(r)),
                  "absent": absent_words(a, [p["text"] for p in it.sources], words),
                  "surprisal": su / max(su.max(initial=0.0), 1e-9),
                  "tagger": span_word_scores(words, [(s, e, 1.0) for s, e in tag]),
                  "whole": np.ones(len(words))}
        chars = {"spanuq": char_scores(len(a), _spans(r))}
        for m in CONTROLS:
            chars[m] = word_chars(len(a), words, scores[m])
        for m, s in scores.items():
            hard = chars[m] >= r["flag"] if m == "spanuq" else chars[m] > 0.5
            i, c = task_scores(a, it.marks, chars[m], hard)
            rows[m]["y"] += y.tolist()
            rows[m]["s"] += s.tolist()
            rows[m]["g"] += [it.article] * len(y)
            rows[m]["iou"].append(i)
            rows[m]["cor"].append(c)
    arts = [it.article for it, r in zip(items, got) if not isinstance(r, str)]
    table = {m: {"word_auroc": _auroc_ci(v["y"], v["s"], v["g"], bootstrap, seed),
                 "iou": mean_ci(np.array(v["iou"]), bootstrap, seed, arts),
                 "cor": mean_ci(np.array(v["cor"]), bootstrap, seed, arts)} for m, v in rows.items()}
    y = np.asarray(rows["spanuq"]["y"])
    return {"items": len(items), "articles": len(set(arts)), "words": int(len(y)), "marked": int(y.sum()),
            "statuses": statuses, "errors": errors[:5], "n_errors": len(errors), "table": table}


def swaps_part(uq, items: list[RealItem], nlp, cache: Cache, progress: bool, bootstrap: int, seed: int) -> dict:
    from .controls import entity_number_spans

    got = product(uq, items, cache, progress)
    tags = entity_number_spans(nlp, [it.answer for it in items])
    sur_cache = Cache(cache.path.with_name(cache.path.stem + "-surprisal.jsonl") if cache.path else None)
    slot_words = [[tuple(it.meta["slot"])] for it in items]
    sur = sur_cache.values([content_hash({"surprisal": uq.backbone_name, "q": it.question, "sources": it.sources,
                                          "answer": it.answer, "slot": it.meta["slot"]}) for it in items],
                           lambda todo: [surprisal_words(uq, items[i], items[i].answer, slot_words[i])[0] for i in todo])
    by: dict[str, dict] = {}
    for it, r, tag, su in zip(items, got, tags, sur):
        if isinstance(r, str):
            continue
        a, b = it.meta["slot"]
        u, _ = slot_score(_Result(r), (a, b))
        d = by.setdefault(it.meta["pair"], {"form": it.meta["form"], "article": it.article})
        d[it.meta["twin"]] = {"spanuq": u, "flag": r["flag"], "surprisal": su,
                              "absent": float(absent_words(it.answer, [p["text"] for p in it.sources], [(a, b)])[0]),
                              "tagger": float(any(s < b and e > a for s, e in tag)), "whole": 1.0}
    out = {}
    for form in sorted({d["form"] for d in by.values()}):
        pairs = [d for d in by.values() if d["form"] == form and "right" in d and "wrong" in d]
        arts = [d["article"] for d in pairs]
        out[form] = {"pairs": len(pairs), "articles": len(set(arts)),
                     "pair_accuracy": {m: mean_ci(np.array([pair_outcome(d["wrong"][m], d["right"][m]) for d in pairs]),
                                                  bootstrap, seed, arts) for m in ("spanuq",) + CONTROLS},
                     "right_at_red_line": float(np.mean([d["right"]["spanuq"] >= d["right"]["flag"] for d in pairs])) if pairs else None,
                     "wrong_at_red_line": float(np.mean([d["wrong"]["spanuq"] >= d["wrong"]["flag"] for d in pairs])) if pairs else None}
    return out


class _Result:
    """A kept product reading as `slot_score` reads a result."""

    def __init__(self, r: dict):
        self.u_seq = r["u_seq"] if r["u_seq"] is not None else 0.0
        self.spans = [type("S", (), {"start": s, "end": e, "u": u}) for s, e, u in _spans(r)]


def own_part(uq, items: list[RealItem], cache: Cache, progress: bool, bootstrap: int, seed: int, min_score: float) -> dict:
    from ..label.offline import names_reference

    got = product(uq, items, cache, progress, response=False)
    ok = [(it, r) for it, r in zip(items, got) if not isinstance(r, str)]
    y = np.array([0.0 if names_reference(r["answer"], it.references, min_score) else 1.0 for it, r in ok])
    u = np.array([r["u_seq"] if r["u_seq"] is not None else 0.0 for _, r in ok])
    passages = [[p["text"] for p in it.sources] for it, _ in ok]
    absent = np.array([absent_words(r["answer"], ps, scored_words(r["answer"])).mean() if scored_words(r["answer"]) else 0.0
                       for (it, r), ps in zip(ok, passages)])
    groups = [it.article for it, _ in ok]
    statuses: dict[str, int] = {}
    for _, r in ok:
        key = f"{r['status']} ({r['calibration']})"
        statuses[key] = statuses.get(key, 0) + 1
    return {"questions": len(items), "answered": len(ok), "wrong": int(y.sum()), "statuses": statuses,
            "errors": [r for r in got if isinstance(r, str)][:5],
            "auroc": {"spanuq": _auroc_ci(y, u, groups, bootstrap, seed),
                      "absent": _auroc_ci(y, absent, groups, bootstrap, seed)},
            "ece": round(expected_calibration_error(y, u), 4) if len(y) else None,
            "flagged_at_red_line": float(np.mean([r["u_seq"] >= r["flag"] for _, r in ok])) if ok else None}


def passages_part(uq, twins: list[RealItem], cache: Cache, progress: bool) -> dict:
    """Whether each span names the passage that holds it: the right twins of the sentence form (a paragraph's own
    sentence) read against every paragraph of their article, in an order of their own (a stable shuffle); a span
    whose words stand in the sentence's paragraph should name it."""
    from ..label.plant import rng_for

    by_article: dict[str, list[dict]] = {}
    for t in twins:
        ps = by_article.setdefault(t.article, [])
        if t.sources[0]["id"] not in [p["id"] for p in ps]:
            ps.append(t.sources[0])
    items = []
    for t in (t for t in twins if t.meta.get("form") == "sentence" and t.meta.get("twin") == "right"):
        ps = list(by_article[t.article])
        rng_for("passages", t.id).shuffle(ps)
        items.append(replace_sources(t, ps))
    got = product(uq, items, cache, progress)
    right = total = 0
    for it, r in zip(items, got):
        if isinstance(r, str):
            continue
        for s in r["spans"]:
            total += 1
            right += s[3] == it.meta["gold_passage"]
    return {"answers": len(items), "spans": total, "passage_precision": round(right / total, 4) if total else None}


def replace_sources(it: RealItem, sources: list[dict]) -> RealItem:
    from dataclasses import replace

    return replace(it, sources=sources, meta={**it.meta, "gold_passage": it.sources[0]["id"]})


def run_real(cfg: Config, probe: str | None = None, parts: tuple[str, ...] = PARTS, data: str | None = None,
             name: str = "real", bootstrap: int = 1000, seed: int = 0, progress: bool = True,
             limit: int | None = None) -> Path:
    from .. import SpanUQ
    from ..label.swaps import swaps
    from ..label.units import load_spacy
    from ..score.scorer import resolve_checkpoint

    bad = set(parts) - set(PARTS)
    if bad:
        raise ValueError(f"unknown parts {sorted(bad)}; choose from {', '.join(PARTS)}")
    nlp = load_spacy(cfg.label.spacy_model)
    marked = ([RealItem.from_json({"set": "user", "split": "test", **row}) for row in iter_jsonl(data)] if data
              else load_items("wice", "test"))
    questions = load_items("xquad", "test")
    if limit is not None:
        marked, questions = marked[:limit], questions[:limit]
    ckpt = resolve_checkpoint(probe, cfg)
    backbone = (read_json(ckpt / "config.json").get("extra") or {}).get("backbone") or cfg.backbone.name
    bench_dir = Path(cfg.paths.data) / backbone / "bench"
    cache = Cache(bench_dir / f"{name}-cache.jsonl")
    record: dict = {"benchmark": "real passages", "bootstrap": {"resamples": bootstrap, "unit": "article", "seed": seed},
                    "seconds": {}}
    with SpanUQ.load(ckpt, cfg=cfg) as uq:
        record["probe"] = {"path": str(uq.checkpoint), "source": uq.probe_source,
                           "reader": None if uq.reader is None else str(uq.reader.folder)}
        for part in parts:
            t0 = time.perf_counter()
            if part == "marked":
                record["marked"] = {"data": data or "WiCE test (real/wice.jsonl.gz)",
                                    **marked_part(uq, marked, nlp, cache, progress, bootstrap, seed)}
            elif part == "swaps":
                record["swaps"] = swaps_part(uq, swaps(questions, nlp), nlp, cache, progress, bootstrap, seed)
            elif part == "passages":
                record["passages"] = passages_part(uq, swaps(questions, nlp, ("sentence",)), cache, progress)
            else:
                record["own"] = own_part(uq, questions, cache, progress, bootstrap, seed, cfg.label.term_min_score)
            record["seconds"][part] = round(time.perf_counter() - t0, 1)
    out = bench_dir / f"{name}.json"
    write_json(out, record)
    out.with_suffix(".md").write_text(markdown(record), encoding="utf-8")
    return out


def _fmt(m: dict | None) -> str:
    if not m or m.get("value") is None:
        return "–"
    ci = m.get("ci")
    return f"{m['value']:.3f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def markdown(record: dict) -> str:
    lines = [f"# Real passages: {record['probe']['source']}", ""]
    if "marked" in record:
        m = record["marked"]
        lines += [f"## Marked claims ({m['data']}): {m['items']} claims, {m['articles']} articles, {m['words']} words, "
                  f"{m['marked']} marked; {m['n_errors']} errors; statuses {m['statuses']}", "",
                  "| method | word AUROC | IoU | Cor |", "|---|---|---|---|"]
        for k, v in m["table"].items():
            lines.append(f"| {NAMES[k]} | {_fmt(v['word_auroc'])} | {_fmt(v['iou'])} | {_fmt(v['cor'])} |")
        lines.append("")
    if "swaps" in record:
        for form, s in record["swaps"].items():
            lines += [f"## Same-passage swaps, form `{form}`: {s['pairs']} pairs, {s['articles']} articles", "",
                      "| method | pair accuracy |", "|---|---|"]
            lines += [f"| {NAMES[k]} | {_fmt(v)} |" for k, v in s["pair_accuracy"].items()]
            lines += ["", f"Right twins at the red line: {s['right_at_red_line']:.1%}; wrong twins: "
                          f"{s['wrong_at_red_line']:.1%}.", ""]
    if "own" in record:
        o = record["own"]
        lines += [f"## The backbone's own answers with the paragraph: {o['answered']} of {o['questions']} questions, "
                  f"{o['wrong']} wrong; statuses {o['statuses']}", "",
                  f"AUROC of û_seq {_fmt(o['auroc']['spanuq'])} (words absent {_fmt(o['auroc']['absent'])}); "
                  f"ECE {o['ece']}; answers whose û_seq is at or over the spans' red line "
                  f"{o['flagged_at_red_line']:.1%}.", ""]
    if "passages" in record:
        p = record["passages"]
        lines += [f"## Which passage: {p['answers']} paragraph sentences read against every paragraph of their article: "
                  f"{p['spans']} spans, {p['passage_precision']} name the sentence's own paragraph.", ""]
    lines.append("Seconds: " + ", ".join(f"{k} {v}" for k, v in record["seconds"].items()))
    return "\n".join(lines) + "\n"
