"""The CPU kernels a pipeline stage computes with: the same bytes for the same inputs across x86 CPUs of a vendor.

torch picks its CPU kernels at run time from what the CPU offers: ATen's AVX-512 kernels where the
CPU has AVX-512, its AVX2 kernels where it does not (MKL and oneDNN dispatch alike).  Vectors of
another width add in another order, so the same answer's hidden states differ in their last bits
between two machines, and with them the features' hash, the probe trained on them and every hash
after it in ``dvc.lock``.  With ``backbone.cpu_kernels: avx2`` a stage pins ATen, MKL (its
"conditional numerical reproducibility" mode) and oneDNN to their AVX2 code paths, which every
x86 CPU since 2013 runs alike; llama.cpp's portable wheel is built for the same (scripts/setup.sh).
Measured: that holds between vector widths on one CPU, and llama.cpp's tokens are the same on an AMD EPYC
and an Intel Xeon, but torch's float32 states still differ in their last bits between those two, so
``dvc.lock`` holds across CPUs of one vendor (docs/results.md).  Intel documents why: MKL's AVX2 branch is
kept on Intel CPUs only, and other CPUs run its AUTO branch.  Its COMPATIBLE branch (SSE2) is the one it
documents for every x86 CPU: ``MKL_CBWR=COMPATIBLE`` in the environment wins over the pin, at 2.4x the
extract stage's time on 2 cores (not yet compared on an AMD CPU).
``native`` lets each library use the fastest path the CPU has.  A GPU's kernels are not touched.

The libraries read these variables once, at their first call: `pin_cpu_kernels` must run before the
stage's first tensor operation (`spanuq.stages.run_stage` and a stage's child process call it first).
"""
from __future__ import annotations

import logging
import os
import platform
import sys

log = logging.getLogger(__name__)

AVX2_PINS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def pin_cpu_kernels(kernels: str) -> dict[str, str]:
    """Set the pins for ``kernels`` ("avx2" | "native") unless the environment already sets them; the
    variables it set.  On a CPU other than x86-64 there is nothing to pin."""
    if kernels == "native" or platform.machine().lower() not in ("x86_64", "amd64"):
        return {}
    set_now = {k: v for k, v in AVX2_PINS.items() if k not in os.environ}
    os.environ.update(set_now)
    if "torch" in sys.modules:
        import torch

        capability = torch.backends.cpu.get_cpu_capability()  # fixed by the first call; AVX2 when pinned in time
        if set_now and capability not in ("AVX2", "DEFAULT", "NO AVX"):
            log.warning("torch already chose its %s kernels before the pin: this stage's outputs may differ in their "
                        "last bits from another CPU's", capability)
    return set_now
