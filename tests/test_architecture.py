"""The architecture of docs/architecture.md, checked on the source (tests/imports.py): the layers
import only downwards, nothing imports in a circle, private names stay private, and every
dvc.yaml stage lists the code it runs and the preset blocks of the params it reads."""
import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from imports import PACKAGE, closure, graph, modules, private_imports, strongly_connected, unit, unit_graph

REPO = Path(__file__).resolve().parents[1]

# docs/architecture.md, bottom to top: a module imports modules of its own unit and of lower layers
LAYERS = {
    "infrastructure": ["spanuq.config", "spanuq.pipeline"],
    "backbone plumbing": ["spanuq.llm", "spanuq.context"],
    "the probe": ["spanuq.model", "spanuq.metrics", "spanuq.reader"],
    "the stages that make the training data": ["spanuq.data", "spanuq.generate", "spanuq.label", "spanuq.features"],
    "the product": ["spanuq.score"],
    "the stages that read a trained probe": ["spanuq.evaluate", "spanuq.train", "spanuq.baselines", "spanuq.report",
                                             "spanuq.bench", "spanuq.conformal", "spanuq.monitor"],
    "what runs the stages": ["spanuq.stages", "spanuq.sweep"],
    "entry points": ["spanuq.cli", "spanuq"],
}
RANK = {u: i for i, units in enumerate(LAYERS.values()) for u in units}
# what `spanuq <stage>` runs before the stage's own code: dispatch, not part of any stage's result
DISPATCH = {"spanuq", "spanuq.cli", "spanuq.stages"}


def _runs_nothing(f: Path) -> bool:
    """A package ``__init__.py`` that is only its docstring (importing it runs no code)."""
    body = ast.parse(f.read_text(encoding="utf-8")).body
    return all(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in body)


@pytest.fixture(scope="module")
def g():
    return graph(REPO)


def test_every_part_of_the_package_has_a_layer(g):
    assert set(unit_graph(g)) == set(RANK)


def test_imports_only_run_down(g):
    up = [(m, d) for m, deps in g.items() for d in deps if RANK[unit(d)] > RANK[unit(m)]]
    assert up == [], "imports that run back up (docs/architecture.md has the layers)"


def test_no_import_circles(g):
    assert strongly_connected(g) == []
    assert strongly_connected(unit_graph(g)) == []


def test_private_names_stay_in_their_module():
    assert private_imports(REPO) == []


def test_the_top_level_holds_only_the_entry_points_and_the_config():
    top = {m for m, f in modules(REPO).items() if m.count(".") == 1 and f.name != "__init__.py"}
    assert top == {"spanuq.cli", "spanuq.config", "spanuq.stages"}


def test_import_spanuq_is_light_and_spanuq_uq_is_the_api():
    code = ("import sys, spanuq; assert 'torch' not in sys.modules, 'import spanuq loaded torch'; "
            "from spanuq import SpanUQ, ScoreResult; from spanuq.score.scorer import SpanUQ as S; assert SpanUQ is S; "
            "print(sorted(spanuq.__all__))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert "SpanUQ" in out.stdout and "ScoreResult" in out.stdout


# ------------------------------------------------------------------ dvc.yaml

def _dvc_stages() -> dict:
    return yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]


def _entries(items) -> list[str]:
    return [next(iter(i)) if isinstance(i, dict) else i for i in items or []]


def _stage_module(name: str) -> str:
    from spanuq.stages import STAGES

    return STAGES[name].split(":")[0]


def _code_deps(stage: dict) -> list[str]:
    return [d for d in _entries(stage.get("deps")) if d.startswith(f"{PACKAGE}/")]


@pytest.mark.parametrize("name", list(_dvc_stages()))
def test_a_stage_lists_every_module_it_imports_and_no_other_code(g, name):
    stage = _dvc_stages()[name]
    assert stage["cmd"].split()[:2] == ["spanuq", name]
    files = modules(REPO)
    needed = {m: files[m].relative_to(REPO).as_posix() for m in closure(g, _stage_module(name)) - DISPATCH
              if not _runs_nothing(files[m])}
    deps = _code_deps(stage)

    def covered(path: str) -> bool:
        return any(path == d or path.startswith(d.rstrip("/") + "/") for d in deps)

    missing = sorted(p for p in needed.values() if not covered(p))
    assert not missing, f"dvc.yaml stage {name!r} runs code it does not list in deps: {missing}"
    code = [d for d in deps if d.endswith(".py") or any((REPO / d).rglob("*.py"))]  # not data it reads
    unused = [d for d in code if not any(p == d or p.startswith(d.rstrip("/") + "/") for p in needed.values())]
    assert not unused, f"dvc.yaml stage {name!r} lists code it never imports: {unused}"


@pytest.mark.parametrize("name", list(_dvc_stages()))
def test_a_stage_lists_the_preset_blocks_of_the_params_it_reads(name):
    """A preset overrides whole sections: a stage that reads ``train`` depends on every preset's
    ``train`` block (``presets.<preset>.train``), and on no other part of ``presets``."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    listed = _entries(_dvc_stages()[name].get("params"))
    assert "preset" in listed and "presets" not in listed

    def lookup(key: str):
        node = params
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, f"{name}: param {key!r} is not in params.yaml"
            node = node[part]

    for key in listed:
        lookup(key)
    sections = {k.split(".")[0] for k in listed if not k.startswith("presets.")} - {"preset"}
    want = {f"presets.{p}.{s}" for p, block in params["presets"].items() for s in block if s in sections}
    have = {k for k in listed if k.startswith("presets.")}
    assert have == want, f"{name}: the preset blocks of its sections are {sorted(want)}"


def test_the_code_deps_of_dvc_yaml_name_existing_paths():
    for name, stage in _dvc_stages().items():
        for d in _code_deps(stage):
            assert (REPO / d).exists(), f"{name}: {d} does not exist"
            assert not re.search(r"\.pyc$|__pycache__", d)
