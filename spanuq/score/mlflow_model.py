"""MLflow "models from code" definition of the SpanUQ probe as a pyfunc model.

`spanuq.score.registry.log_probe` passes this file (not a pickled object) to
``mlflow.pyfunc.log_model(python_model=<this file>, artifacts={"checkpoint": <probe dir>})``.
MLflow copies the file and the checkpoint folder (``model.safetensors`` + ``config.json``)
into the model; loading executes this file and ``load_context`` reads the weights with
`spanuq.model.load_checkpoint` (safetensors, no pickle).  The loading environment needs
``spanuq`` installed.

Input (one row per response):
  * a pandas DataFrame with a column ``h`` (T×d hidden states: list of lists or a 2-D array)
    and optionally ``entropy`` (T floats), ``surprisal`` (T floats; required by a probe that reads
    it, ``probe.use_surprisal``), ``id``, and ``text`` with ``offsets`` (the answer and the
    [start, end) characters of each of its T tokens, from the backbone's tokenizer);
  * or a dict ``{"h": ..., "entropy": ...}`` for one response (or columns of lists for many);
  * or a list of such dicts.
An answer longer than the probe was trained on (``window_tokens``: the model config that
`log_probe` wrote, else the checkpoint's) is read in overlapping windows and merged as
`SpanUQ.score` does (`spanuq.score.windows`).
``params={"threshold": 0.5}`` overrides the validity threshold stored with the probe (chosen on
dev; a negative value, the default, keeps it); ``params={"calibrated": False}`` returns raw û instead of the dev-calibrated score;
``params={"source": "given"}`` scores answers the backbone did not write with their own calibration
(`Calibration.for_source`; default ``generated``), with each name, date and number a span of its own
when that calibration says so and ``text``, ``offsets`` and ``surprisal`` are given (`spanuq.score.facts`),
and û_seq from the shown spans (`spanuq.score.answer_score`), as `SpanUQ.score` gives them.

Output: a list with one dict per response:
  ``{"id": ..., "spans": [{"start", "end", "u", "u_raw", "p", "nu"}, ...], "u_seq": float}``,
  spans as inclusive token indices into the response, ``u`` = calibrated û (probability the
  claim is wrong), shown as every SpanUQ consumer shows them (`spanuq.model.postprocess`: kept,
  de-duplicated).  With ``text`` and ``offsets`` the spans are grown to whole words and carry
  ``char_start``, ``char_end`` and ``text`` too: the spans `SpanUQ.score` returns for that answer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlflow
import numpy as np
import pandas as pd

from spanuq.model.postprocess import Answer, predict
from spanuq.score.windows import predict_windows


@dataclass
class _States:
    h: Any  # torch.Tensor (T, d)
    entropy: Any  # torch.Tensor (T,)
    surprisal: Any = None  # torch.Tensor (T,) or None


def _rows(model_input: Any) -> list[dict]:
    """Normalise the accepted input shapes to a list of {"h", "entropy"?, "id"?} dicts."""
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


def _answer(row: dict, T: int, i: int) -> Answer | None:
    """The row's `Answer` (text + per-token character offsets), or None without ``text``."""
    text = row.get("text")
    if text is None or (not isinstance(text, str) and text != text):  # absent, or NaN in a DataFrame
        return None
    offsets = row.get("offsets")
    if offsets is None:
        raise ValueError(f"row {i}: `text` needs `offsets`, the [start, end) characters of each of its tokens")
    offsets = [tuple(int(x) for x in o) for o in offsets]
    if len(offsets) != T or any(not 0 <= a <= b <= len(text) for a, b in offsets):
        raise ValueError(f"row {i}: `offsets` must give T={T} [start, end) character pairs inside the text")
    return Answer(text, offsets)


class SpanUQPyfunc(mlflow.pyfunc.PythonModel):
    """Wraps a SpanUQ probe checkpoint; see the module docstring for the contract."""

    def load_context(self, context) -> None:
        from spanuq.model.checkpoint import load_checkpoint

        self.ckpt = load_checkpoint(context.artifacts["checkpoint"], device="cpu")
        self.window = (getattr(context, "model_config", None) or {}).get("window_tokens") \
            or self.ckpt.extra.get("window_tokens")

    def predict(self, context, model_input: pd.DataFrame, params: dict | None = None) -> list[dict]:
        """Spans and û_seq per row (module docstring).  The hint names MLflow's own input type (what a
        served model receives), for which MLflow infers no schema; a dict or list of dicts works too."""
        import torch

        params = params or {}
        threshold = float(params["threshold"]) if params.get("threshold") is not None else None
        calibration = self.ckpt.calibration.with_threshold(None if threshold is not None and threshold < 0 else threshold)
        source, calibrated = str(params.get("source") or "generated"), bool(params.get("calibrated", True))
        calibration = calibration.for_source(source)
        if not calibrated:
            calibration = calibration.raw()
        rows = _rows(model_input)
        d = self.ckpt.d_model
        hs, ents, surs, answers = [], [], [], []
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
            s = r.get("surprisal")
            s = None if s is None or (np.ndim(s) == 0 and s != s) else np.asarray(s, dtype=np.float32).reshape(-1)
            if s is not None and s.shape[0] != h.shape[0]:
                raise ValueError(f"row {i}: surprisal has {s.shape[0]} values for T={h.shape[0]} tokens")
            if s is None and self.ckpt.probe.cfg.use_surprisal:
                raise ValueError(f"row {i}: this probe reads token surprisal: give `surprisal` (T floats)")
            surs.append(s)
            answers.append(_answer(r, h.shape[0], i))
        states = [_States(torch.from_numpy(h), torch.from_numpy(e) if e is not None else torch.zeros(h.shape[0]),
                          None if s is None else torch.from_numpy(s))
                  for h, e, s in zip(hs, ents, surs)]
        if self.window:
            preds = predict_windows(self.ckpt.probe, states, calibration, answers, window=int(self.window),
                                    batch_size=16, device="cpu")
        else:  # a checkpoint from before windows that does not say how long its answers were
            preds = predict(self.ckpt.probe, states, calibration, answers, batch_size=16, device="cpu")
        from spanuq.config import LabelConfig
        from spanuq.score.facts import show_facts

        preds = [show_facts(p, a, s, st.entropy.numpy(), calibration, LabelConfig().spacy_model)
                 for p, a, s, st in zip(preds, answers, surs, states)]  # given answers: facts on their own
        if source == "given" and self.ckpt.calibration.given is not None and calibrated:
            from spanuq.score.answer_score import with_given_u_seq

            preds = [with_given_u_seq(p) for p in preds]  # a given answer's û_seq from its spans, as `SpanUQ.score`
        out: list[dict] = []
        for r, p in zip(rows, preds):
            spans = []
            for s in p.shown():
                span = {"start": s.b, "end": s.e, "u": s.u, "u_raw": s.u_raw, "p": s.validity, "nu": s.nu}
                if s.start is not None:
                    span.update(char_start=s.start, char_end=s.end, text=r["text"][s.start:s.end])
                spans.append(span)
            item = {"spans": spans, "u_seq": p.u_seq}
            if "id" in r:
                item = {"id": r["id"], **item}
            out.append(item)
        return out


mlflow.models.set_model(SpanUQPyfunc())
