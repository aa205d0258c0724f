"""Does a word stand with the rest of its answer sentence in the sources?  The reader with and without its two
answer-sentence readings, on dev.

    python experiments/reader_binding.py --preset cpu-full

For a word the sources hold, over the source sentences holding it: the largest share of its answer sentence's other
content words within `spanuq.reader.features.NEAR` words of it (``answer_near``) and in that whole sentence
(``answer_sentence``) — `question_near` / `question_sentence` with the answer sentence's words for the question's.
A name swapped in from another sentence of the passage is in the sources, but not beside the words it is said with.
Each net is trained without them, with both, and with ``answer_sentence`` alone:
`spanuq.train.reader.fit_net` on the train items' cached rows (the params' sets and forms), read on the
dev items (every swap form, the templated pairs' dev) by `spanuq.train.reader.dev_report`.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spanuq.config import load_config  # noqa: E402
from spanuq.label.swaps import FORMS  # noqa: E402
from spanuq.label.units import load_spacy  # noqa: E402
from spanuq.pipeline.cache import ItemCache  # noqa: E402
from spanuq.pipeline.paths import StagePaths  # noqa: E402
from spanuq.reader.encoder import load_encoder  # noqa: E402
from spanuq.reader.features import FEATURES  # noqa: E402
from spanuq.train.reader import dev_report, fit_net  # noqa: E402
from spanuq.train.reader_rows import items_for, rows_for  # noqa: E402

BINDING = ("answer_near", "answer_sentence")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default=None)
    ap.add_argument("-o", "--override", action="append", default=[])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    cfg = load_config("params.yaml", args.override, args.preset)
    paths = StagePaths.from_config(cfg)
    nlp, encoder, cache = load_spacy(cfg.label.spacy_model), load_encoder(cfg.reader.encoder), ItemCache(paths.stage_cache("reader_rows"))
    train = rows_for(encoder, items_for(cfg.reader.sets, "train", nlp, tuple(cfg.reader.swap_forms)), cache, False)
    dev_sets = {**cfg.reader.sets, "templated": {"dev": None}}
    dev = rows_for(encoder, items_for(dev_sets, "dev", nlp, FORMS), cache, False)
    without = [i for i, f in enumerate(FEATURES) if f not in BINDING]
    variants = {"without the answer sentence": without, "with answer_near, answer_sentence": list(range(len(FEATURES))),
                "with answer_sentence alone": sorted(without + [FEATURES.index("answer_sentence")])}
    results = {}
    for name, cols in variants.items():
        t = time.perf_counter()
        d = dev_report(fit_net(train, cfg.reader, cols), dev, cols)
        results[name] = {"dev": d, "seconds": round(time.perf_counter() - t, 1)}
        s, tp = d.get("swaps", {}), d.get("templated", {})
        print(f"{name:36s} WiCE {d['wice'].get('word_auroc')}  qa {s.get('pair_accuracy_qa')}  sentence "
              f"{s.get('pair_accuracy_sentence')}  aside {s.get('pair_accuracy_aside')}  SummEdits "
              f"{d.get('summedits', {}).get('word_auroc')}  templated {json.dumps({k: v for k, v in tp.items() if k.startswith('pair_acc')})}",
              flush=True)
    out = Path(args.out) if args.out else paths.root / "reader_binding.json"
    out.write_text(json.dumps({"preset": args.preset, "overrides": args.override, "variants": results}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
