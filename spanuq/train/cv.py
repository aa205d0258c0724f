"""`spanuq ablate --cv K`: choosing a probe setting when the dev split is too small to choose.

A small dev split cannot tell two settings a little apart.  Cross-validation on the train split
scores every training answer once, by a probe that did not train on it: the train split's
answers are cut into K folds by prompt (a prompt's sample answers stay in its fold, and
domains are dealt round-robin so every fold has every style); for each fold every row is
trained on the other folds, with the run's own dev split for early stopping and calibration
exactly as the train stage does, and scores the held-out fold's greedy answers as the
evaluate stage does (every labelled span; a span no kept prediction overlaps gets û_seq).
Sample answers (``label.sample_answers``) train but are never scored, so rows with and
without them are read on the same spans; a row trains on as many of them as its own config
keeps.  The surface prior (the floor every margin is read against) is scored the same way.
The test split is never read.

Writes ``data/<backbone>/ablation/cv.json`` after every (fold, row), so a killed run resumes,
and ``cv.md``: per row the pooled AUROC / pair accuracy over every training span (95%
cluster-bootstrap intervals), per-fold AUROC and detection F1, and each row's difference to
the first row and to the surface prior (paired bootstrap over answers).

    spanuq ablate --cv 5 --rows "default,span skip off"
    spanuq ablate --cv 5 --rows "default,label.sample_answers=0" -o label.sample_answers=2
"""
from __future__ import annotations

import hashlib
import time
from pathlib import Path

import numpy as np

from ..config import AblateRow, Config, apply_overrides, parse_overrides
from ..pipeline.files import read_json, write_json
from ..pipeline.paths import StagePaths


def fold_of(prompt_ids: list[str], folds: int) -> dict[str, int]:
    """Each parent prompt's fold: prompts sorted by a hash of their id, dealt round-robin within
    each domain prefix, so every fold gets a share of every style."""
    by_domain: dict[str, list[str]] = {}
    for pid in sorted(set(prompt_ids)):
        by_domain.setdefault(pid.rsplit("-", 1)[0], []).append(pid)
    out, k = {}, 0
    for dom in sorted(by_domain):
        for pid in sorted(by_domain[dom], key=lambda p: hashlib.sha256(p.encode()).hexdigest()):
            out[pid], k = k % folds, k + 1
    return out


def row_names(text: str | None) -> list[str] | None:
    """``--rows`` as row names: separated by ``;`` when there is one (so an inline row can set several keys,
    ``default;train.batch_size=16,train.joint_epochs=18``), else by ``,`` (``default,span skip off``)."""
    if not text:
        return None
    return [n.strip() for n in text.split(";" if ";" in text else ",") if n.strip()]


def cv_rows(cfg: Config, names: list[str] | None) -> list[AblateRow]:
    """``ablate.rows`` entries by name, or inline rows ``key=value,key=value`` (values as on the command line)."""
    rows = {r.name: r for r in cfg.ablate.rows}
    names = names or [r.name for r in cfg.ablate.rows][:2]
    out = []
    for n in names:
        if n in rows:
            out.append(rows[n])
        elif "=" in n:
            out.append(AblateRow(name=n, set=parse_overrides(n.split(","))))
        else:
            raise ValueError(f"no ablate.rows named {n!r}; params.yaml has {sorted(rows)}")
    return out


