"""The ``train-reader`` stage: the with-sources reader, learned from real passages and people's marks.

    spanuq train-reader                  # params.yaml `reader`; writes data/<backbone>/reader/

1. **Items** (`spanuq.train.reader_rows`): ``reader.sets`` of the train and dev splits — WiCE claims with the
   article they cite, same-passage swaps from XQuAD's paragraphs, SummEdits' edited summaries, the grounded
   training pairs' twins (``templated``) — split by article (subject) upstream or here (`spanuq.data.real`), never
   a test item.
2. **Rows**: every item read as the product reads it (`spanuq.reader.features`), labelled per word; with
   ``reader.backbone_readings``, each word's surprisal with and without the sources beside (`spanuq.reader.backbone`).
3. **Net** (`spanuq.reader.model`): trained on the train rows, each set weighted by ``reader.set_weights``
   (a set's rows share its weight, so a large set does not drown a small one), ``reader.epochs`` epochs.
4. **Dev** (what is reported and chosen on): WiCE token AUROC over the content words, swap pair accuracy,
   right facts at the red line.
5. **Calibrations** (fitted on dev, stored in ``config.json``'s ``extra.calibration``; the scorer's
   with-sources calibration, `spanuq.model.calibration.Calibration.grounded`):
   * ``given`` — Platt scaling of a span's raw û on every real dev span (label: a marked word in it; not the
     templated pairs'),
     σ(logit(û_raw)/T + b); the red line ``flag`` where the characters it marks best match people's marks on
     WiCE dev (`red_line`: the mean IoU of Mu-SHROOM), refine's ``margin`` on the swap pairs;
   * ``generated`` — the backbone's own answers to questions with their paragraph
     (`spanuq.label.real_answers`), labelled against the gold answers: the answer's score reads how much of it
     the sources do not back and how it stands to the question (`spanuq.reader.answer`), weighted by a logistic
     regression on the train split's answers and mapped onto "the answer is wrong" on the dev ones
     (`own_calibration`); its spans keep the given mapping (what they read is the same: whether the sources
     back them).
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import replace

import numpy as np
import torch

from ..config import Config
from ..metrics.ece import expected_calibration_error, fit_logistic, fit_platt, flag_threshold, pair_margin
from ..metrics.uq import rank_auroc
from ..model.calibration import Calibration
from ..pipeline.cache import ItemCache
from ..pipeline.files import iter_jsonl, write_json
from ..pipeline.paths import StagePaths
from ..reader import model as net_io
from .reader_rows import ItemRows, items_for, rows_for, with_readings
from ..reader.encoder import load_encoder
from ..reader.features import ANSWER_SENTENCE_FEATURES, BACKBONE_FEATURES, FEATURES, READER_FEATURES
from ..reader.model import NetConfig, ReaderNet, with_neighbours
from ..reader.answer import ANSWER_COLUMNS, answer_columns, answer_score
from ..reader.spans import span_scores, spans_of

log = logging.getLogger(__name__)


def _z(r: ItemRows, columns: list[int]) -> np.ndarray:
    return with_neighbours(r.rows.x[:, columns], r.rows.sentence)


def fit_net(train: list[ItemRows], rc, columns: list[int]) -> ReaderNet:
    """The net trained on ``train`` (``rc``: the ``reader`` params): each of its ``rc.members`` members from its own
    seed (``rc.seed + k``), each set's rows sharing the set's weight (a large set does not drown a small one)."""
    z = np.concatenate([_z(r, columns) for r in train])
    y = np.concatenate([r.y for r in train])
    n_set: dict[str, int] = {}
    for r in train:
        n_set[r.item.set] = n_set.get(r.item.set, 0) + len(r.y)
    w = np.concatenate([np.full(len(r.y), rc.set_weights.get(r.item.set, 1.0) / n_set[r.item.set]) for r in train])
    w = w / w.mean()
    net = ReaderNet(NetConfig(features=[READER_FEATURES[c] for c in columns], hidden=rc.hidden, dropout=rc.dropout,
                              members=rc.members, mean=z.mean(0).tolist(), scale=(z.std(0) + 1e-6).tolist(),
                              encoder=rc.encoder))
    Z, Y, W = (torch.tensor(a, dtype=torch.float32) for a in (z, y, w))
    x = (Z - net.mean) / net.scale
    for k, member in enumerate(net.members):
        torch.manual_seed(rc.seed + k)
        for layer in member:  # each member's own initial weights, from its seed
            if hasattr(layer, "reset_parameters"):
                layer.reset_parameters()
        rng = np.random.default_rng(rc.seed + k)
        opt = torch.optim.AdamW(member.parameters(), lr=rc.lr, weight_decay=rc.weight_decay)
        member.train()
        for _ in range(rc.epochs):
            order = torch.from_numpy(rng.permutation(len(Y)))
            for b in range(0, len(order), rc.batch_size):
                i = order[b: b + rc.batch_size]
                loss = (torch.nn.functional.binary_cross_entropy_with_logits(member(x[i]).squeeze(-1), Y[i],
                                                                             reduction="none") * W[i]).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
    return net.eval()


def spans_read(net: ReaderNet, r: ItemRows, columns: list[int]) -> tuple[np.ndarray, list[list[int]], np.ndarray, np.ndarray]:
    """(word p, span groups, span raw û, span labels) of one item as the product reads it (no spaCy entities:
    runs of content words)."""
    p = net.probability(_z(r, columns)) if r.rows.words else np.zeros(0)
    groups = spans_of(r.item.answer, r.rows.words)
    return p, groups, span_scores(p, groups), np.array([float(r.y[g].max()) for g in groups])


def slot_score(r: ItemRows, groups: list[list[int]], u: np.ndarray) -> float:
    """A swap twin's score: the highest û of the spans overlapping its slot (0 when none does)."""
    a, b = r.item.meta["slot"]
    slot = [k for k, g in enumerate(groups) if any(r.rows.words[i][0] < b and r.rows.words[i][1] > a for i in g)]
    return float(max(u[slot])) if slot else 0.0


