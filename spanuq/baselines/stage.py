"""The `baselines` stage: every reference method and span detector on the test split, with its cost.

* Methods (``baselines.methods``, rows of Tab. 1 / Tab. A-seq): fitted on train
  (and dev), scored over every labelled span of the test split by the evaluate
  stage's scoring code (`oracle_span_metrics`), sequence metrics on the method's
  native sequence score.  A method that cannot run here (no NLI model offline, …)
  keeps its row with the reason (``unavailable``).
* Detectors (``baselines.detectors``, Tab. 2): proposed spans scored by the
  oracle-span MLP probe; P/R/F1 at IoU ≥ ``evaluate.iou_threshold``, coverage,
  and the downstream span metrics over every labelled span.
* Cost (`cost.py`): wall time per answer, backbone forward passes and generated
  tokens for SpanUQ and every method, measured in this run.

Writes ``data/<backbone>/baselines/metrics.json`` (DVC metrics: everything but the
seconds), ``scores.json`` (every test span's u*, domain and each method's score: the
report's ROC, reliability and per-domain views) and the run log ``runs/baselines.json``
(the seconds, which differ from run to run).
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from ..config import Config
from ..evaluate.detection import detection_metrics
from ..metrics.uq import defined, sequence_metrics, undefined
from ..evaluate.scoring import oracle_span_metrics
from ..features.dataset import ResponseExample, load_examples
from ..pipeline.cpus import available_cpus
from ..pipeline.files import write_json
from ..pipeline.paths import StagePaths
from .context import AnswerContext
from .registry import make_baseline

log = logging.getLogger(__name__)
_UNAVAILABLE = (OSError, ImportError, RuntimeError, ValueError, KeyError)
TEACHER_FORCED = {"token_entropy", "mlp_probe"}  # need the teacher-forced pass (entropy / hidden states)


class Shared:
    """Heavy resources built once and only when a method needs them."""

    def __init__(self, cfg: Config, context: AnswerContext):
        self.cfg, self.context = cfg, context
        self._nli = self._asker = self._backbone = self._nlp = self._tok = None

    def nli(self):
        if self._nli is None:
            from .nli import make_nli

            self._nli = make_nli(self.cfg.baselines)
        return self._nli

    def backbone(self):
        if self._backbone is None:
            from ..llm.loading import load_backbone

            self._backbone = load_backbone(self.cfg)
        return self._backbone

    def asker(self):
        if self._asker is None:
            from ..llm.loading import load_backbone
            from .backbone import BackboneAsker, asker_config

            acfg = asker_config(self.cfg)
            model, tok = self.backbone() if acfg is self.cfg else load_backbone(acfg)
            self._asker = BackboneAsker(model, tok, self.cfg.baselines.backbone_batch_size,
                                        self.cfg.backbone.system_prompt)
        return self._asker

    def nlp(self):
        if self._nlp is None:
            from ..label.units import load_spacy

            self._nlp = load_spacy(self.cfg.label.spacy_model)
        return self._nlp

    def tokenizer(self):
        if self._tok is None:
            from ..llm.loading import load_tokenizer

            self._tok = load_tokenizer(self.cfg)
        return self._tok

    def overrides(self, name: str) -> dict:
        from .registry import baseline_class

        req = baseline_class(name).requires
        out = {}
        if "samples" in req or "backbone" in req:
            out["context"] = self.context
        if "nli" in req:
            out["nli"] = self.nli()
        if "backbone" in req:
            out["asker"] = self.asker()
        return out


def _u_seq(e: ResponseExample) -> float:
    return float(e.u_seq) if e.u_seq is not None else float(e.u.mean())


def _temperature(dev: list[ResponseExample], dev_scores: list[np.ndarray]) -> float | None:
    from ..metrics.ece import fit_temperature

    u = np.concatenate([e.u.numpy() for e in dev] or [np.zeros(0)]).astype(np.float64)
    s = np.concatenate(dev_scores or [np.zeros(0)])
    if len(u) < 2 or np.ptp(s) == 0 or not ((s >= 0) & (s <= 1)).all():
        return None
    return float(fit_temperature(u, s))


def run_method(name: str, cfg: Config, shared: Shared, train, dev, test) -> tuple[dict, np.ndarray | None, object]:
    """(row, concatenated test scores, the fitted scorer) of one baseline."""
    ec = cfg.evaluate
    t0 = time.perf_counter()
    b = make_baseline(name, cfg, **shared.overrides(name))
    b.fit(train, dev)
    t1 = time.perf_counter()
    asker = shared._asker if "backbone" in b.requires else None
    cost0 = (asker.cost.forward_passes, asker.cost.generated_tokens, asker.cost.reused_seconds) if asker else (0, 0, 0)
    nli0 = getattr(b, "nli_calls", None)
    nli = getattr(b, "nli", None)
    if hasattr(nli, "start_method"):
        nli.start_method()  # embeddings another method made are reused, their time counted here too
    nli_reused0 = getattr(nli, "reused_seconds", 0.0)
    test_scores = b.score(test)
    t2 = time.perf_counter()
    n = max(len(test), 1)
    reused = asker.cost.reused_seconds - cost0[2] if asker else 0.0
    reused += getattr(nli, "reused_seconds", 0.0) - nli_reused0
    cost = {"fit_seconds": round(t1 - t0, 3), "method_seconds_per_answer": (t2 - t1 + reused) / n}
    if asker:
        cost["forward_passes_per_answer"] = (asker.cost.forward_passes - cost0[0]) / n
        cost["generated_tokens_per_answer"] = (asker.cost.generated_tokens - cost0[1]) / n
    if nli0 is not None:
        cost["nli_calls_per_answer"] = (b.nli_calls - nli0) / n
    row = oracle_span_metrics(test_scores, test, ec, bootstrap=cfg.baselines.bootstrap)
    native = getattr(b, "native_sequences", None)
    if native is not None:
        row["sequence"] = sequence_metrics([_u_seq(e) for e in test], native(test), ec.seq_positive_threshold,
                                           cfg.baselines.bootstrap, ec.seed)
    if "backbone" in b.requires:  # backbone methods run on the test split only (the time budget)
        row["span"]["ece_cal"] = undefined("no dev temperature: backbone methods are run on the test split only")
    elif dev:
        t = _temperature(dev, b.score(dev))
        if t is not None:
            cal = oracle_span_metrics(test_scores, test, ec, bootstrap=0, temperature=t)["span"]
            row["span"]["ece_cal"], row["span"]["temperature"] = cal.get("ece_cal"), t
    row.update({"granularity": b.granularity, "oracle_spans": bool(b.oracle_spans), "bounded": bool(b.bounded),
                "implementation": getattr(b, "label", ""), "notes": getattr(b, "notes", {}), "cost": cost})
    return row, np.concatenate(test_scores) if test_scores else np.zeros(0), b


def run_detectors(cfg: Config, shared: Shared, mlp, train, test) -> tuple[dict, dict]:
    """Tab. 2: each detector + the oracle-span MLP probe."""
    from .detectors import make_detector, score_detected, scores_for_labelled

    ec = cfg.evaluate
    prior = float(np.concatenate([e.u.numpy() for e in train]).mean())
    rows, scores = {}, {}
    for name in cfg.baselines.detectors:
        try:
            t0 = time.perf_counter()
            det = make_detector(name, cfg, shared.tokenizer() if name in ("sentence", "spacy_ner") else None,
                                shared.nlp() if name in ("sentence", "spacy_ner") else None)
            det.fit(train)
            t1 = time.perf_counter()
            found = det.detect(test)
            s = score_detected(mlp, test, found)
            t2 = time.perf_counter()
        except _UNAVAILABLE as e:
            log.exception("detector %s failed", name)
            rows[name] = {"unavailable": f"{type(e).__name__}: {e}"}
            continue
        per_gt = scores_for_labelled(test, found, s, ec.iou_threshold, prior)
        det_m = detection_metrics(found, [e.spans.numpy() for e in test], ec.iou_threshold, cfg.baselines.bootstrap,
                                  ec.seed)
        n_gt = det_m["n_gt"]
        rows[name] = {"detection": det_m,
                      "coverage": defined(det_m["n_matched"] / n_gt) if n_gt else undefined("no labelled spans"),
                      "span": oracle_span_metrics(per_gt, test, ec, bootstrap=cfg.baselines.bootstrap)["span"],
                      "spans_per_answer": float(np.mean([len(f) for f in found])),
                      "cost": {"fit_seconds": round(t1 - t0, 3), "method_seconds_per_answer": (t2 - t1) / len(test)}}
        scores[name] = np.concatenate(per_gt)
    return rows, scores


def add_costs(rows: dict, cost: dict, context_tokens: float, n_samples: int) -> None:
    """Fill each row's added / end-to-end seconds, passes and generated tokens (see cost.py)."""
    dec, su = cost.get("decoding") or {}, cost["spanuq"]
    greedy, samples = dec.get("greedy_seconds_per_answer"), dec.get("samples_seconds_per_answer")
    for name, row in rows.items():
        c = row.get("cost")
        if c is None:
            continue
        added = c["method_seconds_per_answer"]
        if name in TEACHER_FORCED:
            added += su["extract_seconds_per_answer"]
            c.setdefault("forward_passes_per_answer", 1.0)
            c.setdefault("generated_tokens_per_answer", 0.0)
        if "nli_calls_per_answer" in c:  # a sampling method: S decoded samples first
            c["forward_passes_per_answer"] = context_tokens  # one decode step per sampled token
            c["generated_tokens_per_answer"] = context_tokens
            c["n_samples"] = n_samples
            added = added + samples if samples is not None else None
        c["added_seconds_per_answer"] = added
        c["end_to_end_seconds_per_answer"] = added + greedy if added is not None and greedy is not None else None


