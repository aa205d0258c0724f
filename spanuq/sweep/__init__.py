"""The hyper-parameter sweep (paper App. C.3): an Optuna study per backbone, trials on GPU slots.

* `spec` — ``sweeps/<backbone>.yaml``: space, sampler, budget.
* `study` — RDB storage with heartbeats, the queue of configurations, claiming a trial.
* `slots` — which device a trial gets (``CUDA_VISIBLE_DEVICES``), virtual slots on a CPU.
* `trial` — one trial in its own process: train, evaluate, MLflow child run, tell Optuna.
* `runner` — prepare / run_lanes / finish (coordinator), join (another machine): the sweep on one machine or many.
* `data` — the sweep's inputs on every machine: pushed to and pulled from DVC (`dvcrepo`), or refused.
* `worker` — where a worker's code comes from, and whether its Python has what that code needs.

The Prefect flows (``flows/sweep.py``) drive the same functions.
"""
from .runner import Sweep, finish, prepare, robustness, run_lanes, run_one, run_sweep
from .spec import SweepSpec, load_spec, spec_path

__all__ = ["Sweep", "SweepSpec", "finish", "load_spec", "prepare", "robustness", "run_lanes", "run_one",
           "run_sweep", "spec_path"]
