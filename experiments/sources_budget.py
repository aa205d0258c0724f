"""How much of long sources the reader must read: WiCE dev word AUROC and seconds per claim when the encoder reads
the first N tokens of each cited article, or N tokens focused on the question (BM25 pieces, as
`score.context_focus_tokens` focuses the backbone), against all of it.

    python experiments/sources_budget.py --reader data/smollm2-135m/reader [--budgets 128,256,512,1024,2048]

The reader is the one given (trained on whole sources); only what it reads of WiCE dev's articles changes.
Seconds: the reader's `word_rows` per claim on this machine, the encoder's cache cleared between claims.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reader", required=True)
    ap.add_argument("--budgets", default="128,256,512,1024,2048")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import torch

    from spanuq.context.focus import focus
    from spanuq.context.passages import Passage
    from spanuq.data.real import load_items
    from spanuq.llm.loading import load_tokenizer
    from spanuq.config import load_config
    from spanuq.metrics.uq import rank_auroc
    from spanuq.pipeline.cache import RecentValues
    from spanuq.reader.features import word_rows
    from spanuq.reader.model import load, with_neighbours
    from spanuq.reader.spans import span_scores, spans_of
    from spanuq.train.reader import token_scores
    from spanuq.train.reader_rows import word_labels

    torch.set_num_threads(1)
    tok = load_tokenizer(load_config())
    net = load(Path(args.reader))
    from spanuq.reader.encoder import load_encoder
    from spanuq.reader.features import FEATURES

    encoder = load_encoder(net.cfg.encoder)
    cols = [FEATURES.index(f) for f in net.cfg.features]
    items = load_items("wice", "dev")
    lengths = [len(tok(it.sources[0]["text"])["input_ids"]) for it in items]

    def read(mode: str, budget: int | None) -> dict:
        ys, ss, secs, read_tokens = [], [], [], []
        for it, n in zip(items, lengths):
            text = it.sources[0]["text"]
            if budget is not None and n > budget:
                if mode == "first":
                    ids = tok(text)["input_ids"][:budget]
                    text = tok.decode(ids)
                else:
                    pieces = focus(tok, [Passage("1", text)], it.question, budget)
                    text = "\n".join(p.text[s:e] for _, p, s, e in pieces)
            encoder.recent = RecentValues(encoder.recent.size)  # nothing read before: each claim's cost whole
            t0 = time.perf_counter()
            rows = word_rows(encoder, [text], it.answer, it.question)
            p = net.probability(with_neighbours(rows.x[:, cols], rows.sentence))
            secs.append(time.perf_counter() - t0)
            groups = spans_of(it.answer, rows.words)
            ys.append(word_labels(rows.words, it.marks))
            ss.append(token_scores(it.answer, rows.words, groups, span_scores(p, groups)))
            read_tokens.append(min(n, budget) if budget else n)
        y, s = np.concatenate(ys), np.concatenate(ss)
        return {"mode": mode, "budget": budget, "word_auroc": round(rank_auroc(y > 0.5, s), 4),
                "seconds_per_claim": round(float(np.mean(secs)), 3), "tokens_read_mean": round(float(np.mean(read_tokens)))}

    rows = [read("all", None)]
    for b in (int(x) for x in args.budgets.split(",")):
        rows += [read("first", b), read("focused", b)]
    for r in rows:
        print(json.dumps(r), flush=True)
    out = Path(args.out) if args.out else Path(args.reader).parent / "sources_budget.json"
    out.write_text(json.dumps({"claims": len(items), "article_tokens_median": int(np.median(lengths)),
                               "article_tokens_max": int(max(lengths)), "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
