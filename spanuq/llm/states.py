"""The probe's input for one answer: fused hidden states + token entropy of the response tokens.

Two ways to get them for ``score(prompt)``:

* ``teacher_forced_items``: the answer's canonical tokens (``tokenizer(answer)``) fed with the
  chat prompt through the frozen backbone once (what the extract stage does, so the probe sees
  exactly its training input).  Used for a given answer, and after llama.cpp generation.
* ``generate_with_states``: greedy transformers generation that keeps, at every step, the
  hidden states of the token just fed and the logits of the token just chosen.  For response
  token y_t the state is the one at y_t's position (computed at step t+1, when y_t is the
  input) and the entropy is that of the logits at step t (which chose y_t), the same
  quantities as a teacher-forced pass, with no second pass.  The last token's state is
  missing when generation stops at ``max_new_tokens`` (no step fed it): one more
  one-token step on the KV cache computes it.  When a stop string ends the answer, its
  tokens are dropped and the states of the tokens before it are kept.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..features.extract import extract_batch, token_entropy
from ..features.store import FeatureItem


@dataclass
class Generated:
    text: str  # the answer as the pipeline stores it (decoded, stripped)
    token_ids: list[int]  # generated ids without EOS
    truncated: bool
    item: FeatureItem | None  # captured states; None when they do not match the canonical tokens


def teacher_forced_items(model, tokenizer, chat_prompts: list[str], responses: list[list[int]], layers: list[int],
                         out_dtype: torch.dtype) -> list[FeatureItem]:
    """One batched teacher-forced pass (right-padded) over several (prompt, response) pairs."""
    return extract_batch(model, tokenizer, chat_prompts, responses, layers, out_dtype)


@torch.inference_mode()
def generate_with_states(model, tokenizer, chat: str, layers: list[int], max_new_tokens: int,
                         out_dtype: torch.dtype, stop: list[str] | None = None) -> Generated:
    """Greedy generation that captures the fused states and entropy of every response token.

    ``stop``: stop strings (the pipeline's ``generate.stop``); the text is cut where one
    starts, as the llama.cpp server does, and the states of the tokens kept are used."""
    device = next(model.parameters()).device
    enc = tokenizer(chat, return_tensors="pt", add_special_tokens=False).to(device)
    eos = tokenizer.eos_token_id
    kw = {"stop_strings": list(stop), "tokenizer": tokenizer} if stop else {}
    out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, temperature=None, top_p=None,
                         top_k=None, pad_token_id=tokenizer.pad_token_id, eos_token_id=eos,
                         output_hidden_states=True, output_logits=True, return_dict_in_generate=True, **kw)
    P = enc["input_ids"].shape[1]
    ids = out.sequences[0, P:].tolist()
    stopped = eos in ids
    if stopped:
        ids = ids[: ids.index(eos)]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    cut = min((i for i in (text.find(s) for s in stop or []) if i >= 0), default=-1)
    if cut >= 0:
        text, stopped = text[:cut], True
    text = text.strip()
    canonical = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not canonical or canonical != ids[: len(canonical)]:  # re-tokenising changed the tokens:
        return Generated(text, ids, not stopped, None)    # the caller runs a teacher-forced pass
    ids, T = canonical, len(canonical)  # a stop string's tokens after the answer are dropped
    steps = out.hidden_states  # step 0: prompt positions; step k >= 1: the token fed at step k (= ids[k-1])
    fused = [torch.stack([steps[k][l][0, -1] for l in layers]).float().mean(0) for k in range(1, min(T, len(steps) - 1) + 1)]
    if len(fused) < T:  # the last token was never fed: one step on the KV cache
        o = model(input_ids=torch.tensor([[ids[-1]]], device=device), past_key_values=out.past_key_values,
                  output_hidden_states=True, use_cache=True)
        fused.append(torch.stack([o.hidden_states[l][0, -1] for l in layers]).float().mean(0))
    h = torch.stack(fused[:T]).to(out_dtype).cpu()
    ent = token_entropy(torch.stack([lg[0] for lg in out.logits[:T]])).cpu()
    return Generated(text, ids, not stopped, FeatureItem(h, ent, torch.tensor(ids, dtype=torch.int32)))
