"""Which readings of an answer against its sources pay on dev: the reader's features alone and by group, and the
backbone's readings (its surprisal of each word given the sources and without them) added to them.

    python experiments/reader_readings.py [--preset cpu-full] [-o reader.sets.wice.train=80 ...] [--top 5]
    python experiments/reader_readings.py --preset cpu-full --threads 2 --rows shipped combined

Every variant is the reader's net (`spanuq.train.reader.fit_net`, the params' members, epochs, sets) trained on the
train items' rows and read on the dev items' (`spanuq.train.reader.dev_report`: WiCE dev word AUROC, swap pair
accuracy by form); the rows come from the train-reader stage's cache.  The backbone's readings: per answer word,
the sum of its tokens' surprisal read after the question with the sources rendered as the product renders them
(`spanuq.context.chat.question_chat`; the ``--top`` source sentences the encoder finds most like the answer's
query when the sources are longer than that, all of them otherwise), the same without the sources, and their
difference (the words the sources make likely).  Those readings are cached beside the rows.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GROUPS = {
    "lexical (words in the sources)": ["absent_all", "absent_stem", "absent_top1", "absent_top3", "absent_top5"],
    "encoder alignment": ["align_all", "align_top1", "align_top3", "align_top5", "sim_top1", "sim_top3"],
    "question": ["in_question", "question_gap"],
    "the word itself": ["punct", "function", "number", "capital", "pieces", "place", "log_count", "log_sentences"],
}


def backbone_columns(uq_model, tok, system_prompt, encoder, rows, cache, top: int) -> list[np.ndarray]:
    """Per item, (words, 3): surprisal given the sources, without them, and the difference (module docstring)."""
    from spanuq.context.chat import question_chat
    from spanuq.llm.loading import chat_prompt, token_ids, token_offsets
    from spanuq.llm.states import token_logprobs
    from spanuq.pipeline.cache import content_hash
    from spanuq.reader.features import source_sentences

    out = []
    for r in rows:
        it = r.item
        key = content_hash({"readings": 1, "sources": [p["text"] for p in it.sources], "answer": it.answer,
                            "question": it.question, "top": top})
        hit = cache.get(key)
        if hit is None:
            sents, _ = source_sentences([p["text"] for p in it.sources])
            if len(sents) > top:  # the sentences the encoder finds most like the whole answer and its question
                enc = encoder.encode(sents + [f"{it.question} {it.answer}"])
                sims = np.stack([e.sentence for e in enc[:-1]]) @ enc[-1].sentence
                keep = sorted(np.argsort(-sims)[:top])
                passages = [" ".join(sents[i] for i in keep)]
            else:
                passages = [p["text"] for p in it.sources]
            ids, offsets = token_offsets(tok, it.answer)
            with_src = token_ids(tok, question_chat(tok, it.question, passages, system_prompt).chat)
            without = token_ids(tok, chat_prompt(tok, it.question, system_prompt))
            lw, lo = token_logprobs(uq_model, [with_src, without], [ids, ids], tok.pad_token_id or 0)
            cols = []
            for s, e in r.rows.words:
                sel = [k for k, (a, b) in enumerate(offsets) if a < e and b > s]
                cols.append([float(-lw[sel].sum()), float(-lo[sel].sum()), float(lo[sel].sum() - lw[sel].sum())])
            hit = cols
            cache.put(key, hit)
        out.append(np.asarray(hit, np.float32).reshape(-1, 3))
    return out


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
    from spanuq.reader.encoder import load_encoder
    from spanuq.reader.features import FEATURES, WordRows
    from spanuq.train.reader import dev_report, fit_net
    from spanuq.train.reader_rows import ItemRows, items_for, rows_for

    torch.set_num_threads(args.threads)
    cfg = load_config(args.params, args.override, args.preset)
    paths = StagePaths.from_config(cfg)
    nlp, encoder = load_spacy(cfg.label.spacy_model), load_encoder(cfg.reader.encoder)
    cache = ItemCache(paths.stage_cache("reader_rows"))
    train = rows_for(encoder, items_for(cfg.reader.sets, "train", nlp), cache, False)
    dev = rows_for(encoder, items_for(cfg.reader.sets, "dev", nlp), cache, False)
    model, tok = load_backbone(cfg)
    readings = ItemCache(paths.stage_cache("reader_readings"))
    t0 = time.perf_counter()
    extra = {"train": backbone_columns(model, tok, cfg.backbone.system_prompt, encoder, train, readings, args.top),
             "dev": backbone_columns(model, tok, cfg.backbone.system_prompt, encoder, dev, readings, args.top)}
    seconds = time.perf_counter() - t0
    names = list(FEATURES) + ["surprisal_given", "surprisal_without", "surprisal_drop"]

    def widened(rows, cols):
        return [ItemRows(r.item, WordRows(r.rows.words, np.concatenate([r.rows.x, c], 1), r.rows.sentence,
                                          r.rows.passage), r.y) for r, c in zip(rows, cols)]

    train_x, dev_x = widened(train, extra["train"]), widened(dev, extra["dev"])
    import spanuq.train.reader as stage
    import spanuq.reader.model as net_model

    stage.FEATURES = names  # the net names its columns from this list
    net_model.FEATURES = names
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
