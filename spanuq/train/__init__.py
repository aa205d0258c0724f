"""Training the probe: the `train` stage (``stage.py``: two-phase training, dev calibration,
checkpoint) and `spanuq ablate` (``ablate.py``: every switch of the ablation table on one split)."""
