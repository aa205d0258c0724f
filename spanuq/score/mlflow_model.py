"""MLflow "models from code" definition of the SpanUQ probe as a pyfunc model.

`spanuq.pipeline.tracking.log_probe` passes this file (not a pickled object) to
``mlflow.pyfunc.log_model(python_model=<this file>, artifacts={"checkpoint": <probe dir>})``.
MLflow copies the file and the checkpoint folder (``model.safetensors`` + ``config.json``)
into the model; loading executes this file and ``load_context`` reads the weights with
`spanuq.model.load_checkpoint` (safetensors, no pickle).  The loading environment needs
``spanuq`` installed.

Input (one row per response):
  * a pandas DataFrame with a column ``h`` (T×d hidden states: list of lists or a 2-D array)
    and optionally ``entropy`` (T floats) and ``id``;
  * or a dict ``{"h": ..., "entropy": ...}`` for one response (or columns of lists for many);
  * or a list of such dicts.
``params={"threshold": 0.5}`` overrides the validity threshold stored with the probe (chosen on
dev; a negative value, the default, keeps it); ``params={"calibrated": False}`` returns raw û instead of the dev-calibrated score.

Output: a list with one dict per response:
  ``{"id": ..., "spans": [{"start", "end", "u", "u_raw", "p", "nu"}, ...], "u_seq": float}``,
  spans as inclusive token indices into the response, ``u`` = calibrated û (probability the
  claim is wrong), kept and de-duplicated by `spanuq.evaluate.predict` (the one inference path).
"""
from __future__ import annotations

import warnings
from typing import Any

import mlflow
import numpy as np

def _rows(model_input: Any) -> list[dict]:
    """Normalise the accepted input shapes to a list of {"h", "entropy"?, "id"?} dicts."""
    import pandas as pd

    if isinstance(model_input, pd.DataFrame):
        return model_input.to_dict(orient="records")
    if isinstance(model_input, dict):
        h = model_input.get("h")
        if h is None:
            raise ValueError("input needs an 'h' field (T×d hidden states)")
        if np.asarray(h, dtype=object).ndim == 1 or _is_batch(h):
            # columns of per-response values: {"h": [H1, H2], "entropy": [e1, e2]}
            n = len(h)
            return [{k: v[i] for k, v in model_input.items() if v is not None} for i in range(n)]
        return [model_input]
    if isinstance(model_input, (list, tuple)):
        return [dict(r) for r in model_input]
    raise TypeError(f"unsupported input type {type(model_input).__name__}; pass a DataFrame, dict or list of dicts")


def _is_batch(h: Any) -> bool:
    """True when ``h`` holds several T×d matrices (3 levels of nesting)."""
    try:
        first = h[0]
        return len(np.shape(first[0])) >= 1 and np.asarray(first[0]).ndim == 1 and np.asarray(first).ndim == 2
    except Exception:  # noqa: BLE001 - ragged or scalar: not a batch
        return False


def _matrix(value: Any, name: str) -> np.ndarray:
    if isinstance(value, np.ndarray) and value.dtype != object:
        arr = value
    else:
        arr = np.stack([np.asarray(r, dtype=np.float32) for r in value]) if len(value) else np.zeros((0, 0))
    arr = np.asarray(arr, dtype=np.float32)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be T×d, got shape {arr.shape}")
    return arr


class SpanUQPyfunc(mlflow.pyfunc.PythonModel):
    """Wraps a SpanUQ probe checkpoint; see the module docstring for the contract."""

    def load_context(self, context) -> None:
        from spanuq.model import load_checkpoint

        self.model, self.meta = load_checkpoint(context.artifacts["checkpoint"], device="cpu")

    def predict(self, context, model_input, params=None):
        import torch

        params = params or {}
        threshold = float(params["threshold"]) if params.get("threshold") is not None else None
        threshold = None if threshold is not None and threshold < 0 else threshold
        calibrated = bool(params.get("calibrated", True))
        rows = _rows(model_input)
        d = int(self.meta["d_model"])
        hs, ents = [], []
        for i, r in enumerate(rows):
            h = _matrix(r["h"], f"row {i}: h")
            if h.shape[0] == 0:
                raise ValueError(f"row {i}: empty response (T = 0)")
            if h.shape[1] != d:
                raise ValueError(f"row {i}: h has d={h.shape[1]}, the probe expects d_model={d}")
            hs.append(h)
            e = r.get("entropy")
            e = None if e is None or (np.ndim(e) == 0 and e != e) else np.asarray(e, dtype=np.float32).reshape(-1)
            if e is not None and e.shape[0] != h.shape[0]:
                raise ValueError(f"row {i}: entropy has {e.shape[0]} values for T={h.shape[0]} tokens")
            ents.append(e)
        from spanuq.evaluate.predict import predict_examples
        from spanuq.features.dataset import ResponseExample

        examples = [ResponseExample(prompt_id=str(r.get("id", i)), domain="custom", split="test",
                                    h=torch.from_numpy(h), entropy=torch.from_numpy(e) if e is not None else
                                    torch.zeros(h.shape[0]), token_ids=[], spans=torch.zeros(0, 2, dtype=torch.long),
                                    u=torch.zeros(0))
                    for i, (r, h, e) in enumerate(zip(rows, hs, ents))]
        preds = predict_examples(self.model, examples, batch_size=16, device="cpu", calibrated=calibrated,
                                 threshold=threshold)
        out: list[dict] = []
        for r, p in zip(rows, preds):
            spans = sorted(({"start": int(p["spans"][k, 0]), "end": int(p["spans"][k, 1]), "u": float(p["u"][k]),
                             "u_raw": float(p["u_raw"][k]), "p": float(p["validity"][k]), "nu": float(p["nu"][k])}
                            for k in p["keep"]), key=lambda s: (s["start"], s["end"]))
            item = {"spans": spans, "u_seq": p["u_seq"]}
            if "id" in r:
                item = {"id": r["id"], **item}
            out.append(item)
        return out


with warnings.catch_warnings():  # "add type hints to predict": the input contract is the docstring above
    warnings.filterwarnings("ignore", message=".*type hints.*")
    mlflow.models.set_model(SpanUQPyfunc())
