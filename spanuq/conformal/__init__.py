"""Thresholds on û with a finite-sample guarantee (docs/guarantees.md).

* ``claims.py``: labelled answers → each labelled claim's û, as the evaluation scores it;
* ``command.py``: `spanuq calibrate`.

The guarantees' math is `spanuq.metrics.conformal`; the stored thresholds that scoring reads
(``conformal.json``) are `spanuq.score.guarantee`.
"""
