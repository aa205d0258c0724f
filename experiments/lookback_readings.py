"""Lookback-Lens readings of the grounded training pairs: every twin's slot as `spanuq.train.grounded_slots`
reads it (raw û, S, H₀ of the span over the slot, the label from the source), plus each head's lookback
ratio over that span, from the same one teacher-forced pass over [rendered sources; answer].

    python experiments/lookback_readings.py [--out /tmp/lookback/readings.npz] [--pairs FILE] [--limit N]

Lookback ratio (Chuang et al. 2024), head h of layer l, at answer token t (chat position p):

    A_ctx = mean_{j ∈ source tokens} a_{l,h}(p, j),   A_new = mean_{j ∈ answer tokens ≤ t} a_{l,h}(p, j)
    LR_{l,h}(t) = A_ctx / (A_ctx + A_new)

"source tokens" are the tokens of the passages' text in the rendered chat (`ReadRange.chat_start/end`);
``LR_prompt`` is the paper's own form, A_ctx over every prompt token.  A slot's feature is the mean of
LR(t) over the tokens of the shown span over it (the tokens of the slot itself when no span covers it).
Writes one row per twin (correct then planted per pair): the SlotReading fields, and ``lr``, ``lr_prompt``
of shape (twins, layers·heads).
"""
from __future__ import annotations

import argparse
import os
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch


@torch.inference_mode()
def pass_with_attention(model, prompt_ids, responses, src_pos, pad_id=0):
    """FeatureItems of one right-padded batch (as `extract_batch`) and, per twin, LR and LR_prompt of every
    answer token: (T, layers·heads) each."""
    from spanuq.llm.states import feature_items, right_padded

    ids, att = right_padded(prompt_ids, responses, pad_id)
    out = model(input_ids=ids, attention_mask=att, output_hidden_states=True, output_attentions=True)
    hs = torch.stack(list(out.hidden_states), dim=1)
    a = torch.stack(list(out.attentions), dim=1).float()  # (B, L, H, N, N)
    pairs, lrs = [], []
    for i, (p, r) in enumerate(zip(prompt_ids, responses)):
        st, T = len(p), len(r)
        rows = a[i, :, :, st: st + T]  # (L, H, T, N)
        src = torch.tensor(src_pos[i], dtype=torch.long)
        a_ctx = rows[..., src].mean(-1)
        a_prompt = rows[..., :st].mean(-1)
        new = rows[..., st: st + T]  # attention on the answer's tokens; causal, so ≤ t
        a_new = new.sum(-1) / torch.arange(1, T + 1, dtype=torch.float32)
        lr = (a_ctx / (a_ctx + a_new)).flatten(0, 1).T  # (T, L·H)
        lrp = (a_prompt / (a_prompt + a_new)).flatten(0, 1).T
        lrs.append((lr.numpy(), lrp.numpy()))
        pairs.append((hs[i, :, st: st + T], out.logits[i, st - 1: st - 1 + T]))
    return pairs, lrs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="/tmp/lookback/readings.npz")
    ap.add_argument("--pairs", default=None, help="a pair file (default: the grounded training pairs)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N pairs")
    ap.add_argument("--batch", type=int, default=4)
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    from spanuq import SpanUQ
    from spanuq.bench.grounded import TRAIN_PAIRS, read_pairs
    from spanuq.bench.planted_run import COVER_IOU
    from spanuq.context.passages import Passage
    from spanuq.context.render import render
    from spanuq.llm.loading import token_offsets
    from spanuq.llm.states import feature_items, fuse_layers  # noqa: F401  (feature_items: as extract_batch)
    from spanuq.train.grounded_slots import label, slot_of

    pairs = read_pairs(args.pairs or TRAIN_PAIRS)[: args.limit]
    uq = SpanUQ.load("spanuq/probes/smollm2-135m")
    model = uq.model
    model.set_attn_implementation("eager")
    twins = [(p, name, t) for p in pairs for name, t in (("correct", p.correct), ("planted", p.planted))]
    chats, src_pos, prompt_ids = [], [], []
    for p, _, _ in twins:
        pieces = [(i, Passage(str(i), c), 0, len(c)) for i, c in enumerate(p.context, 1)]
        rc = render(uq.tok, [{"role": "user", "content": p.prompt}], pieces, uq.system_prompt)
        enc = uq.tok(rc.chat, add_special_tokens=False, return_offsets_mapping=True)
        inside = [j for j, (s, e) in enumerate(enc["offset_mapping"])
                  if any(r.chat_start <= s and e <= r.chat_end for r in rc.read)]
        chats.append(rc.chat)
        src_pos.append(inside)
        prompt_ids.append(list(enc["input_ids"]))
    ids = [token_offsets(uq.tok, t.text)[0] for _, _, t in twins]
    feats, lrs = [], []
    for s in range(0, len(twins), args.batch):
        pr, lr = pass_with_attention(model, prompt_ids[s: s + args.batch], ids[s: s + args.batch],
                                     src_pos[s: s + args.batch], uq.tok.pad_token_id or 0)
        feats += feature_items([(h[uq.layers], lg) for h, lg in pr], ids[s: s + args.batch], uq.out_dtype)
        lrs += lr
        print(f"{s + len(pr)}/{len(twins)}", flush=True)
    kept = uq.calibration
    uq.calibration = replace(kept.raw(), given={"fact_spans": True})
    results = uq.score_many([{"prompt": p.prompt, "response": t.text} for p, _, t in twins], progress=False,
                            return_errors=True, states=feats, chats=chats)
    uq.calibration = kept
    rows, lr_span, lrp_span = [], [], []
    for (p, name, t), f, r, (lr, lrp), tid in zip(twins, feats, results, lrs, ids):
        if isinstance(r, Exception):
            raise RuntimeError(f"{p.id} ({name}): {r}")
        u, sh, (b, e), best = slot_of(uq, r, t, f)
        rows.append(dict(pair=p.id, group=p.group, case=p.case, kind=p.kind, twin=name, label=label(p, name),
                         u_raw=u, surprisal=float(sh[0]), entropy=float(sh[1]), covered=best >= COVER_IOU))
        lr_span.append(lr[b: e + 1].mean(0))
        lrp_span.append(lrp[b: e + 1].mean(0))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    cols = {k: np.array([r[k] for r in rows]) for k in rows[0]}
    np.savez_compressed(args.out, lr=np.array(lr_span), lr_prompt=np.array(lrp_span), **cols)
    print(f"wrote {len(rows)} twins to {args.out}")


if __name__ == "__main__":
    main()
