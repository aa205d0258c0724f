"""The probe that ships inside the package, and the one line that says which probe was loaded.

    spanuq/probes/<backbone>/
        model.safetensors, config.json    the checkpoint, as `spanuq.model.checkpoint` saves it
        card.json                         the model card's facts: data, splits, teacher, metrics over every
                                          labelled test span, baselines, calibration, Mu-SHROOM, date,
                                          commit, sha256 of model.safetensors
        MODEL_CARD.md                     rendered from card.json (scripts/ship_probe.py)
        test_split.jsonl                  the run's labelled test answers (text, token ids, spans, u*):
                                          enough to re-extract the states and re-evaluate the card

`scripts/ship_probe.py --run <data dir>` writes the folder from a finished pipeline run;
`SpanUQ.load()` uses it when no probe was trained here (``data/<backbone>/probe``), and
``SpanUQ.load("shipped")`` asks for it by name; `import_shipped` (``spanuq registry import-shipped``)
registers it in MLflow as a version of ``spanuq-<backbone>``.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..pipeline.files import iter_jsonl, sha256_file

SHIPPED = "shipped"  # the source name of the shipped probe (`SpanUQ.load("shipped")`, `--model shipped`)
PROBES = Path(__file__).resolve().parents[1] / "probes"
CARD = "card.json"
TEST_SPLIT = "test_split.jsonl"
WEIGHTS = "model.safetensors"


def shipped_dir(backbone: str) -> Path:
    """The shipped probe folder of ``backbone``; a clear error when none ships for it."""
    path = PROBES / backbone
    if not (path / "config.json").exists():
        have = sorted(p.name for p in PROBES.iterdir() if (p / "config.json").exists()) if PROBES.is_dir() else []
        raise FileNotFoundError(
            f"no shipped probe for backbone {backbone!r} (shipped: {', '.join(have) or 'none'}); train one "
            f"with `make repro` (or `dvc repro train`) and load it from data/{backbone}/probe, or pass a "
            "checkpoint folder or models:/spanuq-<backbone>@champion")
    return path


def read_card(path: Path) -> dict | None:
    """``card.json`` of a probe folder, None when it has none (a probe trained here)."""
    f = Path(path) / CARD
    return json.loads(f.read_text(encoding="utf-8")) if f.exists() else None


def describe(path: Path, source: str | Path | None = None) -> str:
    """One line naming a probe folder: ``shipped smollm2-135m probe of <card date>, sha256 0123456789ab``
    for the shipped one (inside the installed package), else ``probe <source or path>, sha256 …``."""
    path = Path(path)
    sha = sha256_file(path / WEIGHTS)[:12]
    card = read_card(path)
    if card is not None and path.resolve().parent == PROBES:
        return f"shipped {card['backbone']} probe of {card['date'][:10]}, sha256 {sha}"
    named = f"{source} ({path})" if source is not None and str(source) != str(path) else str(path)
    return f"probe {named}, sha256 {sha}"


def test_split(path: Path) -> list[dict]:
    """The stored test answers of a shipped probe (rows of ``test_split.jsonl``)."""
    return list(iter_jsonl(Path(path) / TEST_SPLIT))


def test_examples(path: Path, model, tokenizer, layers: list[int], dtype: str, batch_size: int = 8,
                  limit: int | None = None, progress: bool = False) -> list:
    """The stored test answers (the first ``limit`` of them) as `ResponseExample`s, their states
    re-extracted with ``model`` on the stored chat prompts and token ids (what the extract stage did
    in the shipped run), so the evaluate path can re-score the card's test split."""
    import torch
    from tqdm.auto import tqdm

    from ..features.dataset import ResponseExample
    from ..llm.loading import count_tokens
    from ..llm.states import extract_batch

    rows = test_split(path)[:limit]
    # batches of similar length (less padding; right padding leaves every real token's states as they are),
    # returned in the stored order
    n_tokens = [count_tokens(tokenizer, r["chat_prompt"]) + len(r["token_ids"]) for r in rows]
    order = sorted(range(len(rows)), key=lambda i: n_tokens[i])
    out: list = [None] * len(rows)
    bar = tqdm(total=len(rows), desc="re-extract test answers", unit="answer", disable=not progress)
    for s in range(0, len(rows), batch_size):
        batch = order[s: s + batch_size]
        bar.update(len(batch))
        items = extract_batch(model, tokenizer, [rows[i]["chat_prompt"] for i in batch],
                              [rows[i]["token_ids"] for i in batch], layers, getattr(torch, dtype))
        for i, it in zip(batch, items):
            r = rows[i]
            spans = torch.tensor([[x["tok_start"], x["tok_end"]] for x in r["spans"]], dtype=torch.long).reshape(-1, 2)
            u = torch.tensor([x["u"] for x in r["spans"]], dtype=torch.float32)
            out[i] = ResponseExample(r["prompt_id"], r["domain"], "test", it.h.float(), it.entropy.float(),
                                     list(r["token_ids"]), spans, u, r["u_seq"], r["response"],
                                     {"unplaced": r.get("unplaced", 0)}, it.surprisal)
    bar.close()
    return out


SOURCE_TAG = "source"
SHA256_TAG = "sha256"


def import_shipped(cfg) -> dict:
    """Log the probe shipped for ``cfg``'s backbone as a new version of ``spanuq-<backbone>``,
    tagged ``source=shipped`` and with its weights' sha256; it becomes champion by the usual rule
    (its dev AUROC, from its checkpoint, beats the current champion's)."""
    from mlflow import MlflowClient

    from ..model.checkpoint import load_checkpoint
    from ..pipeline import tracking
    from .registry import log_probe

    path = shipped_dir(cfg.backbone.name)
    card = read_card(path) or {}
    sha = (card.get("weights") or {}).get("sha256")
    dev_auroc = load_checkpoint(path).extra.get("dev_auroc")
    with tracking.start_run(cfg, run_name=f"shipped-{cfg.backbone.name}", tags={"stage": "shipped"}):
        headline = (card.get("metrics") or {}).get("headline") or {}
        tracking.log_metrics({f"test.{k}": v for k, v in headline.items()})
        info = log_probe(path, cfg, dev_auroc)
    client = MlflowClient()
    client.set_model_version_tag(info["registered_model"], str(info["model_version"]), SOURCE_TAG, "shipped")
    if sha:
        client.set_model_version_tag(info["registered_model"], str(info["model_version"]), SHA256_TAG, sha)
    return {**info, "sha256": sha, "date": card.get("date")}