def run_baselines(cfg: Config, progress: bool = True) -> Path:
    """DVC/Prefect entry point: baselines/metrics.json + baselines/scores.json; prints the table."""
    from ..evaluate.scoring import all_span_scores
    from ..evaluate.table import format_table
    from ..features.dataset import answers
    from ..llm.loading import resolve_device
    from ..model.checkpoint import load_checkpoint
    from ..model.postprocess import predict
    from .cost import apart_seconds, time_decoding, time_spanuq
    from .mlp_probe import MLPProbe

    t_stage = time.perf_counter()
    paths = StagePaths.from_config(cfg)
    out_dir = paths.root / "baselines"
    torch.set_num_threads(cfg.train.num_threads or available_cpus())
    fit = StagePaths.fitted_on(cfg)  # train/dev and the probe: this run's or evaluate.probe_from's
    train, dev = (load_examples(fit.features, fit.labels, (s,)) for s in ("train", "dev"))
    test = load_examples(paths.features, paths.labels, ("test",))
    if not test or not train:
        raise ValueError(f"need labelled train responses in {fit.labels} and test responses in {paths.labels}; "
                         "see the label report")
    context = AnswerContext.load(cfg)
    infos = context.for_examples(test)
    # decoding is timed first, in a process of its own, while this one holds nothing on the GPU: vLLM reserves
    # its share of the card at start-up and refuses when a backbone already takes it
    decoding = time_decoding(cfg, infos[: cfg.baselines.cost_answers]) if cfg.baselines.cost_answers else {}
    shared = Shared(cfg, context)

    rows, scores, mlp = {}, {}, None
    for name in tqdm(cfg.baselines.methods, desc="baselines", disable=not progress):
        try:
            rows[name], scores[name], b = run_method(name, cfg, shared, train, dev, test)
        except _UNAVAILABLE as e:
            log.exception("baseline %s failed", name)
            rows[name] = {"unavailable": f"{type(e).__name__}: {e}"}
            continue
        if isinstance(b, MLPProbe):
            mlp = b.model
    if mlp is None:
        probe = MLPProbe.from_config(cfg)
        probe.fit(train, dev)
        mlp = probe.model
    det_rows, det_scores = run_detectors(cfg, shared, mlp, train, test)

    device = resolve_device(cfg.train.device)
    ckpt = load_checkpoint(fit.probe, device)
    model, tok = shared.backbone()
    cost = {"spanuq": time_spanuq(cfg, model, tok, ckpt.probe, ckpt.calibration, test, infos, device)}
    cost["decoding"] = decoding
    sample_tokens = float(np.mean([sum(i.sample_tokens) for i in infos]))
    add_costs(rows, cost, sample_tokens, cfg.generate.n_samples)
    cost["ratio"] = spanuq_vs_selfcheck(cost, rows.get("selfcheck_nli"))

    # SpanUQ's score of every labelled span, by the evaluate stage's rule (for the report's charts)
    preds = predict(ckpt.probe, test, ckpt.calibration, answers(tok, test), batch_size=cfg.train.batch_size, device=device)
    spanuq_scores, _ = all_span_scores(preds, test, iou_threshold=cfg.evaluate.iou_threshold)
    n_spans = int(sum(len(e.u) for e in test))
    metrics = {"backbone": cfg.backbone.name, "split": "test", "n_responses": len(test), "n_spans": n_spans,
               "n_samples": cfg.generate.n_samples, "label_method": cfg.label.method,
               "nli": shared._nli.label if shared._nli is not None else None,
               "methods": rows, "detectors": det_rows, "cost": cost}
    metrics, seconds = apart_seconds(metrics)
    write_json(out_dir / "metrics.json", metrics)
    write_json(paths.run_log("baselines"), {"seconds": round(time.perf_counter() - t_stage, 2), **seconds})
    write_json(out_dir / "scores.json", {
        "prompt_id": [e.prompt_id for e in test for _ in range(len(e.u))],
        "domain": [e.domain for e in test for _ in range(len(e.u))],
        "u": np.concatenate([e.u.numpy() for e in test]).astype(float).round(6).tolist(),
        "methods": {k: np.asarray(v, dtype=float).round(6).tolist() for k, v in scores.items()},
        "detectors": {k: np.asarray(v, dtype=float).round(6).tolist() for k, v in det_scores.items()},
        "spanuq": np.concatenate(spanuq_scores).astype(float).round(6).tolist() if spanuq_scores else []})
    print(f"baselines on {cfg.backbone.name}, test split: {len(test)} responses, {n_spans} labelled spans, "
          f"S = {cfg.generate.n_samples}")
    print(format_table({k: v for k, v in rows.items() if "span" in v}))
    r = cost["ratio"]
    if r.get("end_to_end") is not None:
        print(f"SelfCheckGPT-NLI / SpanUQ cost per answer: {r['selfcheck_over_spanuq_end_to_end']:.1f}x end to end, "
              f"{r['selfcheck_over_spanuq_added']:.1f}x added")
    return out_dir / "metrics.json"


