"""Helpers for the sweep tests: synthetic extracted features on disk and a tiny sweep file.

The features are `test_probe.synthetic_examples` (answers whose span tokens carry a
marker and the label u* in the hidden states), written with the real `ShardWriter` and
`labels.jsonl` records, so a sweep trial reads them exactly as it reads a pipeline run.
"""
from __future__ import annotations

from pathlib import Path

import torch
import yaml

from spanuq.features.store import ShardWriter
from spanuq.llm.presets import get_preset
from spanuq.llm.states import FeatureItem
from spanuq.pipeline.files import write_jsonl
from spanuq.pipeline.records import LabeledResponse, SpanTarget
from test_probe import synthetic_examples

REPO = Path(__file__).resolve().parents[1]
BACKBONE = "smollm2-135m"


def write_synthetic_run(data_dir: Path, n: int = 48, d: int = 32, seed: int = 0) -> Path:
    """``data_dir/<backbone>/{features,labels.jsonl}``: 60% train, 20% dev, 20% test."""
    root = Path(data_dir) / BACKBONE
    ex = synthetic_examples(n, d, seed)
    writer = ShardWriter(root / "features", {"backbone": BACKBONE, "layers": list(get_preset(BACKBONE).layers),
                                             "d_model": d, "dtype": "float16"})
    labels = []
    for i, e in enumerate(ex):
        split = "train" if i < 0.6 * n else "dev" if i < 0.8 * n else "test"
        writer.add(e.prompt_id, FeatureItem(e.h.half(), e.entropy, torch.tensor(e.token_ids, dtype=torch.int32),
                                              e.entropy.clone()))
        spans = [SpanTarget(claim_id=f"{e.prompt_id}:{k}", text="x", char_start=0, char_end=1,
                            tok_start=int(b), tok_end=int(t), u=float(u))
                 for k, ((b, t), u) in enumerate(zip(e.spans.tolist(), e.u.tolist()))]
        labels.append(LabeledResponse(prompt_id=e.prompt_id, domain="custom", split=split, response="synthetic",
                                      n_tokens=e.n_tokens, spans=spans, u_seq=float(e.u.mean())))
    writer.close()
    write_jsonl(root / "labels.jsonl", labels)
    return root


def write_sweep_file(path: Path, space: dict, epochs: int = 1, study: str = "test-sweep", **extra) -> Path:
    """A sweep over the tiny probe: ``epochs`` joint epochs, no warm-up, no bootstrap."""
    spec = {
        "backbone": BACKBONE, "study": study, "sampler": "grid", "seed": 0, "params": str(REPO / "params.yaml"),
        "overrides": ["probe.d_proj=32", "probe.n_queries=8", "probe.n_heads=4", "probe.d_ffn=64",
                      "probe.dropout=0.0", "train.warmup_epochs=0", f"train.joint_epochs={epochs}",
                      "train.batch_size=8", "train.num_threads=1", "evaluate.bootstrap=0"],
        "space": space, "pruner": {"type": "none"}, "heartbeat_s": 1, "grace_s": 4, **extra,
    }
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path
