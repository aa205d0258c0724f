"""Does the backbone's own confidence in its answer, given the paragraph, tell its right own answers from wrong ones?

The own answers are the `real-answers` stage's (the backbone's greedy answers to XQuAD questions with their
paragraph, labelled against the gold answers).  Per answer, one teacher-forced pass of the backbone over the
answer after its question and paragraph, rendered as the product renders them (`spanuq.context.chat.context_chat`),
gives the token surprisal and entropy (mean, max, over the first five tokens); the shipped reader gives its four
answer columns (`spanuq.reader.answer.ANSWER_COLUMNS`).  Each reading alone and the combinations are scored by dev
AUROC; a combination is a logistic regression fitted on the train answers, as `spanuq.train.reader.own_calibration`
fits the shipped one.

    python experiments/own_answer_confidence.py data/smollm2-135m/real_answers.jsonl
    spanuq real-answers --preset cpu-full   # then this on its file: 400 train / 237 dev answers
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

BACKBONE = ("surprisal mean", "surprisal max", "surprisal first 5", "entropy mean", "entropy max")


def backbone_readings(cfg, rows: list[dict], threads: int) -> np.ndarray:
    """(answers, 5): `BACKBONE` of each answer read after its question and paragraph."""
    import torch

    from spanuq.context.chat import context_chat
    from spanuq.llm.loading import load_backbone
    from spanuq.llm.presets import fused_layers
    from spanuq.llm.states import extract_batch

    torch.set_num_threads(threads)
    model, tok = load_backbone(cfg)
    out = []
    for b in range(0, len(rows), 8):
        batch = rows[b: b + 8]
        chats = [context_chat(tok, r["question"], r["sources"], cfg.backbone.system_prompt) for r in batch]
        ids = [tok(r["answer"], add_special_tokens=False)["input_ids"] for r in batch]
        for it in extract_batch(model, tok, chats, ids, fused_layers(cfg)):
            s, e = it.surprisal.float().numpy(), it.entropy.float().numpy()
            out.append([s.mean(), s.max(), s[:5].mean(), e.mean(), e.max()])
    return np.array(out)


def reader_columns(reader_dir: Path, rows: list[dict]) -> np.ndarray:
    from spanuq.reader import model as net_io
    from spanuq.reader.answer import answer_columns
    from spanuq.reader.read import Reader

    reader = Reader(net_io.load(reader_dir))
    cols = []
    for r in rows:
        rd = reader.read([p["text"] for p in r["sources"]], r["answer"], r["question"])
        cols.append(answer_columns(r["answer"], rd.words, rd.x, rd.u_raw))
    return np.array(cols)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("answers", type=Path, help="a real-answers file (data/<backbone>/real_answers.jsonl)")
    ap.add_argument("--reader", type=Path, default=REPO / "spanuq" / "probes" / "smollm2-135m" / "reader")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    from spanuq.config import load_config
    from spanuq.metrics.ece import fit_logistic
    from spanuq.metrics.uq import rank_auroc
    from spanuq.pipeline.files import iter_jsonl
    from spanuq.reader.answer import ANSWER_COLUMNS

    rows = [r for r in iter_jsonl(args.answers) if r["answer"].strip()]
    cfg = load_config(REPO / "params.yaml")
    b, c = backbone_readings(cfg, rows, args.threads), reader_columns(args.reader, rows)
    y = np.array([0.0 if r["right"] else 1.0 for r in rows])
    tr = np.array([r["split"] == "train" for r in rows])
    dev = np.array([r["split"] == "dev" for r in rows])
    print(f"{len(rows)} answers: train {tr.sum()} ({int(y[tr].sum())} wrong), dev {dev.sum()} ({int(y[dev].sum())} wrong)\n")
    print("| reading | dev AUROC |\n|---|---|")
    for name, col in [*zip(BACKBONE, b.T), *zip(ANSWER_COLUMNS, c.T)]:
        print(f"| {name} | {rank_auroc(y[dev] > .5, col[dev]):.3f} |")

    def fitted(x: np.ndarray) -> float:
        m, s = x[tr].mean(0), x[tr].std(0) + 1e-6
        w, b0 = fit_logistic(y[tr], (x[tr] - m) / s, l2=1e-3)
        return rank_auroc(y[dev] > .5, ((x[dev] - m) / s) @ w + b0)

    for name, x in [("the reader's four columns (shipped)", c), ("+ surprisal mean and max", np.c_[c, b[:, :2]]),
                    ("+ every backbone reading", np.c_[c, b]), ("the backbone's readings alone", b)]:
        print(f"| {name}, fitted on train | {fitted(x):.3f} |")
    print(json.dumps({"answers": len(rows), "train": int(tr.sum()), "dev": int(dev.sum())}))


if __name__ == "__main__":
    main()
