"""A stage computes the same bytes on every x86 CPU (spanuq/pipeline/kernels.py), so `dvc.lock` made on one
machine holds on another: the features of one answer, extracted as the extract stage does, on this CPU
with the pin and on a CPU without AVX-512 (emulated by restricting every library to AVX2) are equal."""
import json
import os
import platform
import subprocess
import sys

import pytest

from spanuq.pipeline.kernels import AVX2_PINS

# the extract stage's own code on one answer, in a fresh process: the hash of its fused states
EXTRACT_ONE = """
import hashlib, json, sys
import torch
from spanuq.config import load_config
from spanuq.pipeline.kernels import pin_cpu_kernels
cfg = load_config(None, [f"backbone.cpu_kernels={sys.argv[1]}"])
pin_cpu_kernels(cfg.backbone.cpu_kernels)
from spanuq.llm.states import extract_batch
from spanuq.llm.loading import chat_prompt, load_backbone, response_token_ids
model, tok = load_backbone(cfg)
chat = chat_prompt(tok, "When did the Rideau Canal open, and how long is it?")
resp = response_token_ids(tok, "The Rideau Canal opened in 1832; it runs 202 km from Ottawa to Kingston.")
(item,) = extract_batch(model, tok, [chat], [resp], layers=[16, 18, 20], out_dtype=torch.float32)
print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(),
                  "md5": hashlib.md5(item.h.numpy().tobytes()).hexdigest()}))
"""
# a CPU without AVX-512, as each library sees it
AVX2_ONLY_CPU = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def extract_one(kernels: str, cpu: dict[str, str] | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in AVX2_PINS and k not in AVX2_ONLY_CPU} | (cpu or {})
    out = subprocess.run([sys.executable, "-c", EXTRACT_ONE, kernels], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="the pin is x86's")
def test_a_stage_extracts_the_same_bytes_here_as_on_a_cpu_without_avx512():
    pinned_here = extract_one("avx2")
    on_avx2_cpu = extract_one("native", AVX2_ONLY_CPU)
    assert pinned_here["capability"] == "AVX2"
    assert pinned_here["md5"] == on_avx2_cpu["md5"]
    with open("/proc/cpuinfo") as f:
        has_avx512 = " avx512f" in f.read()
    if has_avx512:  # unpinned, this CPU's AVX-512 kernels give other bytes: what the pin is for
        assert extract_one("native")["md5"] != on_avx2_cpu["md5"]


def test_the_pin_leaves_what_the_environment_already_says():
    from spanuq.pipeline.kernels import pin_cpu_kernels

    saved = {k: os.environ.get(k) for k in AVX2_PINS}
    try:
        os.environ["MKL_CBWR"] = "COMPATIBLE"
        for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA"):
            os.environ.pop(k, None)
        assert pin_cpu_kernels("native") == {}
        set_now = pin_cpu_kernels("avx2")
        if platform.machine().lower() in ("x86_64", "amd64"):
            assert set_now == {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
            assert os.environ["MKL_CBWR"] == "COMPATIBLE"
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
