"""Which readings of an answer against its sources pay on dev: the reader's features alone and by group, and the
backbone's readings (its surprisal of each word given the sources and without them) added to them.

    python experiments/reader_readings.py [--preset cpu-full] [-o reader.sets.wice.train=80 ...] [--top 5]
    python experiments/reader_readings.py --preset cpu-full --threads 2 --rows shipped combined

Every variant is the reader's net (`spanuq.train.reader.fit_net`, the params' members, epochs, sets) trained on the
train items' rows and read on the dev items' (`spanuq.train.reader.dev_report`: WiCE dev word AUROC, swap pair
accuracy by form); the rows come from the train-reader stage's cache.  The backbone's readings are the product's
(`spanuq.reader.backbone`: each word's surprisal after the question and the ``--top`` source sentences most like
the answer, without the sources, their difference), cached as the train-reader stage caches them.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GROUPS = {
    "lexical (words in the sources)": ["absent_all", "absent_stem", "absent_top1", "absent_top3", "absent_top5"],
    "encoder alignment": ["align_all", "align_top1", "align_top3", "align_top5", "sim_top1", "sim_top3"],
    "question": ["in_question", "question_gap"],
    "the word itself": ["punct", "function", "number", "capital", "pieces", "place", "log_count", "log_sentences"],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-p", "--params", default="params.yaml")
    ap.add_argument("--preset", default=None)
    ap.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a params override, e.g. reader.sets.swaps.train=100 (fewer items: the backbone's readings cost)")
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--out", default=None)
    ap.add_argument("--threads", type=int, default=1, help="torch threads for the backbone's passes")
    ap.add_argument("--rows", nargs="+", choices=["shipped", "groups", "backbone", "combined"],
                    default=["shipped", "groups", "backbone", "combined"],
                    help="which nets to train: the shipped features, each group alone and left out, the backbone's "
                         "readings alone, the shipped features with them")
    args = ap.parse_args()

    import torch

    from spanuq.config import load_config
    from spanuq.label.units import load_spacy
    from spanuq.llm.loading import load_backbone
    from spanuq.pipeline.cache import ItemCache
    from spanuq.pipeline.paths import StagePaths
    from spanuq.reader.backbone import Backbone
    from spanuq.reader.encoder import load_encoder
    from spanuq.reader.features import FEATURES, READER_FEATURES
    from spanuq.train.reader import dev_report, fit_net
    from spanuq.train.reader_rows import items_for, rows_for, with_readings

    torch.set_num_threads(args.threads)
    cfg = load_config(args.params, args.override, args.preset)
    paths = StagePaths.from_config(cfg)
    nlp, encoder = load_spacy(cfg.label.spacy_model), load_encoder(cfg.reader.encoder)
    cache = ItemCache(paths.stage_cache("reader_rows"))
    train = rows_for(encoder, items_for(cfg.reader.sets, "train", nlp), cache, False)
    dev = rows_for(encoder, items_for(cfg.reader.sets, "dev", nlp), cache, False)
    backbone = Backbone(*load_backbone(cfg), cfg.backbone.system_prompt)
    readings = ItemCache(paths.stage_cache("reader_readings"))
    t0 = time.perf_counter()
    train_x, dev_x = (with_readings(backbone, encoder, rows, readings, False, args.top) for rows in (train, dev))
    seconds = time.perf_counter() - t0
    names = list(READER_FEATURES)
    variants = {}
    if "shipped" in args.rows:
        variants["all of the reader's features (shipped)"] = list(FEATURES)
    if "groups" in args.rows:
        for g, cols in GROUPS.items():
            variants[f"{g} alone"] = cols
            variants[f"all but {g}"] = [f for f in FEATURES if f not in cols]
    if "backbone" in args.rows:
        variants["the backbone's readings alone"] = names[-3:] + GROUPS["the word itself"]
    if "combined" in args.rows:
        variants["all of the reader's features + the backbone's readings"] = names
    results = {}
    for name, cols in variants.items():
        idx = [names.index(c) for c in cols]
        t = time.perf_counter()
        net = fit_net(train_x, cfg.reader, idx)
        results[name] = {"features": cols, "dev": dev_report(net, dev_x, idx),
                         "train_seconds": round(time.perf_counter() - t, 1)}
        d = results[name]["dev"]
        print(f"{name:60s} WiCE {d['wice'].get('word_auroc')}  qa {d['swaps'].get('pair_accuracy_qa')}  "
              f"sentence {d['swaps'].get('pair_accuracy_sentence')}  summedits {d['summedits'].get('word_auroc')}",
              flush=True)
    out = Path(args.out) if args.out else paths.root / "reader_readings.json"
    out.write_text(json.dumps({"preset": args.preset, "overrides": args.override, "top": args.top, "backbone_seconds": round(seconds, 1),
                               "variants": results}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
