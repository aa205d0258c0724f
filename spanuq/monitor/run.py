"""`spanuq monitor answers.jsonl`: score many (prompt, response) rows, report where the doubt is.

    spanuq monitor answers.jsonl                        # -> answers.monitor/report.html, report.json
    spanuq monitor answers.jsonl -o out/ --by domain,model --threshold 0.6
    spanuq monitor answers.jsonl --conformal-alpha 0.1  # uncertain = above the probe's conformal threshold

Rows are scored in batches (`SpanUQ.score_many`: one teacher-forced pass per answer, batched),
each batch appended to the folder's cache before the next starts (`cache`): interrupted, the
command picks up where it stopped; run again on a grown file, it scores only the new rows.  A row
that fails is reported, never cached.  `spanuq report` is the pipeline's stage, not this.
"""
from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

from tqdm.auto import tqdm

from ..pipeline.cpus import available_cpus
from ..score.errors import GenerationError, InputError
from ..score.schema import ScoreResult
from . import html as html_view
from .cache import ResultCache, answer_key, scoring_identity
from .report import build, threshold_text
from .rows import BadRow, Row, read_rows


def _score(uq, batch: list[Row]) -> list[ScoreResult | Exception]:
    """A batch's results; when the batch as a whole fails, each row alone (so one bad row fails alone)."""
    reqs = [r.request() for r in batch]
    try:
        return uq.score_many(reqs, progress=False, return_errors=True)
    except Exception:  # noqa: BLE001 - isolate the row that breaks the batch
        if len(batch) == 1:
            raise
    out: list = []
    for req in reqs:
        try:
            out += uq.score_many([req], progress=False, return_errors=True)
        except Exception as e:  # noqa: BLE001 - this row's error, the others go on
            out.append(e)
    return out


def _write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def run_monitor(uq, path: str | Path, out_dir: str | Path | None = None, *, by: list[str] | None = None,
                threshold: float | None = None, threshold_source: str | None = None, batch_size: int = 32,
                top: int = 20, progress: bool = True) -> dict:
    """Score every row of ``path`` (cached in ``out_dir``) and write ``report.json`` and ``report.html`` there."""
    t0 = time.perf_counter()
    path = Path(path)
    out = Path(out_dir) if out_dir else path.with_suffix(".monitor")
    rows = read_rows(path)
    good = [r for r in rows if isinstance(r, Row)]
    errors = [(r.line, r.error) for r in rows if isinstance(r, BadRow)]
    identity = scoring_identity(uq)
    cache = ResultCache(out)
    keys = [answer_key(identity, r.prompt, r.response, r.answer_source, r.context) for r in good]
    todo, seen = [], set()
    for r, k in zip(good, keys):
        if k not in cache and k not in seen:
            seen.add(k)
            todo.append((r, k))
    rows_of = Counter(keys)
    hits = len(good) - sum(rows_of[k] for k in seen)
    failed: dict[str, str] = {}
    bar = tqdm(total=len(good), initial=hits, desc="monitor", unit="answer", disable=not progress)
    for s in range(0, len(todo), max(1, batch_size)):
        batch = todo[s: s + batch_size]
        outs = _score(uq, [r for r, _ in batch])
        cache.add([(k, o) for (_, k), o in zip(batch, outs) if isinstance(o, ScoreResult)])
        for (_, k), o in zip(batch, outs):
            if isinstance(o, Exception):
                failed[k] = str(o) if isinstance(o, (InputError, GenerationError)) else f"{type(o).__name__}: {o}"
        bar.update(sum(rows_of[k] for _, k in batch))  # rows with the same answer share its result
    bar.close()
    done = []
    for r, k in zip(good, keys):
        if k in failed:
            errors.append((r.line, failed[k]))
        else:
            done.append((r, cache.get(k)))
    errors.sort()
    thr = uq.cfg.score.refine_threshold if threshold is None else float(threshold)
    report = build(done, errors, thr, by, top,
                   threshold_source or ("given" if threshold is not None else "score.refine_threshold" if thr is not None
                                        else "the probe's calibration"),
                   meta={"file": str(path), "probe": uq.probe_source, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                         "cache_hits": hits, "scored_now": len(todo) - len(failed),
                         "seconds": round(time.perf_counter() - t0, 2)})
    out.mkdir(parents=True, exist_ok=True)
    _write(out / "report.json", json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    _write(out / "report.html", html_view.render(report))
    report["meta"]["folder"] = str(out)
    return report


def summary(report: dict) -> str:
    m, o, st = report["meta"], report["overall"], report["status"]
    share = "—" if o["share_uncertain"] is None else f"{100 * o['share_uncertain']:.1f}%"
    return (f"monitor: {m['rows']} rows: {o['scored']} scored ({share} with a span at {threshold_text(m['threshold'])}), "
            f"{st['unverified']} unverified, {m['errors']} errors; {m['scored_now']} scored now, {m['cache_hits']} "
            f"from the cache, {m['seconds']:.1f} s; wrote {m['folder']}/report.html and report.json")


def set_threads() -> None:
    import torch

    torch.set_num_threads(available_cpus())
