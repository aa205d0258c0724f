"""The `index` and `label` stages.

``index``: the BM25 index of ``label.corpus`` (a DVC output, built once; an empty
manifest when no corpus is configured).

``label``: generations.jsonl → claims.jsonl + labels.jsonl + label_report.json
+ plots/label/ (and runs/label.json: its seconds, cache hits and judge calls).  Each answer is labelled once per content hash of (labeller,
label params, prompt, greedy answer, samples) and cached, so a crash, a judge
outage or Ctrl-C loses nothing finished; a re-run labels only what is missing.
An answer whose judge calls failed transiently is not cached: the stage labels
every other answer, then stops with an error naming the failures, and the next
run retries only those.
Splits are assigned here, stratified by domain × u*_seq bin (paper App. D), or
kept from the prompts stage with ``prompts.split_by: prompts``; prompts added with
``prompts.add_train`` stay in train, and the run's own prompts split as they would without them.
With ``label.sample_answers: k``, up to k samples of every training prompt become training answers
too, labelled leave-one-out (`sample_answers.py`), after the split: they never decide it.
"""
from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from tqdm.auto import tqdm

from ..config import Config
from ..llm.loading import load_tokenizer
from ..llm.openai_client import EndpointUnreachable
from ..pipeline.cache import ItemCache, content_hash
from ..pipeline.files import read_json, read_records, write_json, write_jsonl
from ..pipeline.paths import StagePaths
from ..pipeline.records import Claim, Generation, LabeledResponse, Prompt
from .offline import LabelResult
from .summary import label_report, plot_label_report, u_bin
from .targets import span_targets
from .truth import plot_truth, truth_check

log = logging.getLogger(__name__)

# label params that do not change a label (connection and speed settings)
# which answers are labelled, not how: sample answers, and the given answers made from the labels
_NOT_IN_KEY = {"device", "sample_answers", "given_swaps", "given_templates", "given_splits"}
_JUDGE_NOT_IN_KEY = {"base_url", "api_key_env", "timeout_s", "max_retries", "backoff_s", "concurrency"}


def run_index(cfg: Config, progress: bool = True) -> Path:
    """DVC entry point: build (or confirm) the BM25 index of ``label.corpus``."""
    from ..context.retrieval import MANIFEST, BM25Retriever

    paths = StagePaths.from_config(cfg)
    if not cfg.label.corpus:
        paths.corpus_index.mkdir(parents=True, exist_ok=True)
        write_json(paths.corpus_index / MANIFEST, {"corpus": None})
        return paths.corpus_index
    r = BM25Retriever.open(cfg.label.corpus, paths.corpus_index)
    log.info("BM25 index of %d passages at %s", len(r.passages), paths.corpus_index)
    return paths.corpus_index


def label_key(cfg: Config, labeller, gen: Generation, prompt: Prompt) -> str:
    lc = cfg.label.model_dump(exclude=_NOT_IN_KEY)
    lc["judge"] = {k: v for k, v in lc["judge"].items() if k not in _JUDGE_NOT_IN_KEY}
    if labeller.name == "offline":
        lc.pop("judge")
    key = {
        "labeller": labeller.name, "version": labeller.version, "label": lc,
        "prompt": [prompt.text, prompt.domain, prompt.references],
        "greedy": gen.greedy.text, "samples": [[s.text, s.finish_reason] for s in gen.samples],
    }
    if prompt.context is not None:  # labelled from its sources (a row without keeps its key)
        key["context"] = prompt.context
    return content_hash(key)


@contextmanager
def open_labeller(cfg: Config, paths: StagePaths) -> Iterator[object]:
    """The configured labeller (and, for the judge, its client, cache and retriever)."""
    from .align import make_aligner

    aligner = make_aligner(cfg.label)
    if cfg.label.method == "offline":
        from .likelihood import AnchorLikelihood
        from .offline import OfflineLabeller

        likelihood = AnchorLikelihood(cfg) if cfg.label.likelihood_votes > 0 else None
        yield OfflineLabeller(cfg.label, aligner, likelihood=likelihood)
        return
    from .judge import Judge
    from .judge_labeller import JudgeLabeller
    from ..context.retrieval import MANIFEST, BM25Retriever

    retriever = None
    if cfg.label.corpus:
        manifest = paths.corpus_index / MANIFEST
        if not manifest.exists() or read_json(manifest).get("corpus") is None:
            raise FileNotFoundError(f"no BM25 index at {paths.corpus_index}; run `spanuq index` (or `dvc repro index`)")
        retriever = BM25Retriever.open(cfg.label.corpus, paths.corpus_index)
    else:
        log.warning("label.corpus is not set: the judge verifies claims closed-book, from its own knowledge")
    judge = Judge(cfg.label.judge, cache_dir=paths.stage_cache("judge"))
    try:
        yield JudgeLabeller(cfg.label, judge, aligner, retriever)
    finally:
        judge.close()


