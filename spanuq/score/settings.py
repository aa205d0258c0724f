"""What a probe is scored with, and where each setting came from.

A trained probe carries what it must be scored with in its checkpoint (``config.json``,
``extra.scoring``: the `spanuq.config.SCORING_KEYS`, written by the train stage): the system
prompt and decoding its answers were generated with, the precision of the backbone and of
the states it read, its answers' length (the window a longer answer is read in) and their
language.  `SpanUQ.load` applies them over the library defaults of `spanuq.config`, so one
probe scores the same from any folder: ``params.yaml`` configures the pipeline, not this.

Three sources, the later winning:

1. ``default``: the library's default (`spanuq.config`), for a key an older checkpoint lacks
   (it carried only its system prompt and window: those two are read from where it kept them);
2. ``checkpoint``: the probe's own setting;
3. ``override``: what the user asked for explicitly — ``spanuq score -o generate.stop=[]``,
   ``SpanUQ.load(overrides={...})``, or a ``score:`` key set in the params file given.

`ScoringSettings.describe` says it in one line (stderr of `spanuq score`, ``/health``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..config import SCORING_KEYS, Config, apply_overrides, get_dotted

CHECKPOINT_KEY = "scoring"  # in the checkpoint's ``extra``


def from_checkpoint(extra: dict) -> dict[str, Any]:
    """The scoring settings a checkpoint carries (older ones: the two they kept elsewhere)."""
    if isinstance(extra.get(CHECKPOINT_KEY), dict):
        return {k: v for k, v in extra[CHECKPOINT_KEY].items() if k in SCORING_KEYS}
    old: dict[str, Any] = {}
    if "system_prompt" in extra:
        old["backbone.system_prompt"] = extra["system_prompt"]
    if extra.get("window_tokens"):
        old["score.window_tokens"] = int(extra["window_tokens"])
    return old


@dataclass
class ScoringSettings:
    """The settings a `SpanUQ` scores with: each key's value and where it came from."""

    values: dict[str, Any]
    source: dict[str, str]  # key -> "checkpoint" | "default" | "override"
    probe_values: dict[str, Any] = field(default_factory=dict)  # what the probe carried, where overridden

    def describe(self) -> str:
        """``settings: the probe's`` [``, library defaults for …``] [``; overridden: key=value (the probe's: …)``]."""
        defaults = [k for k, s in self.source.items() if s == "default"]
        over = [k for k, s in self.source.items() if s == "override"]
        text = "settings: the probe's" if len(defaults) < len(self.source) else "settings: the library's defaults"
        if defaults and len(defaults) < len(self.source):
            text += f", library defaults for {', '.join(defaults)} (an older checkpoint without them)"
        if over:
            text += "; overridden: " + ", ".join(
                f"{k}={self.values[k]!r}" + (f" (the probe's: {self.probe_values[k]!r})" if k in self.probe_values else "")
                for k in over)
        return text

    def as_dict(self) -> dict:
        return {"values": self.values, "source": self.source}


def explicit_score_keys(cfg: Config) -> dict[str, Any]:
    """The `SCORING_KEYS` under ``score:`` that ``cfg`` set explicitly (params file or -o), not by default."""
    return {f"score.{k}": getattr(cfg.score, k) for k in cfg.score.model_fields_set if f"score.{k}" in SCORING_KEYS}


def resolve(cfg: Config, extra: dict, overrides: dict[str, Any] | None = None) -> tuple[Config, ScoringSettings]:
    """``cfg`` with the checkpoint's scoring settings applied over the library defaults, then
    ``overrides`` (and the explicit ``score:`` keys of ``cfg``) over them."""
    library = Config()
    carried = from_checkpoint(extra)
    asked = {**explicit_score_keys(cfg), **{k: v for k, v in (overrides or {}).items()}}
    values, source = {}, {}
    for key in SCORING_KEYS:
        if key in asked and (key not in carried or asked[key] != carried[key]):
            values[key], source[key] = asked[key], "override"
        elif key in carried:
            values[key], source[key] = carried[key], "checkpoint"
        else:
            values[key], source[key] = get_dotted(library, key), "default"
    rest = {k: v for k, v in (overrides or {}).items() if k not in SCORING_KEYS}
    out = apply_overrides(cfg, {**values, **rest})
    values = {k: get_dotted(out, k) for k in SCORING_KEYS}  # as validated
    probe_values = {k: carried[k] for k in SCORING_KEYS if source[k] == "override" and k in carried}
    return out, ScoringSettings(values, source, probe_values)
