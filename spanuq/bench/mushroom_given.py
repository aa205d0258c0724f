"""Which spans of a given answer the product shows: the given-answer validity threshold, chosen on
Mu-SHROOM **validation** through the product's own output.

Mu-SHROOM's answers were written by other systems, which is the situation of the given-answer
calibration (`Calibration.given`). Its mapping and red line are fitted on the dev split's slots
(`spanuq.train.given_calibration`); which queries of such an answer are shown is not: the probe's
validity threshold was chosen on the backbone's own dev answers. This module chooses it on human
labels instead:

    spanuq recalibrate --mushroom-val path/to/mushroom.en-val.v2.extra.jsonl [--probe DIR]

For each threshold of ``GRID`` every validation answer is scored as a user scores it,
``SpanUQ.score(question, response=answer)`` with the probe's given calibration and that threshold,
and read as the bench's headline row reads it (`spanuq.bench.run.product_method`: a character's
score is the largest û of the shown spans over it, its hard label û at or above the red line).
The threshold with the highest mean Cor is kept (ties: the higher IoU, then the higher threshold,
i.e. fewer spans); the red line is left as fitted. The choice is written into the probe's
``config.json`` as ``calibration.given.validity_threshold`` and what it was chosen on as
``extra.given_validity``; the scorer applies it to every given answer (an explicit threshold, e.g.
``SpanUQ.load(threshold=...)``, still wins). The test split is never read here.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from ..pipeline.files import sha256_file
from .metrics import item_scores
from .mushroom import MushroomItem, read_items, split_of
from .select import predictions

GRID = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)


def product_scores(results: list, items: list[MushroomItem]) -> dict:
    """Mean IoU and Cor of the product's own output (the bench's headline reading) and the share of
    shown spans at or above the red line."""
    from .run import product_method

    method = product_method(results, [x.text_len for x in items])
    settings = {"soft": "as returned", "hard": {"variant": "as returned", "threshold": method.thresholds[0]}}
    iou, cor = item_scores([x.reference() for x in items], predictions(method, settings))
    shown = [s for r in results if r is not None for s in r.spans]
    flagged = sum(s.u >= r.flag_threshold for r in results if r is not None for s in r.spans)
    return {"iou": float(np.mean(iou)), "cor": float(np.mean(cor)), "spans": len(shown),
            "share_flagged": flagged / len(shown) if shown else 0.0}


def choose_given_validity(uq, items: list[MushroomItem], grid=GRID, progress: bool = False) -> tuple[float, list[dict]]:
    """(the chosen threshold, one row per threshold of ``grid``) for the probe ``uq`` holds, on
    ``items`` (module docstring). ``uq``'s calibration is restored afterwards."""
    from .run import score_items

    if uq.calibration.given is None:
        raise ValueError("this probe has no given-answer calibration: fit one first (`spanuq recalibrate`)")
    kept, rows = uq.calibration, []
    try:
        for v in grid:
            uq.calibration = replace(kept, given={**kept.given, "validity_threshold": float(v)})
            results, skipped = score_items(uq, items, progress)
            rows.append({"validity_threshold": float(v), **product_scores(results, items), "skipped": len(skipped)})
    finally:
        uq.calibration = kept
    best = max(rows, key=lambda r: (round(r["cor"], 6), round(r["iou"], 6), r["validity_threshold"]))
    return best["validity_threshold"], rows


def val_items(path: str | Path) -> list[MushroomItem]:
    """The English Mu-SHROOM validation answers of ``path``; any other file is refused (the test split
    is read once, by `spanuq bench mushroom --split test`, never to choose)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--mushroom-val {path}: no such file")
    if split_of(path) != "val":
        raise ValueError(f"--mushroom-val {path}: not the English labelled Mu-SHROOM validation file "
                         "(records with lang EN, ids val-en-…, hard_labels and soft_labels)")
    return sorted(read_items(path), key=lambda x: x.id)


def carry(probe_dir: str | Path, cfg, val_file: str | Path, progress: bool = False) -> dict:
    """Choose the given-answer validity threshold of the probe in ``probe_dir`` on ``val_file`` and
    write it into its ``config.json`` (weights and every other entry untouched); returns the record
    stored as ``extra.given_validity``."""
    import json

    from .. import SpanUQ
    from ..model.checkpoint import CONFIG, load_checkpoint

    items = val_items(val_file)
    with SpanUQ.load(probe_dir, cfg=cfg) as uq:
        chosen, rows = choose_given_validity(uq, items, progress=progress)
    record = {"validity_threshold": chosen, "chosen_on": "Mu-SHROOM English validation (SemEval-2025 Task 3)",
              "file": Path(val_file).name, "sha256": sha256_file(Path(val_file)), "n_items": len(items),
              "rule": "highest mean Cor of the product's own output, then IoU, then the higher threshold",
              "grid": rows}
    cal = load_checkpoint(probe_dir).calibration
    path = Path(probe_dir) / CONFIG
    meta = json.loads(path.read_text())
    meta["calibration"] = replace(cal, given={**cal.given, "validity_threshold": chosen}).as_dict()
    meta["extra"] = {**meta.get("extra", {}), "given_validity": record}
    path.write_text(json.dumps(meta, indent=2, sort_keys=True))  # as `save_calibration` writes it
    return record
