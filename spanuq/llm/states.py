"""The probe's input for an answer: fused hidden states and token entropy of its tokens.

For a greedy answer y = (y_1..y_T) to the chat-templated prompt x:

* fused states  H̄_t = (1/|L|) Σ_{l∈L} H^(l)_t   (paper Eq. 1, `fuse_layers`), at the position of y_t;
* token entropy e_t = −Σ_v p(v | x, y_<t) log p(v | x, y_<t), the entropy of the
  distribution y_t was decoded from (logits at the position before y_t);
* token surprisal s_t = −log p(y_t | x, y_<t), how unexpected the token that is there was to the
  backbone (≈ 0 for its own greedy choices, large where someone else's words differ from what it
  would have said).

Two ways to get them, one for each place that needs them:

* ``extract_batch``: one teacher-forced forward pass of the frozen backbone over [x; y]
  (right-padded batches), keeping the response positions.  The extract stage stores these;
  ``score(prompt, response)`` computes them for any answer, and after llama.cpp generation.
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
from typing import Sequence

import torch


@dataclass
class FeatureItem:
    """One answer's probe input (what the feature store keeps per answer)."""

    h: torch.Tensor  # (T, d) fused hidden states
    entropy: torch.Tensor  # (T,)
    token_ids: torch.Tensor  # (T,) int32
    surprisal: torch.Tensor | None = None  # (T,) −log p(y_t | x, y_<t); None in stores written without it
    lookback: torch.Tensor | None = None  # (T, layers·heads) lookback ratios (`spanuq.llm.lookback`); only where read


def fuse_layers(hidden_states: Sequence[torch.Tensor] | torch.Tensor, layers: Sequence[int] | None = None
                ) -> torch.Tensor:
    """Paper Eq. 1: the mean of the chosen layers' states, in float32.

    ``hidden_states``: per-layer tensors (transformers' ``hidden_states``, index 0 = the
    embeddings) or a tensor with the layers on dim 0; ``layers``: which of them (None: all given).
    A model sharded over several GPUs (``backbone.device_map``) computes its layers on different
    devices: the mean is taken on the last chosen layer's."""
    chosen = list(hidden_states) if layers is None else [hidden_states[l] for l in layers]
    return torch.stack([h.to(chosen[-1].device) for h in chosen]).float().mean(0)


def output_device(model) -> torch.device:
    """The device a backbone computes its last hidden states (and from them its logits) on.

    A model loaded with ``backbone.device_map`` is sharded by accelerate: it embeds its input on the
    first device and ends on the last, so an index into the last states (``logits_to_keep``) belongs
    there, not on the first parameter's device.  That is the device of the base model's last module
    with weights (its final norm), or the device accelerate runs that module on when its weights are
    offloaded."""
    base = getattr(model, "base_model", model)
    last = [m for m in base.modules() if next(m.parameters(recurse=False), None) is not None][-1]
    runs_on = getattr(getattr(last, "_hf_hook", None), "execution_device", None)
    return torch.device(runs_on) if runs_on is not None else next(last.parameters(recurse=False)).device


def cache_kwargs(model, cache) -> dict:
    """The KV cache as ``model.forward`` takes it: ``cache=`` (newer transformers, which deprecate
    ``past_key_values=`` with a warning on every call), else ``past_key_values=``."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return {"cache": cache} if "cache" in params else {"past_key_values": cache}


def logits_kwargs(model, keep) -> dict:
    """``logits_to_keep=keep`` when ``model.forward`` takes it (the vocabulary projection only at the
    positions kept: an int, the last ``keep``; a 1-D tensor, those positions), else nothing."""
    import inspect

    return {"logits_to_keep": keep} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}


def output_cache(out):
    """The KV cache of a forward / generate output, under either name."""
    return getattr(out, "cache", None) if getattr(out, "cache", None) is not None else out.past_key_values


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of each row's softmax distribution."""
    logp = torch.log_softmax(logits.float(), -1)
    return -(logp.exp() * logp).sum(-1)


def token_surprisal(logits: torch.Tensor, ids) -> torch.Tensor:
    """−log p(ids[t]) (nats) under row t's softmax distribution, (T,) float32 on the CPU."""
    logp = torch.log_softmax(logits.float(), -1)
    idx = torch.as_tensor(list(ids), dtype=torch.long, device=logp.device)
    return (-logp[torch.arange(len(idx), device=logp.device), idx]).cpu()


@torch.inference_mode()
def teacher_forced(model, tokenizer, chat_prompts: list[str], responses: list[list[int]],
                   layers: list[int] | None = None):
    """One forward pass over [prompt; response] per pair (right-padded batch).

    Yields, per pair, ``(hidden, logits)``: hidden (n_layers+1, T, d) at the response
    positions (only ``layers``, in that order, when given) and logits (T, V) at the
    positions that predicted each response token.
    """
    prompt_ids = [tokenizer(chat, add_special_tokens=False)["input_ids"] for chat in chat_prompts]
    yield from teacher_forced_ids(model, prompt_ids, responses, tokenizer.pad_token_id or 0, layers)


