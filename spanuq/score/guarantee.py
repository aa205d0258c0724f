"""The fitted thresholds, stored with the probe: ``conformal.json`` beside ``model.safetensors``
(for the probe shipped in the package, a user's refit goes to a folder of the user's: `files`).

Plain JSON (never pickled), tied to the probe by the sha256 of its weights: a file fitted for
another probe (the probe was retrained, or copied beside another one) is refused, not used.

    {"format": 1, "probe_sha256": "…", "positive_threshold": 0.5, "iou_threshold": 0.3,
     "fitted_on": {"source": "…", "split": "test", "n_answers": 266, "n_claims": 1024, "n_wrong": …, "date": "…"},
     "thresholds": [{"guarantee": "factuality", "alpha": 0.1, "delta": null, "threshold": 0.41,
                     "bound": 0.097, "n_answers": 266, "calibration": {…outcome on the fitted answers…}}, …]}

`Guarantee` is one entry: `decide` applies it to a scored answer (the flagged spans, and whether
the answer as a whole is held back), which is what `spanuq score/serve --conformal-alpha` and
`spanuq refine --mode drop --conformal-alpha` act on.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..pipeline.files import sha256_file
from ..metrics.conformal import GUARANTEES, Fitted
from .shipped import PROBES

FILE = "conformal.json"
FORMAT = 1

STATEMENTS = {
    "factuality": "every kept claim of an answer is right with probability ≥ {level:.3f} (1 − α = {one:.2f}), "
                  "over answers exchangeable with the {n} calibration answers",
    "fdr": "with probability ≥ {conf:.2f} over the {n} calibration answers, the expected share of an answer's kept "
           "claims that are wrong is ≤ α = {alpha:.2f}",
}


@dataclass(frozen=True)
class Guarantee:
    """One fitted threshold: keep the claims with û ≤ ``threshold`` (None: keep nothing)."""

    guarantee: str
    alpha: float
    delta: float | None
    threshold: float | None
    bound: float
    n_answers: int

    def statement(self) -> str:
        return STATEMENTS[self.guarantee].format(level=1 - self.bound, one=1 - self.alpha, n=self.n_answers,
                                                 conf=1 - (self.delta or 0), alpha=self.alpha)


def _matches(entry: dict, guarantee: str, alpha: float, delta: float | None) -> bool:
    return (entry["guarantee"] == guarantee and abs(entry["alpha"] - alpha) < 1e-9
            and (guarantee != "fdr" or delta is None or abs((entry.get("delta") or 0) - delta) < 1e-9))


def files(probe_dir: Path) -> list[Path]:
    """Where the thresholds of ``probe_dir`` are written (the first) and read (the first that exists).
    Beside the probe, except for a probe shipped inside the installed package, which is not the
    user's to write (in an editable install it is the repository): `spanuq calibrate` writes those
    to ``$XDG_DATA_HOME/spanuq/conformal/<backbone>-<sha256 of the weights, 12>.json`` (XDG_DATA_HOME
    defaults to ``~/.local/share``), and scoring reads that file first, then the one shipped beside the probe."""
    probe_dir = Path(probe_dir)
    if probe_dir.resolve().parent != PROBES:
        return [probe_dir / FILE]
    home = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "spanuq"
    sha = sha256_file(probe_dir / "model.safetensors")[:12]
    return [home / "conformal" / f"{probe_dir.name}-{sha}.json", probe_dir / FILE]


def write(probe_dir: Path, fitted: list[tuple[Fitted, dict]], fitted_on: dict, positive_threshold: float,
          iou_threshold: float, out: Path | None = None) -> Path:
    """Write (or update: entries of the same guarantee, α and δ are replaced) the file of ``probe_dir``
    (`files(probe_dir)[0]`, or ``out``)."""
    path = Path(out) if out else files(probe_dir)[0]
    sha = sha256_file(Path(probe_dir) / "model.safetensors")
    before = next((f for f in (path, *files(probe_dir)) if f.exists()), None)  # a shipped probe's own entries kept
    old = json.loads(before.read_text(encoding="utf-8")) if before is not None else None
    path.parent.mkdir(parents=True, exist_ok=True)
    keep = []
    if old and old.get("probe_sha256") == sha and old.get("fitted_on", {}).get("source") == fitted_on.get("source"):
        keep = [e for e in old.get("thresholds", [])
                if not any(_matches(e, f.guarantee, f.alpha, f.delta) for f, _ in fitted)]
    entries = keep + [{**asdict(f), "calibration": cal} for f, cal in fitted]
    entries.sort(key=lambda e: (e["guarantee"], e["alpha"], e.get("delta") or 0))
    doc = {"format": FORMAT, "probe_sha256": sha, "positive_threshold": positive_threshold,
           "iou_threshold": iou_threshold, "fitted_on": {**fitted_on, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
           "thresholds": entries}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def load(probe_dir: Path, guarantee: str, alpha: float, delta: float | None = None,
         path: Path | None = None) -> Guarantee:
    """The threshold fitted for ``probe_dir`` with this guarantee and α (and δ for fdr); a clear
    error when there is none, or when the file was fitted for other weights."""
    if guarantee not in GUARANTEES:
        raise ValueError(f"unknown guarantee {guarantee!r}; one of {', '.join(GUARANTEES)}")
    path = Path(path) if path else next((f for f in files(probe_dir) if f.exists()), Path(probe_dir) / FILE)
    how = f"`spanuq calibrate --model {probe_dir} --alpha {alpha} --guarantee {guarantee}`"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no conformal thresholds for this probe; fit them with {how}")
    doc = json.loads(path.read_text(encoding="utf-8"))
    if doc.get("format") != FORMAT:
        raise ValueError(f"{path}: format {doc.get('format')!r}, this spanuq reads format {FORMAT}")
    sha = sha256_file(Path(probe_dir) / "model.safetensors")
    if doc.get("probe_sha256") != sha:
        raise ValueError(f"{path} was fitted for the probe with weights sha256 {str(doc.get('probe_sha256'))[:12]}, "
                         f"not this one ({sha[:12]}); refit with {how}")
    for e in doc.get("thresholds", []):
        if _matches(e, guarantee, alpha, delta):
            return Guarantee(e["guarantee"], e["alpha"], e.get("delta"), e["threshold"], e["bound"], e["n_answers"])
    have = ", ".join(f"{e['guarantee']} α={e['alpha']}" + (f" δ={e['delta']}" if e.get("delta") else "")
                     for e in doc.get("thresholds", []))
    raise KeyError(f"{path} has no {guarantee} threshold for α={alpha}" + (f", δ={delta}" if delta else "")
                   + f" (it has: {have or 'none'}); fit it with {how}")


def decide(g: Guarantee, spans_u: list[float], u_seq: float | None, scored: bool) -> dict:
    """What the guarantee says about one scored answer: the spans above the threshold (to flag or
    drop) and whether the whole answer is held back (``abstain``).  A claim the probe drew no span
    over is judged by û_seq (the calibration scores it so), so when û_seq is above the threshold
    the text outside the spans is not covered and nothing of the answer is kept; an answer that
    could not be judged (status unverified) is never kept under a guarantee."""
    thr = g.threshold
    flagged = [i for i, u in enumerate(spans_u) if thr is None or u > thr]
    abstain = not scored or u_seq is None or thr is None or u_seq > thr
    return {"guarantee": g.guarantee, "alpha": g.alpha, "delta": g.delta, "threshold": thr, "flagged": flagged,
            "abstain": abstain, "statement": g.statement()}
