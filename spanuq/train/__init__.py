"""Training the probe: the loop of one probe (``loop.py``: two-phase training, the best epoch on dev),
the `train` stage (``stage.py``: its members (``members.py``), dev calibration, checkpoint) and `spanuq
ablate` (``ablate.py``: every switch of the ablation table on one split)."""
