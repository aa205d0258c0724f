"""Hidden states of an answer longer than the backbone's context: chunked teacher-forced passes.

When prompt (P tokens) + answer (T tokens) fit the context C, one pass reads them
(`extract_batch`).  Otherwise the answer is cut into chunks of c = ⌊(C − P)/2⌋ tokens and
chunk [a, b) is read in its own teacher-forced pass over

    [chat prompt; answer tokens max(0, b − (C − P)) .. a − 1; answer tokens a .. b − 1]

i.e. every chunk sees the whole chat prompt (so the question is never lost) and the
C − P − (b − a) ≥ c answer tokens just before it (all of them near the start of the
answer), and positions stay inside the context the backbone was trained on.  Tokens deep
into a long answer thus lose the part of the answer more than C − P − c tokens back,
as a sliding-window reader would; the entropy of token y_a comes from the logits at the
position before it in the same pass, as in one pass (so does its surprisal).  Each token is computed once as a
target and at most once more as context, so the cost is at most twice one pass.
"""
from __future__ import annotations

import torch

from .states import FeatureItem, extract_batch, feature_items, teacher_forced_ids


def chunk_plan(n_prompt: int, T: int, max_context: int) -> list[tuple[int, int, int]]:
    """(context_start, a, b) per chunk: the pass reads answer tokens [context_start, b) after
    the prompt and keeps the states of [a, b)."""
    budget = max_context - n_prompt
    if budget < 2:
        raise ValueError(f"the prompt ({n_prompt:,} tokens) leaves no room in the context of {max_context:,} tokens")
    if T <= budget:
        return [(0, 0, T)]
    c = budget // 2
    return [(max(0, min(a + c, T) - budget), a, min(a + c, T)) for a in range(0, T, c)]


@torch.inference_mode()
def extract_long(model, tokenizer, chat: str, ids: list[int], layers: list[int], out_dtype: torch.dtype,
                 max_context: int | None) -> FeatureItem:
    """Fused states + entropy of ``ids`` (the answer's tokens) after ``chat``: one pass when they
    fit ``max_context`` (None: no limit), else chunked passes (module docstring)."""
    prompt = tokenizer(chat, add_special_tokens=False)["input_ids"]
    plan = chunk_plan(len(prompt), len(ids), max_context) if max_context else [(0, 0, len(ids))]
    if len(plan) == 1:
        return extract_batch(model, tokenizer, [chat], [ids], layers, out_dtype)[0]
    pad = tokenizer.pad_token_id or 0
    parts = [feature_items(teacher_forced_ids(model, [prompt + ids[c0:a]], [ids[a:b]], pad, layers),
                           [ids[a:b]], out_dtype)[0] for c0, a, b in plan]
    return FeatureItem(torch.cat([p.h for p in parts]), torch.cat([p.entropy for p in parts]),
                       torch.tensor(ids, dtype=torch.int32), torch.cat([p.surprisal for p in parts]))
