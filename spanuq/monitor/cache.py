"""The per-answer cache of `spanuq monitor`: ``cache.jsonl`` in the output folder, appended to as answers are scored.

An answer's key is the sha256 of everything its result depends on: the probe's weights and
calibration, the scoring settings (validity threshold, window, languages, system prompt,
backbone) and the prompt, response, who wrote it and the sources it is read against.  Each
scored batch is appended and synced to disk before the next one starts, so a crash loses at
most the batch in flight, and a rerun scores only what is not there.  Only results are written
— a row that failed (bad input, a backbone that could not run) is never cached, so the next run
tries it again.  A last line cut off by a crash is dropped when the file is opened.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..score.schema import ScoreResult

FILE = "cache.jsonl"


def scoring_identity(uq) -> dict:
    """What, besides the answer itself, decides a result."""
    from ..pipeline.files import sha256_file

    return {"probe": sha256_file(uq.checkpoint / "model.safetensors"), "calibration": uq.calibration.as_dict(),
            "backbone": uq.backbone_name, "layers": list(uq.layers), "window": uq.window,
            "languages": list(uq.cfg.score.languages or []), "system_prompt": uq.system_prompt,
            "dtype": uq.cfg.extract.dtype, "schema": ScoreResult.model_fields["schema_version"].default,
            "conformal": None if uq.guarantee is None else [uq.guarantee.guarantee, uq.guarantee.alpha,
                                                            uq.guarantee.delta, uq.guarantee.threshold]}


def answer_key(identity: dict, prompt: str, response: str, answer_source: str = "given",
               context: list | None = None) -> str:
    """The answer's key; who wrote it enters only when it is the backbone, the sources only when there are
    some (an answer given without sources keeps the key it had before either field existed)."""
    doc = {"scoring": identity, "prompt": prompt, "response": response}
    if answer_source != "given":
        doc["answer_source"] = answer_source
    if context is not None:
        doc["context"] = context
    doc = json.dumps(doc, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(doc.encode("utf-8")).hexdigest()


class ResultCache:
    def __init__(self, folder: Path):
        self.path = Path(folder) / FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.results: dict[str, ScoreResult] = {}
        self._repair()
        if self.path.exists():
            with self.path.open(encoding="utf-8") as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                        self.results[rec["key"]] = ScoreResult.model_validate(rec["result"])
                    except (ValueError, KeyError, TypeError):
                        continue  # a record of another schema: scored again

    def _repair(self) -> None:
        """Drop a last line cut off by a crash (no newline after it)."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        with self.path.open("rb+") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) == b"\n":
                return
            data = f.seek(0) or f.read()
            f.truncate(data.rfind(b"\n") + 1)

    def __contains__(self, key: str) -> bool:
        return key in self.results

    def get(self, key: str) -> ScoreResult | None:
        return self.results.get(key)

    def add(self, items: list[tuple[str, ScoreResult]]) -> None:
        """Append results (never errors) and sync them to disk."""
        if not items:
            return
        with self.path.open("a", encoding="utf-8") as f:
            for key, result in items:
                if not isinstance(result, ScoreResult):
                    raise TypeError(f"only results are cached, not {type(result).__name__}")
                f.write(json.dumps({"key": key, "result": result.model_dump(mode="json")}, ensure_ascii=False) + "\n")
                self.results[key] = result
            f.flush()
            os.fsync(f.fileno())