def _fold_scores(cfg: Config, row: AblateRow, tr, dev, held, dev_answers, held_answers, sample_rank) -> dict:
    from ..evaluate.stage import evaluate_probe
    from ..metrics.uq import metric_value
    from .loop import train_probe
    from .stage import calibrate_on_dev

    rcfg = apply_overrides(cfg, row.set)
    tr_row = [e for e in tr if sample_rank.get(e.prompt_id, -1) < rcfg.label.sample_answers]
    t0 = time.perf_counter()
    model, info = train_probe(rcfg, tr_row, dev, progress=False)
    calibration, _ = calibrate_on_dev(model, dev, rcfg, "cpu", dev_answers)
    metrics, _, sc = evaluate_probe(rcfg, model, calibration, held, "cpu", held_answers,
                                    window=rcfg.generate.max_new_tokens)
    return {"u": sc["u"].tolist(), "auroc": metric_value(metrics, "span", "auroc"),
            "pair": metric_value(metrics, "span", "pair_accuracy"), "f1": metric_value(metrics, "detection", "f1"),
            "epochs": info["epochs_run"], "answers": len(tr_row), "seconds": round(time.perf_counter() - t0, 1)}


def cv_scores(cfg: Config, rows: list[AblateRow], train: list, dev: list, folds: int, tokenizer=None,
              done: dict | None = None, on_result=None, progress: bool = False, prior=None) -> tuple[dict, list]:
    """Every row's (and the surface prior's) scores of the held-out greedy answers of each fold:
    ``({"<fold>/<row>": {"u", "auroc", ...}}, the greedy answers in fold order)``.  Entries already in
    ``done`` are kept (a resumed run); ``on_result(done)`` is called after each new one.  ``prior``: the
    surface prior (default: the run's, `SurfacePrior.from_config`)."""
    from ..baselines.surface_prior import SurfacePrior
    from ..features.dataset import answers
    from ..label.sample_answers import parent_id, parse

    taken: dict[str, list[tuple[int, str]]] = {}  # a sample answer's rank among its prompt's (0, 1, …)
    for e in train:
        if (p := parse(e.prompt_id)) is not None:
            taken.setdefault(p[0], []).append((p[1], e.prompt_id))
    sample_rank = {a: r for kids in taken.values() for r, (_, a) in enumerate(sorted(kids))}
    of = fold_of([parent_id(e.prompt_id) for e in train], folds)
    fold = np.array([of[parent_id(e.prompt_id)] for e in train])
    done = dict(done or {})
    prior, dev_answers = prior or SurfacePrior.from_config(cfg), answers(tokenizer, dev)
    for k in range(folds):
        tr = [e for e, f in zip(train, fold) if f != k]
        held = [e for e, f in zip(train, fold) if f == k and parent_id(e.prompt_id) == e.prompt_id]
        held_answers = answers(tokenizer, held)
        if f"{k}/surface prior" not in done:
            prior.fit(tr, dev)
            done[f"{k}/surface prior"] = {"u": np.concatenate(prior.score(held)).tolist()}
        for row in rows:
            if f"{k}/{row.name}" not in done:
                done[f"{k}/{row.name}"] = r = _fold_scores(cfg, row, tr, dev, held, dev_answers, held_answers,
                                                           sample_rank)
                if progress:
                    print(f"fold {k} {row.name}: AUROC {r['auroc']:.3f} pair {r['pair']:.3f} F1 {r['f1']:.3f} "
                          f"({r['answers']} training answers, {r['seconds']:.0f} s)", flush=True)
                if on_result:
                    on_result(done)
    greedy = np.array([parent_id(e.prompt_id) == e.prompt_id for e in train])
    order = [i for k in range(folds) for i in np.flatnonzero((fold == k) & greedy)]
    return done, [train[i] for i in order]


