"""Long answers: are the spans of the last window as many and as good as those of the first?

    python experiments/long_answers.py [--model shipped] [--tokens 1024] [--orders 2] [--limit 0] [--json out.json]

Long answers are built from the probe's labelled test answers (the shipped probe's
``test_split.jsonl``, or ``--split`` a file of the same rows): shuffled (seed 0), joined by blank
lines into answers of ≥ ``--tokens`` tokens, to a prompt that lists their questions; each
group is read in ``--orders`` orders (forward, reversed, then rotations), so an answer sits
at the start of one long answer and at the end of another.  Each long answer is scored as
`SpanUQ.score` scores it (one teacher-forced pass, chunked past the context; windows of the
probe's trained length, merged: `spanuq.score.windows`).  Its labels are the test answers'
labels, shifted: every labelled span keeps its u*.

A test answer belongs to the window that owns its middle token.  For the answers of the
first window, of the last window, of the windows between, and all, the table gives the
evaluate stage's figures over **every** labelled span of those answers (`evaluate_predictions`:
AUROC, within-answer pair accuracy, coverage, detection F1) twice: the answers scored
**alone** (as the evaluate stage scores them: the control, the same spans) and **in the long
answer** (its kept spans whose middle falls inside the test answer, mapped back to that
answer's tokens; a labelled span no kept span overlaps gets the long answer's û_seq, as in
the evaluate stage).  Every row covers every labelled span of its answers.
"""
from __future__ import annotations

import argparse
import json
import random
import time

import numpy as np
import torch


