"""The probe as a few members (`train.members`): each trained alone from its own seed, read as one.

With M members, member m of training seed s is trained with seed ``s·M + m`` (seeds 0 and 1 of an
ensemble share no member), by `train_probe` exactly as a single probe is, each in a process of its
own (a probe's training runs on one or two threads: M processes use the cores one probe leaves
idle).  The members are joined by `spanuq.model.ensemble.ProbeEnsemble` (member 0 finds the spans,
every member scores them); the calibrations are then fitted on dev on the ensemble's readings.
M = 1 is the paper's single probe, trained in this process.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import torch

from ..config import Config, apply_overrides
from ..features.dataset import ResponseExample
from ..model.checkpoint import load_checkpoint, save_checkpoint
from ..model.ensemble import ProbeEnsemble
from ..pipeline.cpus import available_cpus
from .loop import train_probe

SUMMARY = ("seed", "best_epoch", "best_dev_score", "epochs_run", "seconds")


def member_seeds(seed: int, members: int) -> list[int]:
    """The training seeds of an ensemble of ``members`` probes of training seed ``seed``."""
    return [seed * members + m for m in range(members)]


def train_members(cfg: Config, train: list[ResponseExample], dev: list[ResponseExample],
                  progress: bool = True, on_epoch=None) -> tuple[torch.nn.Module, dict]:
    """(the probe or the members' `ProbeEnsemble`, history) of ``cfg.train.members`` probes.  The
    history is `train_probe`'s of member 0, with ``members``: each member's seed, best epoch and time."""
    from tqdm.auto import tqdm

    n = cfg.train.members
    if n == 1:
        return train_probe(cfg, train, dev, progress, on_epoch)
    cores = available_cpus()
    workers = min(n, cores)
    threads = cfg.train.num_threads or max(1, cores // workers)
    seeds = member_seeds(cfg.train.seed, n)
    train, dev = compact(train), compact(dev)
    with tempfile.TemporaryDirectory(prefix="spanuq-members-") as tmp:
        # spawn: a fresh interpreter per worker (no forked torch thread pools); the parent's CPU-kernel pins
        # are in os.environ, which the workers inherit
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            jobs = [pool.submit(train_member, cfg, s, threads, train, dev, str(Path(tmp) / f"member-{m}"))
                    for m, s in enumerate(seeds)]
            infos = [job.result() for job in tqdm(jobs, desc=f"train {n} members", unit="member",
                                                  disable=not progress)]
        probes = [load_checkpoint(Path(tmp) / f"member-{m}").probe for m in range(n)]
    if on_epoch:
        for row in infos[0]["history"]:
            on_epoch(row["epoch"], row)
    model = ProbeEnsemble(probes).eval()
    return model, {"history": infos[0]["history"], "best_epoch": infos[0]["best_epoch"],
                   "best_dev_score": infos[0]["best_dev_score"], "epochs_run": infos[0]["epochs_run"],
                   "n_parameters": model.num_parameters(),
                   "members": [{k: i[k] for k in SUMMARY} for i in infos]}


def compact(examples: list[ResponseExample]) -> list[ResponseExample]:
    """The examples with tensors that own their storage.  A feature store's items are slices of its
    memory-mapped shards; pickled to a worker, a slice carries its whole shard, once per example."""
    own = lambda t: t if t is None else t.clone()  # noqa: E731
    return [replace(e, h=own(e.h), entropy=own(e.entropy), surprisal=own(e.surprisal), spans=own(e.spans), u=own(e.u))
            for e in examples]


def train_member(cfg: Config, seed: int, threads: int, train: list[ResponseExample], dev: list[ResponseExample],
                 out_dir: str) -> dict:
    """One member (in a worker process): trained with ``seed`` on ``threads`` threads, saved to ``out_dir``."""
    cfg = apply_overrides(cfg, {"train.seed": seed, "train.num_threads": threads})
    t0 = time.perf_counter()
    model, info = train_probe(cfg, train, dev, progress=False)
    save_checkpoint(model, cfg.probe, model.d_model, out_dir)
    info = {**info, "seed": seed, "seconds": round(time.perf_counter() - t0, 1)}
    return json.loads(json.dumps({k: v for k, v in info.items() if k != "n_parameters"}, default=float))