def token_scores(answer: str, words, groups, u: np.ndarray) -> np.ndarray:
    """Per word: the û of the span holding it, 0 for a word in no span (a function word, punctuation)."""
    out = np.zeros(len(words))
    for g, x in zip(groups, u):
        out[g] = x
    return out


def dev_report(net: ReaderNet, dev: list[ItemRows], columns: list[int]) -> dict:
    """What dev says of ``net``: per set, word AUROC over content words (the product's spans), and the swap pairs'
    accuracy by form."""
    out: dict = {}
    by_set: dict[str, list[ItemRows]] = {}
    for r in dev:
        by_set.setdefault("swaps" if r.item.set == "xquad" and "pair" in r.item.meta else r.item.set, []).append(r)
    for name, rows in sorted(by_set.items()):
        ys, ss = [], []
        pairs: dict[str, dict[str, float]] = {}
        for r in rows:
            p, groups, u, _ = spans_read(net, r, columns)
            ys.append(r.y)
            ss.append(token_scores(r.item.answer, r.rows.words, groups, u))
            if "pair" in r.item.meta:
                pairs.setdefault(r.item.meta["pair"], {})[r.item.meta["twin"]] = slot_score(r, groups, u)
        y, s = np.concatenate(ys), np.concatenate(ss)
        entry = {"items": len(rows), "words": int(len(y)), "marked": int(y.sum())}
        if 0 < y.sum() < len(y):
            entry["word_auroc"] = round(float(rank_auroc(y > 0.5, s)), 4)
        for form in sorted({k.rsplit("@", 1)[-1] for k in pairs}):
            done = [d for k, d in pairs.items() if len(d) == 2 and k.endswith("@" + form)]
            entry[f"pair_accuracy_{form}"] = round(float(np.mean([1.0 if d["wrong"] > d["right"] else 0.5
                                                                  if d["wrong"] == d["right"] else 0.0 for d in done])), 4)
            entry[f"pairs_{form}"] = len(done)
        out[name] = entry
    return out


