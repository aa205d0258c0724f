"""Shared fixtures: offline settings, a config rooted in a temp dir, a real llama.cpp server."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture
def make_cfg(tmp_path):
    """``make_cfg("generate.n_samples=2", ...)`` → params.yaml with data/cache under tmp_path."""
    from spanuq.config import load_config

    def make(*overrides: str):
        return load_config(REPO / "params.yaml", [
            f"paths.data={tmp_path / 'data'}", f"paths.cache={tmp_path / 'cache'}",
            f"mlflow.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}", *overrides,
        ])

    return make


@pytest.fixture(scope="session")
def llama_server():
    """The real llama.cpp OpenAI-compatible server on the shipped SmolLM2 GGUF, on 127.0.0.1."""
    pytest.importorskip("llama_cpp", reason="needs `pip install 'spanuq[server]'`")
    from spanuq.backbones import get_preset
    from spanuq.llamacpp import LlamaCppServer
    from spanuq.llm import gguf_path

    with LlamaCppServer(gguf_path(get_preset("smollm2-135m")), n_threads=2) as srv:
        yield srv
