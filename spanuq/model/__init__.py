"""The SpanUQ probe (paper §3), laid out like detr's ``models/``:

* ``probe.py``: `SpanUQProbe`, encoder + set decoder + heads, opening with its math;
* ``queries.py``: reference spans (two-stage selection, refinement, denoising queries);
* ``mob.py``: the Mixture-of-Beta uncertainty head;
* ``matcher.py``: the Hungarian matcher (detr's contract); ``losses.py``: `SetCriterion`;
* ``span_ops.py``: 1-D span geometry, the interval analogue of detr's ``box_ops``;
* ``postprocess.py``: the one post-processing step, probe outputs → shown spans (detr's ``PostProcess``),
  with the dev-fitted `Calibration` (``calibration.py``);
* ``ensemble.py``: `ProbeEnsemble`, probes of several seeds read as one (member 0's spans, the members' û);
* ``checkpoint.py``: safetensors + JSON checkpoints (one probe or an ensemble).
"""
