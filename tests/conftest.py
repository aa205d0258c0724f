"""Shared fixtures: offline settings, a config rooted in a temp dir, a real llama.cpp server."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# A pytest-xdist worker (`make test` runs two on two CPUs) gets a CPU of its own, before torch or llama.cpp
# is imported: every thread count the code leaves at None then resolves to one (spanuq.pipeline.cpus), and its
# processes and theirs never spin on a CPU the other worker is using.
_WORKER, _WORKERS = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKER and hasattr(os, "sched_setaffinity"):
    _cpus = sorted(os.sched_getaffinity(0))
    if len(_cpus) >= _WORKERS:
        os.sched_setaffinity(0, _cpus[int(_WORKER.removeprefix("gw")) % _WORKERS::_WORKERS])
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from spanuq.pipeline.cpus import available_cpus  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def pytest_unconfigure(config):
    """llama-cpp-python's llama_cpp/_utils.py opens two /dev/null files at import and never closes them; the
    interpreter reports them as it tears the module down (a filter set at exit does not reach that report).
    At the end of the run they are closed, and the library keeps two that do not own their descriptor (the
    process's exit closes it), which nothing reports: a backbone freed at exit still finds them open."""
    utils = sys.modules.get("llama_cpp._utils")
    for name in ("outnull_file", "errnull_file"):
        opened = getattr(utils, name, None)
        if opened is not None and not opened.closed:
            setattr(utils, name, open(os.open(os.devnull, os.O_WRONLY), "w", closefd=False))
            opened.close()


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
    pytest.importorskip("llama_cpp", reason="needs `pip install 'llama-cpp-python[server]'`")
    from spanuq.llm.llamacpp import LlamaCppServer
    from spanuq.llm.loading import gguf_path
    from spanuq.llm.presets import get_preset

    with LlamaCppServer(gguf_path(get_preset("smollm2-135m")), n_threads=available_cpus()) as srv:
        yield srv


@pytest.fixture(scope="session")
def probe_dir(tmp_path_factory) -> Path:
    """A probe checkpoint for the real SmolLM2 backbone (d_model 576, its fused layers), random
    weights: every scoring code path runs, the scores mean nothing.  SPANUQ_TEST_PROBE=<dir>
    uses a trained one instead (for the README pictures)."""
    if os.environ.get("SPANUQ_TEST_PROBE"):
        return Path(os.environ["SPANUQ_TEST_PROBE"])
    import torch

    from spanuq.config import load_config
    from spanuq.model.checkpoint import save_checkpoint
    from spanuq.model.probe import SpanUQProbe

    cfg = load_config(REPO / "params.yaml")
    torch.manual_seed(0)
    probe = SpanUQProbe(cfg.probe, 576)
    return save_checkpoint(probe, cfg.probe, 576, tmp_path_factory.mktemp("probe"),
                           extra={"backbone": "smollm2-135m", "layers": [16, 18, 20]})


@pytest.fixture(scope="session")
def scorer(probe_dir, tmp_path_factory):
    """`SpanUQ` on the real backbone, loaded once per session (threshold 0: every query is a
    candidate, so a random probe still yields spans); llama.cpp generation of <= 24 tokens."""
    pytest.importorskip("llama_cpp", reason="needs `pip install 'llama-cpp-python[server]'`")
    from spanuq import SpanUQ
    from spanuq.config import load_config

    cache = tmp_path_factory.mktemp("score")
    cfg = load_config(REPO / "params.yaml", [f"paths.data={cache / 'data'}", f"paths.cache={cache / 'cache'}",
                                             "score.max_new_tokens=24", f"score.server_threads={available_cpus()}"])
    threshold = None if os.environ.get("SPANUQ_TEST_PROBE") else 0.0
    with SpanUQ.load(probe_dir, cfg=cfg, threshold=threshold) as uq:
        yield uq


# the test files that take longest (a durations run), started first: `make test`'s workers, a file each at a
# time, then end together instead of one running the end-to-end pipeline alone at the end
FIRST = ("test_pipeline.py", "test_shipped_probe.py", "test_sweep.py", "test_install.py", "test_generate.py",
         "test_gpu_path.py", "test_labels.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))  # stable: the rest keep their order


# the with-sources reader trained by its stage on a few real items of each set (tests/test_train_reader.py)
TINY = ["reader.sets.wice.train=3", "reader.sets.wice.dev=2", "reader.sets.swaps.train=6", "reader.sets.swaps.dev=12",
        "reader.sets.summedits.train=4", "reader.sets.summedits.dev=3", "reader.epochs=5"]


@pytest.fixture(scope="session")
def tiny_reader(tmp_path_factory, repo_root):
    """A reader trained by the stage on a few real items of each set (its numbers mean little)."""
    from spanuq.config import load_config
    from spanuq.train.reader import run_train_reader

    root = tmp_path_factory.mktemp("reader")
    cfg = load_config(repo_root / "params.yaml", TINY + [f"paths.data={root / 'data'}", f"paths.cache={root / 'cache'}"])
    report = run_train_reader(cfg, progress=False)
    return root / "data" / cfg.backbone.name / "reader", report