def load_rows(path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def build_groups(rows: list[dict], tok, min_tokens: int) -> list[list[int]]:
    """Indices of the rows, shuffled, cut into groups of ≥ ``min_tokens`` answer tokens (the last
    group takes the remainder)."""
    order = list(range(len(rows)))
    random.Random(0).shuffle(order)
    groups, cur, n = [], [], 0
    for i in order:
        cur.append(i)
        n += len(rows[i]["token_ids"]) + 1
        if n >= min_tokens:
            groups.append(cur)
            cur, n = [], 0
    if cur:
        (groups[-1].extend(cur) if groups else groups.append(cur))
    return groups


def orders(group: list[int], k: int) -> list[list[int]]:
    """Forward, reversed, then rotations of the forward order (k in all)."""
    out = [group, group[::-1]]
    for r in range(1, k):
        if len(out) >= k:
            break
        s = r * len(group) // k
        out.append(group[s:] + group[:s])
    return out[:k]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="shipped", help="probe (default: the shipped one)")
    ap.add_argument("--split", default=None, help="labelled test rows (default: the shipped probe's test_split.jsonl)")
    ap.add_argument("--tokens", type=int, default=1024, help="tokens per long answer (at least)")
    ap.add_argument("--orders", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="only the first N test answers (0: all)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from spanuq import SpanUQ
    from spanuq.evaluate.scoring import evaluate_predictions
    from spanuq.features.dataset import ResponseExample
    from spanuq.label.targets import char_span_to_tokens
    from spanuq.llm.chunked import extract_long
    from spanuq.llm.loading import chat_prompt, token_offsets
    from spanuq.model.postprocess import Answer, Prediction
    from spanuq.score.shipped import shipped_dir
    from spanuq.score.windows import owned_ranges, plan_windows, predict_windows

    uq = SpanUQ.load(args.model, generator="hf")
    rows = load_rows(args.split or shipped_dir(uq.backbone_name) / "test_split.jsonl")
    if args.limit:
        rows = rows[: args.limit]
    tok, cal, W = uq.tok, uq.calibration, uq.window
    ec = uq.cfg.evaluate
    t0 = time.perf_counter()

    # the test answers alone, as the evaluate stage reads them
    examples, alone_items, alone_answers = [], [], []
    for k, r in enumerate(rows):
        ids, offsets = token_offsets(tok, r["response"])
        assert ids == r["token_ids"], f"{r['prompt_id']}: the tokenizer does not reproduce the stored tokens"
        item = extract_long(uq.model, tok, r["chat_prompt"], ids, uq.layers, uq.out_dtype, uq.max_context)
        alone_items.append(item)
        alone_answers.append(Answer(r["response"], offsets))
        spans = torch.tensor([[s["tok_start"], s["tok_end"]] for s in r["spans"]], dtype=torch.long).reshape(-1, 2)
        examples.append(ResponseExample(r["prompt_id"], r["domain"], "test", torch.zeros(len(ids), 1),
                                        torch.zeros(len(ids)), ids, spans,
                                        torch.tensor([s["u"] for s in r["spans"]], dtype=torch.float32),
                                        r.get("u_seq"), r["response"]))
    alone = predict_windows(uq.probe, alone_items, cal, alone_answers, window=W,
                            prompt_ids=[r["prompt_id"] for r in rows])
    t_alone = time.perf_counter() - t0

    # the long answers
    placed: dict[str, list[tuple[str, Prediction]]] = {}  # position → [(prompt_id, prediction in the answer's tokens)]
    n_long, long_tokens, windows_seen = 0, [], []
    for group in build_groups(rows, tok, args.tokens):
        for order in orders(group, args.orders):
            text, starts = "", []
            for i in order:
                text += "\n\n" if text else ""
                starts.append(len(text))
                text += rows[i]["response"]
            prompt = "Answer each of these questions:\n" + "\n".join(f"{j + 1}. {rows[i]['prompt']}"
                                                                     for j, i in enumerate(order))
            chat = chat_prompt(tok, prompt, uq.system_prompt)
            ids, offsets = token_offsets(tok, text)
            item = extract_long(uq.model, tok, chat, ids, uq.layers, uq.out_dtype, uq.max_context)
            pred = predict_windows(uq.probe, [item], cal, [Answer(text, offsets)], window=W)[0]
            plan = plan_windows(len(ids), W)
            owned = owned_ranges(plan, len(ids))
            n_long += 1
            long_tokens.append(len(ids))
            windows_seen.append(len(plan))
            shown = pred.shown()
            for i, a0 in zip(order, starts):
                r, a1 = rows[i], a0 + len(rows[i]["response"])
                tb, te = char_span_to_tokens(offsets, a0, a1)
                w = next(k for k, (lo, hi) in enumerate(owned) if lo <= (tb + te) // 2 < hi)
                pos = "first" if w == 0 else "last" if w == len(plan) - 1 else "middle"
                own_offsets = alone_answers[i].offsets
                mine = [s for s in shown if a0 <= (s.start + s.end) // 2 < a1]
                tok_spans = [char_span_to_tokens(own_offsets, s.start - a0, s.end - a0) for s in mine]
                keep = [(s, t) for s, t in zip(mine, tok_spans) if t is not None]
                n = len(keep)
                p = Prediction(r["prompt_id"], np.array([t for _, t in keep], dtype=np.int64).reshape(-1, 2),
                               np.array([s.u for s, _ in keep]), np.array([s.validity for s, _ in keep]),
                               pred.u_seq, np.arange(n), u_raw=np.array([s.u_raw for s, _ in keep]),
                               u_seq_raw=pred.u_seq_raw, nu=np.array([s.nu for s, _ in keep]),
                               threshold=cal.validity_threshold)
                placed.setdefault(pos, []).append((r["prompt_id"], p))
            print(f"long answer {n_long}: {len(ids)} tokens, {len(plan)} windows, {len(shown)} spans shown "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)

    by_id = {e.prompt_id: k for k, e in enumerate(examples)}

    def figures(pairs: list[tuple[str, Prediction]]) -> dict:
        ex = [examples[by_id[pid]] for pid, _ in pairs]
        m_long = evaluate_predictions([p for _, p in pairs], ex, ec)
        m_alone = evaluate_predictions([alone[by_id[pid]] for pid, _ in pairs], ex, ec)
        row = {"answers": len(ex), "labelled_spans": int(sum(len(e.u) for e in ex))}
        for name, m in (("alone", m_alone), ("long", m_long)):
            row[name] = {"auroc": m["span"]["auroc"], "pair_accuracy": m["span"]["pair_accuracy"],
                         "coverage": m["coverage"], "f1": m["detection"]["f1"],
                         "shown_spans": int(sum(len(p.keep) for p in (
                             [p for _, p in pairs] if name == "long" else [alone[by_id[pid]] for pid, _ in pairs])))}
        return row

    table = {pos: figures(placed[pos]) for pos in ("first", "middle", "last") if pos in placed}
    table["all"] = figures([x for pos in ("first", "middle", "last") for x in placed.get(pos, [])])
    out = {"probe": uq.probe_source, "window": W, "long_answers": n_long, "orders": args.orders,
           "tokens_min_mean_max": [min(long_tokens), round(float(np.mean(long_tokens))), max(long_tokens)],
           "windows_min_max": [min(windows_seen), max(windows_seen)], "test_answers": len(rows),
           "seconds": round(time.perf_counter() - t0, 1), "seconds_alone": round(t_alone, 1), "table": table}
    print(json.dumps(out, indent=2, default=float))

    def v(x):
        x = x.get("value", x) if isinstance(x, dict) else x
        return "–" if x is None else f"{x:.3f}"

    print("\n| answers in | answers | labelled spans | shown spans (alone → long) | AUROC | pair acc. | coverage | F1 |")
    print("|---|---|---|---|---|---|---|---|")
    for pos, row in table.items():
        a, lg = row["alone"], row["long"]
        print(f"| {pos} window{'s' if pos in ('middle', 'all') else ''} | {row['answers']} | {row['labelled_spans']} | "
              f"{a['shown_spans']} → {lg['shown_spans']} | " +
              " | ".join(f"{v(a[k])} → {v(lg[k])}" for k in ("auroc", "pair_accuracy", "coverage", "f1")) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2, default=float)


if __name__ == "__main__":
    main()