class LabelFailures(RuntimeError):
    """Some answers could not be labelled this run (transient judge failures); nothing was cached for them."""


def label_all(cfg: Config, prompts: dict[str, Prompt], gens: list[Generation], labeller,
              cache: ItemCache, progress: bool = True) -> list[LabelResult]:
    """LabelResult per generation, from the cache or the labeller (each cached as soon as it is done).

    Raises `LabelFailures` after the last answer when some failed transiently."""
    from .judge_labeller import TransientLabelError

    out: list[LabelResult] = []
    failed: list[tuple[str, str]] = []
    if getattr(labeller, "likelihood", None) is not None:  # the backbone's pass, batched, for what is not cached
        labeller.likelihood.prefetch([g for g in gens if g.prompt_id in prompts
                                      and label_key(cfg, labeller, g, prompts[g.prompt_id]) not in cache], progress)
    bar = tqdm(gens, desc=f"label[{labeller.name}]", unit="answer", disable=not progress)
    for g in bar:
        prompt = prompts.get(g.prompt_id)
        if prompt is None:
            raise KeyError(f"generation {g.prompt_id!r} has no prompt in prompts.jsonl; re-run `spanuq generate`")
        key = label_key(cfg, labeller, g, prompt)
        hit = cache.get(key)
        if hit is None:
            try:
                res = labeller.label(g, prompt)
            except EndpointUnreachable as e:
                done = len(out) - len(failed)
                raise RuntimeError(f"{e}. {done} of {len(gens)} answers are labelled and cached; "
                                   "start the judge and re-run to label the rest") from None
            except TransientLabelError as e:
                failed.append((g.prompt_id, str(e)))
                out.append(LabelResult([], "error", str(e)))
                continue
            hit = {"claims": [c.model_dump(mode="json") for c in res.claims], "status": res.status,
                   "error": res.error, "stats": res.stats, "truth": res.truth}
            cache.put(key, hit)
        out.append(LabelResult([Claim.model_validate(c) for c in hit["claims"]], hit["status"], hit["error"],
                               hit["stats"], hit.get("truth", [])))
    if failed:
        shown = "; ".join(f"{pid}: {err}" for pid, err in failed[:3])
        raise LabelFailures(f"{len(failed)} of {len(gens)} answers could not be labelled (transient judge failures, "
                            f"not cached: {shown}{' ...' if len(failed) > 3 else ''}). The other "
                            f"{len(gens) - len(failed)} are labelled and cached; re-run `spanuq label` to retry "
                            "only the failed ones.")
    return out


def build_records(gens: list[Generation], prompts: dict[str, Prompt], results: list[LabelResult],
                  tokenizer) -> tuple[list[LabeledResponse], int]:
    """LabeledResponses (split still unset: "train") and the number of claims lost in token mapping."""
    records, lost_total = [], 0
    for g, res in zip(gens, results):
        spans, lost = span_targets(res.claims, g.greedy.text, g.greedy.token_ids, tokenizer) if res.claims else ([], 0)
        lost_total += lost
        status = res.status if spans or res.status != "ok" else "no_claims"
        records.append(LabeledResponse(
            prompt_id=g.prompt_id, domain=prompts[g.prompt_id].domain, split="train", response=g.greedy.text,
            n_tokens=len(g.greedy.token_ids), spans=spans,
            u_seq=sum(s.u for s in spans) / len(spans) if spans else None, status=status, error=res.error,
            unplaced=lost, with_context=prompts[g.prompt_id].context is not None))
    return records, lost_total


