"""A with-sources reader on the dev swaps in every form: pair accuracy and the share of right / wrong twins its red
line draws, per form (`spanuq.label.swaps.FORMS`, the ``aside`` form included, which no shipped reader trains on).

    python experiments/reader_forms.py spanuq/probes/smollm2-135m/reader data/smollm2-135m/reader

Each reader is read on the same items (every XQuAD dev question with a same-kind rival in its paragraph), its
words' rows from the train-reader stage's cache (`paths.cache`), the slot's û Platt-mapped by the reader's own
``given`` calibration and compared with its own red line.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from spanuq.config import load_config  # noqa: E402
from spanuq.label.swaps import FORMS  # noqa: E402
from spanuq.label.units import load_spacy  # noqa: E402
from spanuq.model.calibration import Calibration  # noqa: E402
from spanuq.pipeline.cache import ItemCache  # noqa: E402
from spanuq.pipeline.paths import StagePaths  # noqa: E402
from spanuq.reader.encoder import load_encoder  # noqa: E402
from spanuq.reader.features import FEATURES  # noqa: E402
from spanuq.reader.read import Reader  # noqa: E402
from spanuq.train.reader import dev_report, slot_score, spans_read  # noqa: E402
from spanuq.train.reader_rows import items_for, rows_for  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("readers", nargs="+", help="reader folders (model.safetensors + config.json)")
    ap.add_argument("-o", "--override", action="append", default=[], help="a param, as `spanuq -o`")
    args = ap.parse_args()
    cfg = load_config(REPO / "params.yaml", args.override)
    nlp = load_spacy(cfg.label.spacy_model)
    items = items_for({"swaps": {"dev": None}}, "dev", nlp, FORMS)
    rows = rows_for(load_encoder(cfg.reader.encoder), items, ItemCache(StagePaths.from_config(cfg).stage_cache("reader_rows")),
                    progress=False)
    for folder in args.readers:
        reader = Reader.load(folder)
        columns = [FEATURES.index(f) for f in reader.net.cfg.features]
        given = reader.calibration["given"]
        mapped, line = Calibration(temperature=given["temperature"], bias=given["bias"]), given["flag"]
        at: dict[tuple[str, str], list[bool]] = {}
        for r in rows:
            _, groups, u, _ = spans_read(reader.net, r, columns)
            raw = slot_score(r, groups, u)
            at.setdefault((r.item.meta["form"], r.item.meta["twin"]), []).append(mapped.scores(np.array([raw]))[0] >= line)
        report = dev_report(reader.net, rows, columns)["swaps"]
        print(f"{folder} (red line {line}):")
        for form in FORMS:
            print(f"  {form:9s} pair accuracy {report.get(f'pair_accuracy_{form}')} ({report.get(f'pairs_{form}')} pairs); "
                  f"right / wrong twins at the line {np.mean(at[(form, 'right')]):.1%} / {np.mean(at[(form, 'wrong')]):.1%}")


if __name__ == "__main__":
    main()