def red_line(marked: list[tuple[ItemRows, list[list[int]], np.ndarray]], grid: np.ndarray | None = None,
             right: dict[str, np.ndarray] | None = None, right_at_line: float = 1.0) -> tuple[float, dict]:
    """The calibrated û from which spans are drawn as likely wrong: where the characters the line marks best
    match the characters people marked (Mu-SHROOM's IoU, `spanuq.bench.metrics.iou`, averaged over the items;
    ties: the higher line), among the lines that draw at most ``right_at_line`` of each form's right twins
    (``right``: per form of answer, the calibrated û of the right twins' slots).  ``marked``: per item, its rows,
    span groups and calibrated span û."""
    from ..bench.real import char_scores, task_scores

    grid = np.round(np.arange(0.05, 0.951, 0.01), 2) if grid is None else grid
    allowed = [t for t in grid if all(np.mean(u >= t) <= right_at_line for u in (right or {}).values() if len(u))]
    best, rows = (float(grid[-1]), -1.0), []
    for t in allowed or [grid[-1]]:
        ious = []
        for r, groups, u in marked:
            spans = [(r.rows.words[g[0]][0], r.rows.words[g[-1]][1], x) for g, x in zip(groups, u)]
            chars = char_scores(len(r.item.answer), spans)
            ious.append(task_scores(r.item.answer, r.item.marks, chars, chars >= t)[0])
        iou = float(np.mean(ious)) if ious else 0.0
        rows.append((float(t), iou))
        if iou >= best[1]:
            best = (float(t), iou)
    info = {"iou": round(best[1], 4), "items": len(marked), "rule": "mean IoU on people's marks (WiCE dev)"}
    if right:
        info["rule"] += f", among the lines that draw at most {right_at_line:.0%} of each form's right swaps"
        info["lowest_allowed"] = float(min(allowed)) if allowed else None
    return best[0], info


def given_calibration(net: ReaderNet, dev: list[ItemRows], columns: list[int], cfg: Config) -> tuple[dict, dict]:
    """The ``given`` mapping (module docstring) and what it achieves on dev."""
    raw, y, pairs, read = [], [], {}, []
    for r in dev:
        _, groups, u, lab = spans_read(net, r, columns)
        raw.append(u)
        y.append(lab)
        read.append((r, groups, u))
        if "pair" in r.item.meta and r.item.set == "xquad":  # the red line's and margin's pairs: real swaps only
            pairs.setdefault(r.item.meta["pair"], {})[r.item.meta["twin"]] = slot_score(r, groups, u)
    raw, y = np.concatenate(raw), np.concatenate(y)
    t, b = fit_platt(y, raw)
    mapped = Calibration(temperature=t, bias=b)
    u = mapped.scores(raw)
    done = [d for d in pairs.values() if len(d) == 2]
    by_form: dict[str, list[float]] = {}  # per form of answer: the right twins' slot û
    for key, d in pairs.items():
        if len(d) == 2:
            by_form.setdefault(key.rsplit("@", 1)[-1], []).append(d["right"])
    flag, flag_info = red_line([(r, g, mapped.scores(x) if len(x) else x) for r, g, x in read if r.item.set == "wice"],
                               right={f: mapped.scores(np.array(x)) for f, x in by_form.items()},
                               right_at_line=cfg.reader.right_at_line)
    entry = {"temperature": round(t, 6), "bias": round(b, 6), "flag": flag, "validity_threshold": 0.0}
    margin_info = None
    if done:
        right, wrong = (np.array(x) for x in zip(*((d["right"], d["wrong"]) for d in done)))
        entry["margin"], margin_info = pair_margin(mapped.scores(right), mapped.scores(wrong),
                                                   confidence=cfg.evaluate.flag_precision)
        flag_info["swaps_right_at_line"] = round(float(np.mean(mapped.scores(right) >= flag)), 4)
        flag_info["swaps_wrong_at_line"] = round(float(np.mean(mapped.scores(wrong) >= flag)), 4)
    info = {"spans": int(len(y)), "wrong": int(y.sum()), "ece_before": round(expected_calibration_error(y, raw), 4),
            "ece_after": round(expected_calibration_error(y, u), 4), "flag": flag_info, "margin": margin_info}
    return entry, info


