"""The probe a benchmark scores with: the one named, else a random probe of params.yaml's size.

    from probes import probe_or_random
    model = probe_or_random(args.model, cfg)

Speed does not depend on the weights, so a random probe of the configured size (saved as a real
checkpoint, for the backbone of ``cfg``) times the same work as a trained one.
"""
from __future__ import annotations

import tempfile


def probe_or_random(model: str | None, cfg) -> str:
    """``model`` when given, else the folder of a random probe of ``cfg.probe``'s size on SmolLM2's width (576)."""
    if model is not None:
        return model
    from spanuq.model.checkpoint import save_checkpoint
    from spanuq.model.probe import SpanUQProbe

    return str(save_checkpoint(SpanUQProbe(cfg.probe, 576), cfg.probe, 576, tempfile.mkdtemp(),
                               extra={"backbone": cfg.backbone.name}))
