"""Teacher-forced extraction of fused hidden states and token entropy.

For each greedy answer y = (y_1..y_T) to chat-templated prompt x we run one forward
pass of the frozen backbone over [x; y] and keep the response positions only:

* fused states  H̄_t = (1/|L|) Σ_{l∈L} H^(l)_t   (paper Eq. 1), at the position of y_t;
* token entropy e_t = −Σ_v p(v | x, y_<t) log p(v | x, y_<t), the entropy of the
  distribution y_t was decoded from (logits at the position before y_t).

Per-item results are cached (content hash of backbone, layers, dtype, prompt and
response ids), so the stage resumes after a crash; the stage then packs them
into shards (see `store.py`).
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from ..llm.presets import get_preset
from ..pipeline.cache import content_hash
from ..config import Config
from ..pipeline.files import read_records, write_json
from ..llm.loading import load_backbone
from ..pipeline.paths import StagePaths
from ..pipeline.records import Generation
from .store import FeatureItem, ShardWriter

log = logging.getLogger(__name__)


def fused_layers(cfg: Config) -> list[int]:
    return list(cfg.backbone.layers or get_preset(cfg.backbone.name).layers)


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


@torch.inference_mode()
def teacher_forced_ids(model, prompt_ids: list[list[int]], responses: list[list[int]], pad_id: int = 0,
                       layers: list[int] | None = None):
    """`teacher_forced` on already tokenised prompts."""
    device = next(model.parameters()).device
    seqs = [list(p) + list(r) for p, r in zip(prompt_ids, responses)]
    starts = [len(p) for p in prompt_ids]
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    att = torch.zeros((len(seqs), L), dtype=torch.long)
    for i, s in enumerate(seqs):  # right padding: positions of real tokens are unchanged
        ids[i, : len(s)] = torch.tensor(s)
        att[i, : len(s)] = 1
    out = model(input_ids=ids.to(device), attention_mask=att.to(device), output_hidden_states=True)
    keep = range(len(out.hidden_states)) if layers is None else layers
    hs = torch.stack([out.hidden_states[l] for l in keep], dim=1)  # (B, |keep|, L, d)
    for i, (s, st) in enumerate(zip(seqs, starts)):
        T = len(s) - st
        yield hs[i, :, st: st + T], out.logits[i, st - 1: st - 1 + T]


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of each row's softmax distribution."""
    logp = torch.log_softmax(logits.float(), -1)
    return -(logp.exp() * logp).sum(-1)


@torch.inference_mode()
def extract_batch(model, tokenizer, chat_prompts: list[str], responses: list[list[int]], layers: list[int],
                  out_dtype: torch.dtype = torch.float16) -> list[FeatureItem]:
    """Fused hidden states + entropy for the response tokens of each (prompt, response) pair."""
    return fuse(teacher_forced(model, tokenizer, chat_prompts, responses, layers), responses, out_dtype)


def fuse(pairs, responses: list[list[int]], out_dtype: torch.dtype = torch.float16) -> list[FeatureItem]:
    """`FeatureItem`s from `teacher_forced` output restricted to the fused layers (Eq. 1: their mean)."""
    return [FeatureItem(hidden.float().mean(0).to(out_dtype).cpu(), token_entropy(logits).cpu(),
                        torch.tensor(list(resp), dtype=torch.int32))
            for (hidden, logits), resp in zip(pairs, responses)]


def _item_key(cfg: Config, layers: list[int], g: Generation) -> str:
    return content_hash({"backbone": cfg.backbone.name, "layers": layers, "dtype": cfg.extract.dtype,
                         "bb_dtype": cfg.backbone.dtype, "chat": g.chat_prompt, "ids": g.greedy.token_ids, "v": 1})


def run_extract(cfg: Config, progress: bool = True) -> Path:
    """DVC/Prefect entry point: generations.jsonl → features/ (shards + index) + report."""
    paths = StagePaths.from_config(cfg)
    gens = [g for g in read_records(paths.generations, Generation) if g.greedy.token_ids]
    layers = fused_layers(cfg)
    preset = get_preset(cfg.backbone.name)
    bad = [l for l in layers if not 0 <= l <= preset.n_layers]
    if bad:
        raise ValueError(f"layers {bad} out of range for {preset.name} (0..{preset.n_layers})")
    out_dtype = getattr(torch, cfg.extract.dtype)
    cache_dir = paths.stage_cache("extract")
    cache_dir.mkdir(parents=True, exist_ok=True)
    keys = {g.prompt_id: _item_key(cfg, layers, g) for g in gens}
    todo = [g for g in gens if not (cache_dir / f"{keys[g.prompt_id]}.safetensors").exists()]
    t0 = time.perf_counter()
    n_tok = 0
    if todo:
        model, tok = load_backbone(cfg)
        todo.sort(key=lambda g: len(g.greedy.token_ids))  # less padding per batch
        bs = max(1, cfg.extract.batch_size)
        for s in tqdm(range(0, len(todo), bs), desc="extract", unit="batch", disable=not progress):
            batch = todo[s: s + bs]
            items = extract_batch(model, tok, [g.chat_prompt for g in batch],
                                  [g.greedy.token_ids for g in batch], layers, out_dtype)
            for g, it in zip(batch, items):
                save_file({"h": it.h.contiguous(), "entropy": it.entropy, "token_ids": it.token_ids},
                          str(cache_dir / f"{keys[g.prompt_id]}.safetensors"))
                n_tok += it.h.shape[0]
    seconds = time.perf_counter() - t0
    writer = ShardWriter(paths.features, {"backbone": cfg.backbone.name, "layers": layers,
                                          "d_model": preset.d_model, "dtype": cfg.extract.dtype},
                         cfg.extract.shard_tokens)
    total_tokens = 0
    for g in gens:
        t = load_file(str(cache_dir / f"{keys[g.prompt_id]}.safetensors"))
        writer.add(g.prompt_id, FeatureItem(t["h"], t["entropy"], t["token_ids"]))
        total_tokens += t["h"].shape[0]
    index = writer.close()
    size = sum(p.stat().st_size for p in paths.features.glob("shard-*.safetensors"))
    write_json(paths.features / "report.json", {
        "responses": len(gens), "tokens": total_tokens, "extracted_now": len(todo),
        "bytes": size, "bytes_per_token": round(size / max(1, total_tokens), 1),
        "index_bytes": index.stat().st_size,
        "extract_seconds": round(seconds, 2),
        "tokens_per_second": round(n_tok / seconds, 1) if todo and seconds > 0 else None,
    })
    return paths.features
