"""Thread settings left at None follow the CPUs a process may use, not the machine's count: a process
under `taskset` or a container's cpuset (or a test worker given one CPU) runs no more threads than CPUs."""
import os
import subprocess
import sys

import pytest

from spanuq.pipeline.cpus import available_cpus

CODE = """
from spanuq.config import load_config
from spanuq.generate.stage import server_layout
from spanuq.pipeline.cpus import available_cpus
import torch
print(available_cpus(), server_layout(load_config(None, ["generate.server_processes=null"])), torch.get_num_threads())
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2,
                    reason="needs a machine of two CPUs or more (and affinity masks) to give a process fewer")
def test_a_process_given_one_cpu_runs_one_thread_and_one_server():
    one = min(os.sched_getaffinity(0))
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True,
                         preexec_fn=lambda: os.sched_setaffinity(0, {one}))
    assert out.stdout.split() == ["1", "(1,", "1)", "1"], out.stdout + out.stderr
    assert available_cpus() == len(os.sched_getaffinity(0))  # a test worker's own CPUs (tests/conftest.py)
