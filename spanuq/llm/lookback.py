"""Lookback ratios: how much each attention head of the backbone looks at the sources while it reads an answer.

Lookback Lens (Chuang et al. 2024).  For head h of layer l at answer token y_t (chat position p, the answer
starting at position P):

    A_src(t) = mean_{j ∈ source tokens} a_{l,h}(p, j)        (the passages' text in the rendered chat)
    A_new(t) = mean_{P ≤ j ≤ p} a_{l,h}(p, j)                (the answer so far, y_t itself included)
    LR_{l,h}(t) = A_src(t) / (A_src(t) + A_new(t))

and a span's reading is the mean of LR over its tokens (`span_lookback`): one vector of layers × heads
numbers (SmolLM2-135M: 30 × 9 = 270).  A right value the sources state in other words ("eighteen
ninety-eight" for 1898) is read by heads that look back at the passage that states it; a wrong one is not,
whatever its surprisal (docs/grounded.md).

The attention weights come from the same teacher-forced pass that gives the probe's states; they need the
backbone's eager attention (`eager_attention`: SDPA does not return them), and each answer token's row over
the prompt is what is kept, so the cost is that of materialising the attention of the answer's rows, not
another pass.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Sequence

import numpy as np
import torch


@contextmanager
def eager_attention(model):
    """The backbone with eager attention for the block (its attention weights readable), then as it was."""
    was = model.config._attn_implementation
    if was == "eager":
        yield model
        return
    model.set_attn_implementation("eager")
    try:
        yield model
    finally:
        model.set_attn_implementation(was)


def token_lookback(attentions: Sequence[torch.Tensor], sources: Sequence[int], start: int, first: int = 0
                   ) -> torch.Tensor:
    """LR (module docstring) of answer tokens ``first, first+1, …``: ``attentions`` per layer (H, q, K), the
    rows of those q tokens over the K positions so far (prompt, then answer from position ``start``);
    ``sources``: the source tokens' positions.  Returns (q, layers · heads) float32, layer-major."""
    src = torch.as_tensor(list(sources), dtype=torch.long)
    out = []
    for a in attentions:
        a = a.float()
        q = a.shape[-2]
        a_src = a[..., src].mean(-1) if len(src) else torch.zeros(a.shape[:-1])
        n_new = torch.arange(first + 1, first + q + 1, dtype=torch.float32, device=a.device)
        a_new = a[..., start:].sum(-1) / n_new
        out.append(a_src / (a_src + a_new).clamp_min(1e-12))  # (H, q)
    return torch.cat(out, 0).T.cpu()


def source_positions(tokenizer, chat: str, read) -> list[int]:
    """Token positions of the passages' text in ``chat``: the tokens overlapping it (``read``: the window's
    `ReadRange`s, placed in the chat; a range the template moved, ``chat_start`` None, is left out)."""
    ranges = [(r.chat_start, r.chat_end) for r in read if r.chat_start is not None]
    offsets = tokenizer(chat, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    return [j for j, (s, e) in enumerate(offsets) if e > s and any(s < b and e > a for a, b in ranges)]


def span_lookback(lookback, spans) -> np.ndarray:
    """Mean LR of each inclusive token span ``(b, e)``: ``lookback`` (T, layers · heads); returns (n, layers · heads)."""
    lr = np.asarray(lookback, dtype=np.float64)
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    return np.array([lr[b: e + 1].mean(0) for b, e in spans], dtype=np.float64).reshape(len(spans), lr.shape[1])


@torch.inference_mode()
def extract_with_lookback(model, tokenizer, chat_prompts: list[str], responses: list[list[int]], layers: list[int],
                          sources: list[list[int]], out_dtype: torch.dtype = torch.float16) -> list:
    """`extract_batch` with each answer's lookback ratios (``sources``: each prompt's source token positions):
    the same one teacher-forced pass over a right-padded batch, under eager attention."""
    from .states import FeatureItem, feature_items, right_padded

    device = next(model.parameters()).device
    prompt_ids = [tokenizer(chat, add_special_tokens=False)["input_ids"] for chat in chat_prompts]
    ids, att = right_padded(prompt_ids, responses, tokenizer.pad_token_id or 0)
    with eager_attention(model):
        out = model(input_ids=ids.to(device), attention_mask=att.to(device), output_hidden_states=True,
                    output_attentions=True)
    hs = torch.stack([out.hidden_states[l] for l in layers], dim=1)
    items = []
    for i, (p, r) in enumerate(zip(prompt_ids, responses)):
        st, T = len(p), len(r)
        f = feature_items([(hs[i, :, st: st + T], out.logits[i, st - 1: st - 1 + T])], [r], out_dtype)[0]
        rows = [a[i, :, st: st + T, : st + T] for a in out.attentions]
        items.append(FeatureItem(f.h, f.entropy, f.token_ids, f.surprisal, token_lookback(rows, sources[i], st)))
    return items