def own_calibration(read, answers: list[dict], given: dict, cfg: Config) -> tuple[dict | None, dict]:
    """The ``generated`` mapping (module docstring): the answer's score (`spanuq.reader.answer`) weighted by a
    logistic regression on the train split's own answers, then mapped onto "wrong" on the dev ones (Platt
    scaling of that score); without train answers both on dev.  ``read(answer)``: its `Reading`.  None with
    fewer than 10 dev answers or one class."""
    def columns(split: str):
        rows = [a for a in answers if a["split"] == split and a["answer"].strip()]
        cols = []
        for a in rows:
            r = read(a)
            cols.append(answer_columns(a["answer"], r.words, r.x, r.u_raw))
        return np.array(cols).reshape(-1, len(ANSWER_COLUMNS)), np.array([0.0 if a["right"] else 1.0 for a in rows])

    x_dev, y = columns("dev")
    if len(y) < 10 or y.min() == y.max():
        return None, {"answers": len(y), "wrong": int(y.sum()), "why": "fewer than 10 dev answers or one class"}
    x_train, y_train = columns("train")
    fit_on = "train" if len(y_train) >= 10 and 0 < y_train.sum() < len(y_train) else "dev"
    x_fit, y_fit = (x_train, y_train) if fit_on == "train" else (x_dev, y)
    mean, scale = x_fit.mean(0), x_fit.std(0) + 1e-6
    w, b0 = fit_logistic(y_fit, (x_fit - mean) / scale, l2=1e-3)
    fitted = {"seq_mean": [round(float(v), 6) for v in mean], "seq_scale": [round(float(v), 6) for v in scale],
              "seq_weights": [round(float(v), 6) for v in w], "seq_offset": round(b0, 6)}
    score = np.array([answer_score(c, fitted) for c in x_dev])
    t, b = fit_platt(y, score)
    u = Calibration(temperature=t, bias=b).scores(score)
    flag, flag_info = flag_threshold(y, u, cfg.evaluate.flag_precision, cfg.evaluate.positive_threshold, min_flagged=5)
    entry = {**given, **fitted, "seq_columns": list(ANSWER_COLUMNS), "seq_temperature": round(t, 6),
             "seq_bias": round(b, 6), "seq_flag": flag}
    return entry, {"answers": len(y), "wrong": int(y.sum()), "weights_fitted_on": fit_on,
                   "train_answers": int(len(y_train)), "auroc": round(float(rank_auroc(y > 0.5, score)), 4),
                   **{f"auroc_{c}": round(float(rank_auroc(y > 0.5, x_dev[:, k])), 4) for k, c in enumerate(ANSWER_COLUMNS)},
                   "ece_before": round(expected_calibration_error(y, score), 4),
                   "ece_after": round(expected_calibration_error(y, u), 4), "flag": flag_info}


def run_train_reader(cfg: Config, progress: bool = True) -> dict:
    from ..label.units import load_spacy

    t0 = time.perf_counter()
    paths = StagePaths.from_config(cfg)
    rc = cfg.reader
    nlp = load_spacy(cfg.label.spacy_model)
    encoder = load_encoder(rc.encoder)
    cache = ItemCache(paths.stage_cache("reader_rows"))
    train = rows_for(encoder, items_for(rc.sets, "train", nlp, tuple(rc.swap_forms)), cache, progress)
    dev = rows_for(encoder, items_for(rc.sets, "dev", nlp, tuple(rc.swap_forms)), cache, progress)
    names = rc.features or [f for f in (READER_FEATURES if rc.backbone_readings else FEATURES)
                            if rc.answer_sentence or f not in ANSWER_SENTENCE_FEATURES]
    columns = [READER_FEATURES.index(f) for f in names]
    backbone = readings = None
    if any(f in BACKBONE_FEATURES for f in names):  # the backbone's readings beside the features (cached per item)
        from ..llm.loading import load_backbone
        from ..reader.backbone import Backbone

        model, tok = load_backbone(cfg)
        backbone, readings = Backbone(model, tok, cfg.backbone.system_prompt), ItemCache(paths.stage_cache("reader_readings"))
        train, dev = (with_readings(backbone, encoder, rows, readings, progress) for rows in (train, dev))
    net = fit_net(train, rc, columns)
    report = {"train": {"items": len(train), "words": int(sum(len(r.y) for r in train))}, "dev": dev_report(net, dev, columns)}
    # the calibrations and the red line are fitted on real items only: the templated pairs teach the net, not the scale
    given, report["given"] = given_calibration(net, [r for r in dev if r.item.set != "templated"], columns, cfg)
    calibration = {"given": given}
    answers_path = paths.real_answers
    if answers_path.exists():
        from ..reader.read import Reader

        reader = Reader(net, backbone=backbone, readings_cache=readings)
        answers = list(iter_jsonl(answers_path))
        read = lambda a: reader.read([p["text"] for p in a["sources"]], a["answer"], a["question"])  # noqa: E731
        own, report["generated"] = own_calibration(read, answers, given, cfg)
        if own is not None:
            calibration["generated"] = own
    net.cfg = replace(net.cfg, extra={"calibration": calibration, "sets": rc.sets, "seed": rc.seed,
                                      "dev": report["dev"]})
    net_io.save(net, paths.reader)
    write_json(paths.reader / "report.json", report)  # what the inputs determine: the same bytes for the same inputs
    report["seconds"] = round(time.perf_counter() - t0, 1)
    write_json(paths.run_log("train-reader"), {"seconds": report["seconds"]})
    log.info("train-reader: %s", json.dumps(report["dev"]))
    return report