def spanuq_vs_selfcheck(cost: dict, selfcheck_row: dict | None) -> dict:
    """SpanUQ / SelfCheckGPT-NLI wall time per answer, end to end and added (on top of the greedy answer)."""
    su, dec = cost["spanuq"], cost.get("decoding") or {}
    sc = (selfcheck_row or {}).get("cost") or {}
    greedy = dec.get("greedy_seconds_per_answer")
    if sc.get("added_seconds_per_answer") is None or greedy is None:
        return {"end_to_end": None, "added": None,
                "why": "SelfCheckGPT-NLI row or decoding timing missing (baselines.cost_answers = 0?)"}
    added_su, added_sc = su["seconds_per_answer"], sc["added_seconds_per_answer"]
    e2e_su, e2e_sc = added_su + greedy, sc["end_to_end_seconds_per_answer"]
    return {"spanuq_added_seconds": added_su, "selfcheck_added_seconds": added_sc,
            "spanuq_end_to_end_seconds": e2e_su, "selfcheck_end_to_end_seconds": e2e_sc,
            "added": added_su / added_sc, "end_to_end": e2e_su / e2e_sc,
            "selfcheck_over_spanuq_added": added_sc / added_su, "selfcheck_over_spanuq_end_to_end": e2e_sc / e2e_su}
