"""The Optuna study of a sweep: RDB storage with heartbeats, the grid queue, claiming trials.

Storage is any SQLAlchemy URL: ``sqlite:///optuna.db`` on one machine, PostgreSQL
(``postgresql+psycopg2://...``) when several machines share one study.  Trials are
handed out through Optuna's queue of WAITING trials: ``claim_trial`` flips one from
WAITING to RUNNING with one conditional UPDATE, so two workers never get the same trial.  A RUNNING trial whose process stops sending heartbeats for
``grace_s`` is failed by ``fail_stale_trials`` and re-queued once
(``RetryFailedTrialCallback``-style, Optuna's own callback).
"""
from __future__ import annotations

import logging
import time
import warnings
from typing import Any

import optuna
from optuna.trial import TrialState

from .spec import SweepSpec

log = logging.getLogger(__name__)

PARENT_RUN_ATTR = "mlflow_parent_run_id"


def _retry_callback(max_retry: int):
    storages = optuna.storages
    cls = getattr(storages, "RetryHeartbeatStaleTrialCallback", None) or storages.RetryFailedTrialCallback
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return cls(max_retry=max_retry)


def make_storage(url: str, spec: SweepSpec) -> optuna.storages.RDBStorage:
    """An RDB storage with heartbeats; engine pre-ping so a restarted PostgreSQL is survived."""
    kwargs: dict[str, Any] = {"heartbeat_interval": spec.heartbeat_s, "grace_period": spec.grace_s}
    cb = _retry_callback(spec.max_retry)
    import inspect

    sig = inspect.signature(optuna.storages.RDBStorage.__init__).parameters
    kwargs["heartbeat_stale_trial_callback" if "heartbeat_stale_trial_callback" in sig else "failed_trial_callback"] = cb
    engine = {"pool_pre_ping": True} if not url.startswith("sqlite") else {"connect_args": {"timeout": 60}}
    from sqlalchemy.exc import SQLAlchemyError

    for attempt in range(5):  # two processes creating the schema at once: one loses the race, then finds it
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(url, engine_kwargs=engine, **kwargs)
        except SQLAlchemyError:
            if attempt == 4:
                raise
            time.sleep(1 + attempt)
    raise AssertionError("unreachable")


def _sampler(spec: SweepSpec) -> optuna.samplers.BaseSampler:
    """A grid is enqueued whole by the coordinator (`enqueue_grid`) and claimed trial by trial
    (`claim_trial`), so no sampler picks its points; Optuna's GridSampler is not used because
    its ``after_trial`` hook reads its own per-trial ``grid_id`` (which enqueued trials lack) and
    raised KeyError when a grid had one point left."""
    if spec.sampler == "tpe":
        return optuna.samplers.TPESampler(seed=spec.seed)
    return optuna.samplers.RandomSampler(seed=spec.seed)


def _pruner(spec: SweepSpec) -> optuna.pruners.BasePruner:
    if spec.pruner.type == "none":
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=spec.pruner.n_startup_trials,
                                       n_warmup_steps=spec.pruner.n_warmup_steps)


def open_study(spec: SweepSpec, storage_url: str, create: bool = True) -> optuna.Study:
    """Create the study, or load it when it exists (a resumed or a second worker's sweep).

    ``create=False`` (a runner joining a sweep) raises `KeyError` when the study does not exist."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = make_storage(storage_url, spec)
    if not create:
        return optuna.load_study(study_name=spec.study_name, storage=storage, sampler=_sampler(spec),
                                 pruner=_pruner(spec))
    return optuna.create_study(study_name=spec.study_name, storage=storage, sampler=_sampler(spec),
                               pruner=_pruner(spec), direction="maximize", load_if_exists=True)


def enqueue_grid(study: optuna.Study, spec: SweepSpec) -> int:
    """Queue every grid configuration not yet in the study (any state); returns how many were added.

    Called by the one coordinator of a sweep; a re-run (resume) adds nothing that
    already ran, finished, failed or is queued.
    """
    existing = {tuple(sorted(_params(t).items())) for t in study.get_trials(deepcopy=False)}
    added = 0
    for params in spec.grid():
        if tuple(sorted(params.items())) in existing:
            continue
        study.enqueue_trial(params)
        added += 1
    return added


def _params(t: optuna.trial.FrozenTrial) -> dict[str, Any]:
    return dict(t.params) or dict(t.system_attrs.get("fixed_params", {}))


def fail_stale_trials(study: optuna.Study) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def claim_trial(study: optuna.Study, spec: SweepSpec) -> int | None:
    """Take one trial to run: a queued (WAITING) one, else — random/tpe — a new one within budget.

    Returns the trial id, now RUNNING and owned by the caller, or None when there is
    nothing to take right now.
    """
    storage = study._storage
    fail_stale_trials(study)
    for t in storage.get_all_trials(study._study_id, deepcopy=False, states=(TrialState.WAITING,)):
        if _take_waiting(storage, t._trial_id):
            return t._trial_id
    if spec.sampler != "grid":
        originals = [t for t in study.get_trials(deepcopy=False) if "failed_trial" not in t.system_attrs]
        if len(originals) < (spec.n_trials or 0):
            return study._storage.create_new_trial(study._study_id)
    return None


def _take_waiting(storage, trial_id: int) -> bool:
    """WAITING → RUNNING as one conditional UPDATE: exactly one of several claimers wins.

    Optuna's own ``set_trial_state_values`` reads, then writes; on PostgreSQL the read
    locks the row, but on sqlite two processes can both read WAITING and both "win".
    """
    from datetime import datetime, timezone

    from optuna.storages._rdb import models
    from sqlalchemy import update

    backend = getattr(storage, "_backend", storage)  # under Optuna's per-process cache
    table = models.TrialModel.__table__
    stmt = (update(table).where(table.c.trial_id == trial_id, table.c.state == TrialState.WAITING)
            .values(state=TrialState.RUNNING, datetime_start=datetime.now(timezone.utc).replace(tzinfo=None)))
    with backend.engine.begin() as conn:
        return conn.execute(stmt).rowcount == 1


def unfinished(study: optuna.Study) -> int:
    """Trials queued or running anywhere (other workers' included)."""
    return len(study.get_trials(deepcopy=False, states=(TrialState.WAITING, TrialState.RUNNING)))


def trial_by_id(study: optuna.Study, trial_id: int) -> optuna.trial.FrozenTrial:
    return study._storage.get_trial(trial_id)