def right_padded(prompt_ids: list[list[int]], responses: list[list[int]], pad_id: int = 0
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """(input ids, attention mask) of [prompt; response] pairs, right-padded: the real tokens keep
    their positions, so response token t of pair i sits at ``len(prompt_ids[i]) + t``."""
    seqs = [list(p) + list(r) for p, r in zip(prompt_ids, responses)]
    ids = torch.full((len(seqs), max(len(s) for s in seqs)), pad_id, dtype=torch.long)
    att = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        att[i, : len(s)] = 1
    return ids, att


@torch.inference_mode()
def teacher_forced_ids(model, prompt_ids: list[list[int]], responses: list[list[int]], pad_id: int = 0,
                       layers: list[int] | None = None):
    """`teacher_forced` on already tokenised prompts."""
    device = next(model.parameters()).device  # the embeddings': where the input goes
    end = output_device(model)  # the last states' and the logits' (the last GPU of a sharded model)
    ids, att = right_padded(prompt_ids, responses, pad_id)
    # logits only from the first position that predicts a response token: not over the prompts
    lo = min(len(p) for p in prompt_ids) - 1
    kw = logits_kwargs(model, torch.arange(lo, ids.shape[1], device=end))
    lo = lo if kw else 0
    out = model(input_ids=ids.to(device), attention_mask=att.to(device), output_hidden_states=True, **kw)
    keep = range(len(out.hidden_states)) if layers is None else layers
    hs = torch.stack([out.hidden_states[l].to(end) for l in keep], dim=1)  # (B, |keep|, L, d)
    for i, (p, r) in enumerate(zip(prompt_ids, responses)):
        st, T = len(p), len(r)
        yield hs[i, :, st: st + T], out.logits[i, st - 1 - lo: st - 1 - lo + T]


@torch.inference_mode()
def token_logprobs(model, prompt_ids: list[list[int]], responses: list[list[int]], pad_id: int = 0) -> list:
    """log p(y_t | x, y_<t) of each response token, one teacher-forced pass over a right-padded
    batch (no hidden states kept): a float64 numpy array per pair."""
    device = next(model.parameters()).device
    ids, att = right_padded(prompt_ids, responses, pad_id)
    logits = model(input_ids=ids.to(device), attention_mask=att.to(device)).logits  # on the output device
    out = []
    for i, (p, r) in enumerate(zip(prompt_ids, responses)):
        logp = torch.log_softmax(logits[i, len(p) - 1: len(p) - 1 + len(r)].float(), -1)
        at = logp.device
        out.append(logp[torch.arange(len(r), device=at), torch.tensor(r, device=at)].double().cpu().numpy())
    return out


def feature_items(pairs, responses: list[list[int]], out_dtype: torch.dtype = torch.float16) -> list[FeatureItem]:
    """`FeatureItem`s from `teacher_forced` output restricted to the fused layers."""
    return [FeatureItem(fuse_layers(hidden).to(out_dtype).cpu(), token_entropy(logits).cpu(),
                        torch.tensor(list(resp), dtype=torch.int32), token_surprisal(logits, resp))
            for (hidden, logits), resp in zip(pairs, responses)]


@torch.inference_mode()
def extract_batch(model, tokenizer, chat_prompts: list[str], responses: list[list[int]], layers: list[int],
                  out_dtype: torch.dtype = torch.float16) -> list[FeatureItem]:
    """Fused hidden states + entropy for the response tokens of each (prompt, response) pair."""
    return feature_items(teacher_forced(model, tokenizer, chat_prompts, responses, layers), responses, out_dtype)


@dataclass
class Generated:
    text: str  # the answer as the pipeline stores it (decoded, stripped)
    token_ids: list[int]  # generated ids without EOS
    truncated: bool
    item: FeatureItem | None  # captured states; None when they do not match the canonical tokens


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
    fused = [fuse_layers(steps[k], layers)[0, -1] for k in range(1, min(T, len(steps) - 1) + 1)]
    if len(fused) < T:  # the last token was never fed: one step on the KV cache
        o = model(input_ids=torch.tensor([[ids[-1]]], device=device), **cache_kwargs(model, output_cache(out)),
                  output_hidden_states=True, use_cache=True)
        fused.append(fuse_layers(o.hidden_states, layers)[0, -1])
    h = torch.stack(fused[:T]).to(out_dtype).cpu()
    logits = torch.stack([lg[0] for lg in out.logits[:T]])
    return Generated(text, ids, not stopped, FeatureItem(h, token_entropy(logits).cpu(),
                                                         torch.tensor(ids, dtype=torch.int32),
                                                         token_surprisal(logits, ids)))
