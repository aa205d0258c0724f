"""Thresholds on û with a finite-sample guarantee (docs/guarantees.md).

* ``fit.py``: the two guarantees (conformal factuality; Learn then Test on the share of kept
  claims that are wrong) and the held-out check over random splits;
* ``claims.py``: labelled answers → each labelled claim's û, as the evaluation scores it;
* ``store.py``: ``conformal.json`` beside the probe's weights (tied to their sha256);
* ``command.py``: `spanuq calibrate`.
"""