def run_cv(cfg: Config, folds: int = 5, names: list[str] | None = None, out_dir: str | Path | None = None,
           bootstrap: int = 1000, progress: bool = True) -> Path:
    """`cv_scores` on the run's train and dev splits, resumable; returns the folder with ``cv.json`` and
    ``cv.md`` (module docstring)."""
    from ..features.dataset import load_examples, training_examples
    from ..llm.loading import load_tokenizer

    if folds < 2:
        raise ValueError(f"--cv {folds}: cross-validation needs at least 2 folds")
    rows = cv_rows(cfg, names)
    paths = StagePaths.from_config(cfg)
    train, _ = training_examples(paths.features, paths.labels, cfg.train.given_kinds)
    dev = load_examples(paths.features, paths.labels, ("dev",))
    if not train:
        raise ValueError(f"no training examples in {paths.labels}; run the pipeline up to `extract`")
    out = Path(out_dir) if out_dir else paths.root / "ablation"
    out.mkdir(parents=True, exist_ok=True)
    meta = {"folds": folds, "rows": [[r.name, r.set] for r in rows], "n_train": len(train), "n_dev": len(dev),
            "train_ids": sorted(e.prompt_id for e in train)}
    done = {}
    if (out / "cv.json").exists() and (prev := read_json(out / "cv.json")).get("meta") == meta:
        done = prev["results"]
    save = lambda d: write_json(out / "cv.json", {"meta": meta, "results": d})  # noqa: E731
    done, scored = cv_scores(cfg, rows, train, dev, folds, load_tokenizer(cfg), done, save, progress)
    save(done)
    (out / "cv.md").write_text(cv_table(cfg, rows, done, folds, scored, bootstrap))
    return out


def cv_table(cfg: Config, rows: list[AblateRow], done: dict, folds: int, scored: list, bootstrap: int) -> str:
    """The pooled table of `run_cv` (Markdown): ``scored`` are the greedy training answers in fold order."""
    from ..metrics.uq import negatives, paired_difference, span_metrics

    y = np.concatenate([e.u.numpy() for e in scored])
    groups = np.concatenate([[e.prompt_id] * len(e.u) for e in scored])
    names = ["surface prior", *[r.name for r in rows]]
    pooled = {n: np.concatenate([done[f"{k}/{n}"]["u"] for k in range(folds)]) for n in names}
    ec = cfg.evaluate
    one = lambda v: f"{v[0]:+.3f} [{v[1][0]:+.2f}, {v[1][1]:+.2f}]" if v[1] else f"{v[0]:+.3f}"  # noqa: E731
    diff = lambda a, b: (lambda d: f"{one(d['auroc'])} / {one(d['pair_accuracy'])}")(  # noqa: E731
        paired_difference(y, pooled[a], pooled[b], groups, bootstrap, ec.positive_threshold, ec.pair_gap))
    lines = [f"# Cross-validated ablation ({folds} folds of the train split)", "",
             f"Every greedy training answer's spans scored once by a probe that did not train on it: {len(y)} spans, "
             f"{len(scored)} answers.", "",
             f"| row | pooled AUROC | neg | pair acc | per-fold AUROC (mean) | per-fold F1 (mean) | "
             f"Δ AUROC / Δ pair acc vs {rows[0].name} | Δ AUROC / Δ pair acc vs surface prior |",
             "|---|---|---|---|---|---|---|---|"]
    for n in names:
        m = span_metrics(y, pooled[n], ec.positive_threshold, groups=groups, bootstrap=bootstrap, pair_gap=ec.pair_gap)
        cell = lambda k: ("n/a" if m[k]["value"] is None else f"{m[k]['value']:.3f}"  # noqa: E731
                          + (f" [{m[k]['ci'][0]:.2f}, {m[k]['ci'][1]:.2f}]" if m[k].get("ci") else ""))
        per = [done[f"{k}/{n}"] for k in range(folds)]
        fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
        mean = lambda k: fmt(np.mean([p[k] for p in per]) if all(p[k] is not None for p in per) else None)  # noqa: E731
        fa = " / ".join(fmt(p["auroc"]) for p in per) + f" ({mean('auroc')})" if "auroc" in per[0] else "—"
        ff = mean("f1") if "f1" in per[0] else "—"
        d0 = diff(n, rows[0].name) if n not in ("surface prior", rows[0].name) else "—"
        dp = diff(n, "surface prior") if n != "surface prior" else "—"
        lines.append(f"| {n} | {cell('auroc')} | {negatives(m)} | {cell('pair_accuracy')} | {fa} | {ff} | {d0} | {dp} |")
    return "\n".join(lines) + "\n"
