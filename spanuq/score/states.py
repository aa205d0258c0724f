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
  one-token step on the KV cache computes it.
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
                         out_dtype: torch.dtype) -> Generated:
    """Greedy generation that captures the fused states and entropy of every response token."""
    device = next(model.parameters()).device
    enc = tokenizer(chat, return_tensors="pt", add_special_tokens=False).to(device)
    eos = tokenizer.eos_token_id
    out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, temperature=None, top_p=None,
                         top_k=None, pad_token_id=tokenizer.pad_token_id, eos_token_id=eos,
                         output_hidden_states=True, output_logits=True, return_dict_in_generate=True)
    P = enc["input_ids"].shape[1]
    ids = out.sequences[0, P:].tolist()
    stopped = eos in ids
    if stopped:
        ids = ids[: ids.index(eos)]
    T = len(ids)
    text = tokenizer.decode(ids, skip_special_tokens=True).strip()
    canonical = tokenizer(text, add_special_tokens=False)["input_ids"]
    if T == 0 or canonical != ids:  # decoding + re-tokenising changed the tokens: caller re-runs teacher-forced
        return Generated(text, ids, not stopped, None)
    steps = out.hidden_states  # step 0: prompt positions; step k >= 1: the token fed at step k (= ids[k-1])
    fused = [torch.stack([steps[k][l][0, -1] for l in layers]).float().mean(0) for k in range(1, min(T, len(steps) - 1) + 1)]
    if len(fused) < T:  # the last token was never fed: one step on the KV cache
        o = model(input_ids=torch.tensor([[ids[-1]]], device=device), past_key_values=out.past_key_values,
                  output_hidden_states=True, use_cache=True)
        fused.append(torch.stack([o.hidden_states[l][0, -1] for l in layers]).float().mean(0))
    h = torch.stack(fused[:T]).to(out_dtype).cpu()
    ent = token_entropy(torch.stack([lg[0] for lg in out.logits[:T]])).cpu()
    return Generated(text, ids, not stopped, FeatureItem(h, ent, torch.tensor(ids, dtype=torch.int32)))