def assign_label_splits(cfg: Config, records: list[LabeledResponse], prompts: dict[str, Prompt]) -> None:
    """Set each record's split in place (module docstring)."""
    from ..data.splits import assign_splits

    if cfg.prompts.split_by == "prompts":
        for r in records:
            r.split = prompts[r.prompt_id].split or "train"
        return
    added = [r for r in records if prompts[r.prompt_id].train_only]  # prompts.add_train: always train
    for r in added:
        r.split = "train"
    for r in records:  # prompts.grounded: the prompts stage's train or dev, by subject (`spanuq.data.grounded`)
        if prompts[r.prompt_id].grounded:
            r.split = prompts[r.prompt_id].split or "train"
    own = [r for r in records if not (prompts[r.prompt_id].train_only or prompts[r.prompt_id].grounded)]
    strata = [f"{r.domain}|{u_bin(r.u_seq, cfg.label.uncertainty_bins)}" for r in own]
    target = cfg.prompts.split_sizes or cfg.prompts.split_fractions
    for r, s in zip(own, assign_splits(own, strata, target, cfg.prompts.seed)):
        r.split = s


def label_sample_answers(cfg: Config, prompts: dict[str, Prompt], gens: list[Generation],
                         records: list[LabeledResponse], labeller, cache: ItemCache, tokenizer, progress: bool = True
                         ) -> tuple[list[LabeledResponse], list[LabelResult]]:
    """Up to ``label.sample_answers`` samples of every training prompt read as answers, each labelled
    against the other S answers of its prompt (`sample_answers.py`); all in train, none of dev/test."""
    from .sample_answers import parent_id, sample_answers, sample_prompt

    k = cfg.label.sample_answers
    if not k:
        return [], []
    split = {r.prompt_id: r for r in records}
    kids = [a for g in gens if split[g.prompt_id].split == "train" for a in sample_answers(g, k)]
    kid_prompts = {a.prompt_id: sample_prompt(prompts[parent_id(a.prompt_id)], a.prompt_id) for a in kids}
    results = label_all(cfg, kid_prompts, kids, labeller, cache, progress)
    results = [LabelResult(r.claims, r.status, r.error, r.stats, []) for r in results]  # truth: greedy answers only
    kid_records, _ = build_records(kids, kid_prompts, results, tokenizer)
    return kid_records, results


def label_given_answers(cfg: Config, prompts: dict[str, Prompt], gens: list[Generation],
                        records: list[LabeledResponse], results: list[LabelResult], tokenizer
                        ) -> tuple[list[LabeledResponse], list[Claim]]:
    """The given answers of the prompts of `label.given_splits` (`given.py`; of grounded rows, their pairs'
    twins: `grounded_given.py`): their label rows and claims."""
    from .given import given_answers
    from .grounded_given import grounded_given_answers
    from .units import load_spacy

    twins = grounded_given_answers(cfg.label, prompts, records, tokenizer)
    if not (cfg.label.given_swaps or cfg.label.given_templates):
        return twins
    claims = {g.prompt_id: r.claims for g, r in zip(gens, results)}
    rows, cs = given_answers(cfg.label, prompts, gens, records, claims, tokenizer, load_spacy(cfg.label.spacy_model))
    return rows + twins[0], cs + twins[1]


def given_answers_summary(records: list[LabeledResponse]) -> dict:
    """What the given answers added (label report → ``given_answers``), per split and kind (the swapped
    own answers, the templated ones, the grounded pairs' twins): answers, labelled spans, and spans
    labelled wrong (u* = 1)."""
    from .answer_ids import given_kind

    out: dict = {}
    for r in records:
        kind = {"swap": "swap", "grounded": "grounded"}.get(given_kind(r.prompt_id), "templated")
        cell = out.setdefault(r.split, {}).setdefault(kind, {"answers": 0, "spans": 0, "wrong": 0})
        cell["answers"] += 1
        cell["spans"] += len(r.spans)
        cell["wrong"] += sum(s.u >= 1.0 for s in r.spans)
    return out


