"""The CPUs this process may run on: what a thread setting left at None resolves to.

``os.cpu_count()`` counts the machine's CPUs; a process started under ``taskset``, in a container
with a cpuset, or in a test worker given one CPU (tests/conftest.py) may run on fewer.  More
threads than CPUs do not just share them: llama.cpp's and OpenMP's barriers spin on threads that
are not running, and a step then waits a time slice of the scheduler.
"""
from __future__ import annotations

import os


def available_cpus() -> int:
    """The CPUs in this process's affinity mask (>= 1); the machine's count where there is no mask."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS, Windows
        return os.cpu_count() or 1
