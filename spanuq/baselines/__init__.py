"""The baselines of paper §4.2 and the `baselines` stage.

Every method implements one interface (``base.py``: `SpanScorer.fit(train, dev)` /
``.score(examples)``) and is built by name (``registry.py``: `make_baseline(name, cfg)`);
the stage (``stage.py``) runs them all on the test split with the span detectors
(``detectors.py``) and the cost column (``cost.py``); `spanuq probe-layers` (``layer_probe.py``)
trains the MLP probe on one layer at a time.  Members import lazily, so
``import spanuq.baselines`` stays light.
"""
