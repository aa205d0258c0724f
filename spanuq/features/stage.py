"""The `extract` stage: generations.jsonl → features/, the probe's input for every greedy answer
(and every sample answer the label stage added to training, `label.sample_answers`).

One teacher-forced pass of the frozen backbone per answer gives its fused hidden states,
token entropy and token surprisal (`spanuq.llm.states.extract_batch`, paper Eq. 1).  Per-item results are cached
(content hash of backbone, layers, dtype, prompt and response ids), so the stage resumes
after a crash; the stage then packs them into shards (see `store.py`).
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from ..config import Config
from ..label.sample_answers import read_answers
from ..llm.loading import count_tokens, load_backbone
from ..llm.presets import fused_layers, get_preset
from ..llm.states import FeatureItem, extract_batch
from ..pipeline.cache import content_hash
from ..pipeline.files import write_json
from ..pipeline.paths import StagePaths
from ..pipeline.records import Generation
from .store import ShardWriter

log = logging.getLogger(__name__)


def _item_key(cfg: Config, layers: list[int], g: Generation) -> str:
    return content_hash({"backbone": cfg.backbone.name, "layers": layers, "dtype": cfg.extract.dtype,
                         "bb_dtype": cfg.backbone.dtype, "chat": g.chat_prompt, "ids": g.greedy.token_ids, "v": 2})


def run_extract(cfg: Config, progress: bool = True) -> Path:
    """DVC/Prefect entry point: generations.jsonl → features/ (shards + index) + report, and the run
    log (runs/extract.json: how many were extracted now, seconds)."""
    paths = StagePaths.from_config(cfg)
    gens = [g for g in read_answers(paths.generations, paths.labels) if g.greedy.token_ids]
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
        # batches of alike lengths (prompt + answer: a prompt with sources is long), so little is padding
        todo.sort(key=lambda g: count_tokens(tok, g.chat_prompt) + len(g.greedy.token_ids))
        bs = max(1, cfg.extract.batch_size)
        for s in tqdm(range(0, len(todo), bs), desc="extract", unit="batch", disable=not progress):
            batch = todo[s: s + bs]
            items = extract_batch(model, tok, [g.chat_prompt for g in batch],
                                  [g.greedy.token_ids for g in batch], layers, out_dtype)
            for g, it in zip(batch, items):
                save_file({"h": it.h.contiguous(), "entropy": it.entropy, "token_ids": it.token_ids,
                           "surprisal": it.surprisal},
                          str(cache_dir / f"{keys[g.prompt_id]}.safetensors"))
                n_tok += it.h.shape[0]
    seconds = time.perf_counter() - t0
    writer = ShardWriter(paths.features, {"backbone": cfg.backbone.name, "layers": layers,
                                          "d_model": preset.d_model, "dtype": cfg.extract.dtype},
                         cfg.extract.shard_tokens)
    total_tokens = 0
    for g in gens:
        t = load_file(str(cache_dir / f"{keys[g.prompt_id]}.safetensors"))
        writer.add(g.prompt_id, FeatureItem(t["h"], t["entropy"], t["token_ids"], t["surprisal"]))
        total_tokens += t["h"].shape[0]
    index = writer.close()
    size = sum(p.stat().st_size for p in paths.features.glob("shard-*.safetensors"))
    write_json(paths.features / "report.json", {
        "responses": len(gens), "tokens": total_tokens,
        "bytes": size, "bytes_per_token": round(size / max(1, total_tokens), 1),
        "index_bytes": index.stat().st_size,
    })
    write_json(paths.run_log("extract"), {
        "extracted_now": len(todo), "extract_seconds": round(seconds, 2),
        "tokens_per_second": round(n_tok / seconds, 1) if todo and seconds > 0 else None,
    })
    return paths.features
