"""GPU slots of one machine: which device a trial may use.

A machine has N slots (``SPANUQ_GPU_SLOTS``, else the visible CUDA devices, else 1 on a
CPU machine).  A trial holds one slot for its whole run: an exclusive ``flock`` on
``<slot_dir>/slot-<i>.lock``, so every process of the machine (several flow runs, several
workers) shares one set of slots, and a killed holder releases its slot with its file
descriptor.  The trial's process then sees only that device: ``CUDA_VISIBLE_DEVICES=<i>``.
On a CPU machine you can declare N *virtual* slots to run N trials at once.

The Prefect flows add a global concurrency limit ``gpu-<node>`` of size N on top, so the
Prefect UI shows how many slots of each machine are busy.
"""
from __future__ import annotations

import fcntl
import os
import socket
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def node_name() -> str:
    """This machine's name in slot locks and MLflow tags (``SPANUQ_NODE`` overrides the host name)."""
    return os.environ.get("SPANUQ_NODE") or socket.gethostname()


def visible_slots() -> list[str]:
    """Device ids a trial may be given: ``SPANUQ_GPU_SLOTS`` (a count or ids "0,2"), else CUDA's."""
    declared = os.environ.get("SPANUQ_GPU_SLOTS")
    if declared:
        return [str(i) for i in range(int(declared))] if declared.isdigit() else declared.split(",")
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd:
        return [d for d in cvd.split(",") if d.strip()]
    try:
        import torch

        n = torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - no torch / no driver: a CPU machine
        n = 0
    return [str(i) for i in range(n)] or [""]  # "": one CPU slot, CUDA_VISIBLE_DEVICES stays empty


def slot_dir() -> Path:
    return Path(os.environ.get("SPANUQ_SLOT_DIR") or Path(tempfile.gettempdir()) / f"spanuq-slots-{node_name()}")


@contextmanager
def hold_slot(slots: list[str] | None = None, directory: Path | None = None,
              poll_s: float = 0.5, timeout_s: float | None = None) -> Iterator[str]:
    """``with hold_slot() as device:`` — wait for a free slot, hold it, yield its device id."""
    slots = visible_slots() if slots is None else slots
    d = directory or slot_dir()
    d.mkdir(parents=True, exist_ok=True)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        for i, device in enumerate(slots):
            fd = os.open(d / f"slot-{i}.lock", os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                yield device
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
            return
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"no free slot of {len(slots)} in {d} after {timeout_s} s")
        time.sleep(poll_s)