def sample_answers_summary(records: list[LabeledResponse], k: int, positive_threshold: float) -> dict:
    """What the sample answers added to training (label report → ``sample_answers``)."""
    import numpy as np

    from ..metrics.uq import is_positive

    spans = [s.u for r in records for s in r.spans]
    neg = int(np.sum(~is_positive(np.asarray(spans, dtype=float), positive_threshold)))
    return {"per_prompt": k, "answers": len(records), "with_spans": sum(bool(r.spans) for r in records),
            "spans": len(spans), "negatives": neg, "negative_share": round(neg / len(spans), 4) if spans else None}


def run_label(cfg: Config, progress: bool = True) -> Path:
    """DVC/Prefect entry point: label the greedy answers, write claims, labels, report and plots."""
    paths = StagePaths.from_config(cfg)
    prompts = {p.id: p for p in read_records(paths.prompts, Prompt)}
    gens = read_records(paths.generations, Generation)
    if not gens:
        raise ValueError(f"{paths.generations} holds no generations")
    tokenizer = load_tokenizer(cfg)
    cache = ItemCache(paths.stage_cache("label"))
    t0 = time.perf_counter()
    with open_labeller(cfg, paths) as labeller:
        results = label_all(cfg, prompts, gens, labeller, cache, progress)
        records, lost = build_records(gens, prompts, results, tokenizer)
        assign_label_splits(cfg, records, prompts)
        extra_records, extra_results = label_sample_answers(cfg, prompts, gens, records, labeller, cache, tokenizer,
                                                            progress)
        given_records, given_claims = label_given_answers(cfg, prompts, gens, records, results, tokenizer)
        judge_stats = labeller.judge.stats.as_dict() if hasattr(labeller, "judge") else None
    seconds = time.perf_counter() - t0
    write_jsonl(paths.claims, [c for res in results + extra_results for c in res.claims] + given_claims)
    write_jsonl(paths.labels, records + extra_records + given_records)
    stat_sum: dict[str, int] = {}
    for res in results:
        for k, v in res.stats.items():
            stat_sum[k] = stat_sum.get(k, 0) + int(v)
    gen_samples = [s for g in gens for s in g.samples]
    extra = {"method": cfg.label.method, "claims": sum(len(r.claims) for r in results),
             "claims_not_on_tokens": lost, "labeller": stat_sum,
             "dropped_prompt_copies": stat_sum.get("prompt_copies", 0),
             "abstentions": stat_sum.get("abstentions", 0),
             "truncated": {"greedy": sum(g.greedy.finish_reason == "length" for g in gens),
                           "greedy_share": round(sum(g.greedy.finish_reason == "length" for g in gens)
                                                 / max(1, len(gens)), 4),
                           "samples": sum(s.finish_reason == "length" for s in gen_samples),
                           "samples_share": round(sum(s.finish_reason == "length" for s in gen_samples)
                                                  / max(1, len(gen_samples)), 4)},
             "answers_with_unplaced_claims": sum(r.unplaced > 0 for r in records)}
    # how this run went (a cached answer costs no judge call): the run log, not the report
    run = {"cache": {"hits": cache.hits, "misses": cache.misses}, "seconds": round(seconds, 1)}
    if judge_stats is not None:
        run["judge"] = judge_stats
        run["judge_failures"] = {k: judge_stats.get(k, 0) for k in
                                 ("format_failures", "http_failures", "transient_failures", "truncated_failures")}
    if cfg.label.sample_answers:
        extra["sample_answers"] = sample_answers_summary(extra_records, cfg.label.sample_answers,
                                                         cfg.evaluate.positive_threshold)
    if given_records:
        extra["given_answers"] = given_answers_summary(given_records)
    truth_rows = [t for res in results for t in res.truth]
    extra["truth"] = truth_check(truth_rows, cfg.evaluate.positive_threshold, cfg.evaluate.bootstrap, cfg.evaluate.seed)
    report = label_report(records, cfg.label.uncertainty_bins, extra, cfg.evaluate.positive_threshold)
    write_json(paths.label_report, report)
    write_json(paths.run_log("label"), run)
    title = f"labels — {cfg.backbone.name} ({cfg.label.method})"
    plot_label_report(records, paths.label_plots, title=title)
    plot_truth(truth_rows, extra["truth"], paths.label_plots, title="answer slots")
    ok = report["status"].get("ok", 0)
    if ok == 0:
        raise ValueError(f"no answer got a label (status counts {report['status']}); see {paths.label_report}")
    return paths.labels
