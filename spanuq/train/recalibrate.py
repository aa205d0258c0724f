"""``spanuq recalibrate``: fit a trained probe's given-answer mapping again, weights untouched.

The train stage fits both of a probe's calibrations on its dev split (`calibrate_on_dev`). The
given-answer one (`calibrate_given`) depends only on the probe's outputs and the dev split's given
answers, so when the label stage adds given answers (`label.given_swaps`) or the mapping changes,
it is refitted on the stored features of the run instead of training again: the own-answer
calibration (temperature, validity threshold, flag) is kept as the train stage fitted it.

    spanuq recalibrate --preset cpu-full -o paths.data=data-cpu-full            # the run's probe
    spanuq recalibrate --preset cpu-full -o paths.data=data-cpu-full --probe DIR  # another probe, same dev split
    spanuq recalibrate --grounded --probe DIR     # only the with-sources calibration, on grounded training pairs
    spanuq recalibrate --grounded-generated --probe DIR -o paths.data=D  # only own answers' with-sources mapping
    spanuq recalibrate --mushroom-val FILE --probe DIR   # which spans of a given answer are shown (Mu-SHROOM val)

A refit keeps a given-answer validity threshold chosen with ``--mushroom-val``
(`spanuq.bench.mushroom_given`): it was chosen on human labels, not on the dev split.  Where the
run's dev split holds own answers read with sources (``prompts.grounded``), their mapping
(``grounded.generated``, `context_calibration`) is refitted beside the given one.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from ..config import Config
from ..features.dataset import answers, load_examples
from ..llm.loading import load_tokenizer, resolve_device
from ..model.checkpoint import load_checkpoint, save_calibration
from ..pipeline.files import write_json
from ..pipeline.paths import StagePaths
from .context_calibration import calibrate_generated_with_context, split_context
from .given_calibration import calibrate_given


def recalibrate(cfg: Config, probe_dir: str | Path | None = None) -> dict:
    """Refit the given-answer mapping of the probe in ``probe_dir`` (default: the run's) on the
    run's dev given answers and rewrite its ``config.json``; returns what was fitted."""
    paths = StagePaths.from_config(cfg)
    probe_dir = Path(probe_dir) if probe_dir is not None else paths.probe
    dev_given, _ = split_context(load_examples(paths.features, paths.labels, ("dev",), given=True))
    dev, dev_context = split_context(load_examples(paths.features, paths.labels, ("dev",)))
    if not dev_given:
        raise ValueError(f"no given answers in the dev split of {paths.labels}: run the label stage with "
                         "label.given_swaps=true (or label.given_templates > 0) and extract first")
    device = resolve_device(cfg.train.device)
    ck = load_checkpoint(probe_dir, device)
    own = replace(ck.calibration, given=None)
    calibration, info = calibrate_given(ck.probe, dev_given, own, cfg, device,
                                        answers(load_tokenizer(cfg), dev_given), dev)
    if not info.get("used"):
        raise ValueError(f"no given-answer mapping could be fitted: {info.get('reason')}")
    shown = (ck.calibration.given or {}).get("validity_threshold")
    if shown is not None:  # chosen on human labels (`--mushroom-val`), not on this dev split: it stays
        calibration = replace(calibration, given={**calibration.given, "validity_threshold": shown})
    written = {"data": str(paths.root), "given": info}
    if dev_context:  # own dev answers read with sources (`prompts.grounded`): their mapping too
        calibration, written["grounded_generated"] = calibrate_generated_with_context(
            ck.probe, dev_context, calibration, cfg, device, answers(load_tokenizer(cfg), dev_context))
    save_calibration(probe_dir, calibration)
    write_json(probe_dir / "recalibration.json", written)
    return info


def recalibrate_generated_with_context(cfg: Config, probe_dir: str | Path) -> dict:
    """Fit only ``grounded["generated"]`` of the probe in ``probe_dir`` (the mapping of its own answers read with
    sources, `context_calibration`) on the run's dev answers the backbone wrote with sources, and read it on the
    run's train answers with sources; the weights and every other entry stay byte for byte.  For a probe trained
    on another run (the shipped one): it never read either split, so the train split is a held-out check; the
    run's own probe gets this entry from its train stage and is refused."""
    from ..evaluate.scoring import evaluate_predictions
    from ..model.postprocess import predict

    paths = StagePaths.from_config(cfg)
    probe_dir = Path(probe_dir)
    if probe_dir.resolve() == paths.probe.resolve():
        raise ValueError(f"{probe_dir} is this run's own probe: its train stage fits grounded.generated (and read "
                         "the train split); give a probe trained on another run")
    _, dev = split_context(load_examples(paths.features, paths.labels, ("dev",)))
    _, check = split_context(load_examples(paths.features, paths.labels, ("train",)))
    if not dev:
        raise ValueError(f"no dev answers written with sources in {paths.labels}: run prompts .. extract with "
                         "prompts.grounded > 0 (or a prompt file with `context`) first")
    device = resolve_device(cfg.train.device)
    tok = load_tokenizer(cfg)
    ck = load_checkpoint(probe_dir, device)
    calibration, info = calibrate_generated_with_context(ck.probe, dev, ck.calibration, cfg, device, answers(tok, dev))
    if not info.get("used"):
        raise ValueError(f"no with-sources mapping of own answers could be fitted: {info.get('reason')}")
    written = {"data": str(paths.root), "fit": info}
    if check:
        mapped = calibration.for_source("generated", grounded=True)
        preds = predict(ck.probe, check, mapped, answers(tok, check), batch_size=cfg.train.batch_size, device=device)
        before = predict(ck.probe, check, ck.calibration.for_source("generated"), answers(tok, check),
                         batch_size=cfg.train.batch_size, device=device)
        written["check"] = {"split": "train", "answers": len(check),
                            "with_this_mapping": evaluate_predictions(preds, check, cfg.evaluate, bootstrap=1000),
                            "with_the_mapping_without_sources": evaluate_predictions(before, check, cfg.evaluate,
                                                                                     bootstrap=1000)}
    save_calibration(probe_dir, calibration)
    write_json(probe_dir / "grounded_generated.json", written)
    return written


def run_recalibrate(args, cfg: Config) -> int:
    if getattr(args, "mushroom_val", None):
        from ..bench.mushroom_given import carry

        probe = Path(args.probe) if args.probe else StagePaths.from_config(cfg).probe
        record = carry(probe, cfg, args.mushroom_val, progress=not getattr(args, "no_progress", False))
        print(json.dumps(record, indent=2))
        print(f"recalibrate: wrote the given-answer validity threshold {record['validity_threshold']:g} "
              f"(chosen on {record['file']}) into {probe}/config.json")
        return 0
    if getattr(args, "grounded_generated", False):
        if not args.probe:
            raise SystemExit("recalibrate: --grounded-generated needs --probe DIR (a probe trained on another run)")
        written = recalibrate_generated_with_context(cfg, args.probe)
        print(json.dumps({"fit": written["fit"], "check": {k: v for k, v in written.get("check", {}).items()
                                                            if k in ("split", "answers")}}, indent=2, default=str))
        print(f"recalibrate: wrote the with-sources calibration of own answers (grounded.generated) into "
              f"{args.probe}/config.json; the check on the run's train split: {args.probe}/grounded_generated.json")
        return 0
    if getattr(args, "grounded", None):
        info = recalibrate_grounded(cfg, args.probe, None if args.grounded == "bundled" else args.grounded)
        print(json.dumps({"variant": info["variant"], **info["entry"], "validation": info["validation"]}, indent=2))
        print(f"recalibrate: wrote the with-sources calibration (grounded.given) into "
              f"{Path(args.probe) if args.probe else StagePaths.from_config(cfg).probe}/config.json")
        return 0
    info = recalibrate(cfg, args.probe)
    keys = ("fitted_on", "slots", "spans", "temperature", "bias", "surprisal", "context", "flag", "margin", "unknown_entropy",
            "fact_spans")
    print(json.dumps({k: info[k] for k in keys if k in info}, indent=2))
    print(f"recalibrate: wrote {Path(args.probe) if args.probe else StagePaths.from_config(cfg).probe}/config.json")
    return 0


def repo_relative(path: Path) -> str:
    """``path`` relative to the repository when it lies inside it (a card records no machine's folders)."""
    root = Path(__file__).resolve().parents[2]
    try:
        return Path(path).resolve().relative_to(root).as_posix()
    except ValueError:
        return str(path)


def recalibrate_grounded(cfg: Config, probe_dir: str | Path | None = None, pairs: str | Path | None = None) -> dict:
    """Fit the with-sources calibration of given answers (`spanuq.train.grounded_calibration`) of the
    probe in ``probe_dir`` on grounded training pairs (default: the bundled ones) and write it into
    the probe's ``config.json`` as ``grounded["given"]``: the weights and every other calibration entry
    stay as they are. The slots' readings are cached under ``data/<backbone>/grounded/`` by the probe's
    weights, the pair file and the backbone, so a refit reads nothing again."""
    from dataclasses import asdict

    from .. import SpanUQ
    from ..bench.grounded import read_pairs
    from ..data.grounded import TRAIN_PAIRS
    from .grounded_slots import SlotReading, slot_readings
    from ..model.checkpoint import load_checkpoint
    from ..pipeline.cache import content_hash
    from ..pipeline.files import iter_jsonl, sha256_file, write_jsonl
    from .grounded_calibration import calibrate_grounded, with_grounded

    paths = StagePaths.from_config(cfg)
    probe_dir = Path(probe_dir) if probe_dir is not None else paths.probe
    pairs = Path(pairs) if pairs is not None else TRAIN_PAIRS
    key = content_hash({"weights": sha256_file(probe_dir / "model.safetensors"), "pairs": sha256_file(pairs),
                        "backbone": cfg.backbone.name, "reader": 5})
    cache = Path(cfg.paths.data) / cfg.backbone.name / "grounded" / f"readings-{key[:16]}.jsonl"
    if cache.exists():
        readings = [SlotReading(**r) for r in iter_jsonl(cache)]
    else:
        with SpanUQ.load(probe_dir, cfg=cfg) as uq:
            readings = slot_readings(uq, read_pairs(pairs), progress=not getattr(cfg, "no_progress", False))
        write_jsonl(cache, [asdict(r) for r in readings])
    entry, info = calibrate_grounded(readings, cfg.evaluate.flag_precision, cfg.evaluate.positive_threshold,
                                     cfg.evaluate.grounded_variants)
    ck = load_checkpoint(probe_dir)
    save_calibration(probe_dir, with_grounded(ck.calibration, entry))
    info = {"pairs": repo_relative(pairs), "readings": str(cache), "entry": entry, **info}
    write_json(probe_dir / "grounded_calibration.json", info)
    return info
