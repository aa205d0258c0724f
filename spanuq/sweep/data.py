"""The data a sweep trains on, on every machine of the sweep.

Trials read the backbone's labels (``data/<backbone>/labels.jsonl``) and the extracted
features of each layer set of the space.  The coordinator describes exactly those inputs in
a **manifest** kept in the study (user attr ``sweep_data``, also ``sweep-data.json`` in the
MLflow parent run); each runner makes its checkout hold the same bytes before its first trial,
or refuses — before it creates anything — with the command that fixes it.

* **dvc** (the repository has a default DVC remote and the data lives under its ``data/``):
  the pipeline's outputs are versioned by ``dvc.lock`` (labels, generations, the pipeline's
  features).  A layer set the pipeline did not extract is extracted once by the coordinator
  and versioned by a ``.dvc`` file under ``sweeps/data/`` (commit it to skip the extraction
  next time).  The coordinator ``dvc pull``s what its checkout lacks (its machine's DVC cache
  or the remote), checks that it matches the lock, then ``dvc push``es it all.  A runner
  compares its own ``dvc.lock`` with the manifest — another hash means another labelling, and
  it refuses — then ``dvc pull``s exactly what its trials read (the labels and the features of
  every layer set; not the generations), which DVC checks out by hash.
* **shared** (no DVC remote, or the data outside the repository): every machine must see the
  same files at the same paths (one machine, or a shared file system); a runner checks their
  content hashes against the manifest.

Sizes moved (files and bytes pushed or pulled) are returned, logged by the flows and kept
in their results; ``dvc status -c`` of the manifest's outputs is checked clean at the end.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import yaml

from ..config import Config
from ..llm.presets import fused_layers
from ..pipeline.files import sha256_tree
from ..pipeline.paths import StagePaths
from .dvcrepo import cloud_status, default_remote, dvc, dvcfile_outs, files_size, lock_outs, repo_root, status

log = logging.getLogger(__name__)

MANIFEST_ATTR = "sweep_data"
SWEEP_DVC_DIR = Path("sweeps") / "data"  # .dvc files of the layer sets the sweep extracts itself


class DataRefused(RuntimeError):
    """This machine's data is missing or differs from the coordinator's; nothing was created."""


# --- what a sweep reads ------------------------------------------------------------------------

def features_inputs(configs: list[Config]) -> list[Path]:
    """The features folder of each layer set (``spanuq.sweep.trial.features_dir``), once each."""
    from .trial import features_dir

    return list(dict.fromkeys(features_dir(c) for c in configs))


def _layer_tag(cfg: Config) -> str:
    return "L" + "-".join(map(str, fused_layers(cfg)))


def sweep_dvcfile(cfg: Config) -> Path:
    """``sweeps/data/<backbone>-L<layers>.dvc``: the features of a layer set the sweep extracts."""
    return SWEEP_DVC_DIR / f"{cfg.backbone.name}-{_layer_tag(cfg)}.dvc"


def _rel(root: Path, p: Path) -> str | None:
    try:
        return str(p.resolve().relative_to(root))
    except ValueError:
        return None


def mode(cfg: Config, root: Path | None = None) -> tuple[str, Path | None, tuple[str, str] | None]:
    """("dvc", root, remote) when the data is under a DVC repository with a default remote, else ("shared", ...)."""
    root = root or repo_root()
    if root is None or _rel(root, StagePaths.from_config(cfg).labels) is None:
        return "shared", root, None
    remote = default_remote(root)
    return ("dvc" if remote else "shared"), root, remote


# --- the coordinator ---------------------------------------------------------------------------

def fetch_for_coordinator(cfg: Config, configs: list[Config]) -> dict[str, Any]:
    """Bring into this checkout, from DVC (this machine's cache, else the remote), what ``dvc.lock`` and
    committed ``sweeps/data/*.dvc`` files record and the sweep needs: the labelled generations (with the
    stages before them), the pipeline's features when dvc.lock's extract entry belongs to those labels,
    the layer sets of the ``.dvc`` files.  Best effort: what is nowhere stays missing, and the upstream
    check then says what to run.  Returns what came from the remote."""
    kind, root, remote = mode(cfg)
    done = {"mode": kind, "pulled_files": 0, "pulled_bytes": 0, "targets": []}
    paths = StagePaths.from_config(cfg)
    if root is None or _rel(root, paths.labels) is None:
        return done
    fetch = remote is not None  # without a remote, DVC can still check out what this machine's cache holds
    locked = lock_outs(root)
    if not (paths.labels.exists() and paths.generations.exists()) and _rel(root, paths.labels) in locked:
        _add(done, _pull(root, ["label"], with_deps=True, strict=False, fetch=fetch))
    rel_features = _rel(root, paths.features)
    if not paths.features.exists() and rel_features in locked and _only_outputs_missing(root, "extract"):
        _add(done, _pull(root, [rel_features], strict=False, fetch=fetch))
    dvcfiles = [str(sweep_dvcfile(c)) for c, f in zip(configs, features_inputs(configs))
                if (root / sweep_dvcfile(c)).exists() and not f.exists()]
    if dvcfiles:
        _add(done, _pull(root, dvcfiles, strict=False, fetch=fetch))
    return done


def _add(total: dict[str, Any], part: dict[str, Any]) -> None:
    total["pulled_files"] += part["pulled_files"]
    total["pulled_bytes"] += part["pulled_bytes"]
    total["targets"] += part["targets"]


def _only_outputs_missing(root: Path, stage: str) -> bool:
    """Does dvc.lock's entry of ``stage`` still describe its inputs here (params and deps unchanged,
    only its outputs absent)?"""
    for item in status([stage], root).get(stage, []):
        outs = item.get("changed outs")
        if not outs or not all(v in ("deleted", "not in cache") for v in outs.values()) or len(item) > 1:
            return False
    return True


def _pull(root: Path, targets: list[str], with_deps: bool = False, strict: bool = True,
          fetch: bool = True, before: dict[str, str] | None = None) -> dict[str, Any]:
    """``dvc pull TARGETS`` (``dvc checkout`` from this machine's cache when not ``fetch``); the (files, bytes)
    that came from the remote (the rest, if any, from the local cache).  ``before``: their ``dvc status -c``."""
    opts = ["--with-deps"] if with_deps else []
    if before is None:
        before = cloud_status(root, [*opts, *targets]) if fetch else {}
    r = dvc(["pull" if fetch else "checkout", *opts, *targets], root, check=strict)
    if r.returncode:
        log.info("dvc pull %s: not everything is in this machine's cache or the remote: %s",
                 " ".join(targets), (r.stderr or r.stdout).strip()[-500:])
    n, size = files_size(root, [p for p, s in before.items() if s == "deleted"])
    return {"targets": targets, "pulled_files": n, "pulled_bytes": size}


def unversioned(cfg: Config) -> str | None:
    """Why the labelled generations here are not what dvc.lock records (None when they are, or in shared mode)."""
    kind, root, _ = mode(cfg)
    if kind != "dvc":
        return None
    paths = StagePaths.from_config(cfg)
    locked = lock_outs(root)
    unlocked = [p for p in (_rel(root, paths.labels), _rel(root, paths.generations)) if p not in locked]
    if unlocked:
        return f"dvc.lock has no entry for {', '.join(unlocked)}"
    changed = _stage_changes(root, "label", keep_outs={_rel(root, paths.labels)})
    if not changed:
        return None
    if not paths.labels.exists():
        return (f"dvc.lock records {_rel(root, paths.labels)}, but neither this machine's DVC cache nor the remote "
                "holds it (push it from the machine that ran the pipeline: `dvc push label generate`)")
    return f"`dvc status label` reports {json.dumps(changed)}"


def _stage_changes(root: Path, stage: str, keep_outs: set[str]) -> list[dict[str, Any]]:
    """``dvc status STAGE`` without what the sweep does not read (its uncached reports and plots)."""
    out = []
    for item in status([stage], root).get(stage, []):
        if isinstance(item, dict) and "changed outs" in item:
            item = {**item, "changed outs": {k: v for k, v in item["changed outs"].items() if k in keep_outs}}
            item = {k: v for k, v in item.items() if v}
        if item:
            out.append(item)
    return out


def check_shareable(cfg: Config, runners: int) -> None:
    """Before anything is created: a sweep over several machines trains on labels every machine can pull."""
    why = unversioned(cfg) if runners > 1 else None
    if why:
        raise DataRefused(
            f"a sweep over {runners} machines trains on data each of them pulls by its dvc.lock, and here {why}. "
            "Run the pipeline's stages with DVC where they can run and commit the lock (`dvc repro label && "
            "git add dvc.lock && git commit -m 'labels' && git push`), then start the sweep again (from that "
            "commit: `prefect deploy --all`). Nothing was created.")


def publish(cfg: Config, configs: list[Config], runners: int = 1) -> dict[str, Any]:
    """The manifest of the sweep's inputs; in dvc mode also versioned (dvc.lock, ``sweeps/data/*.dvc``) and
    pushed to the remote.  Called once the inputs exist (upstream stages run, every layer set extracted)."""
    kind, root, remote = mode(cfg)
    paths = StagePaths.from_config(cfg)
    features = features_inputs(configs)
    why = unversioned(cfg) if kind == "dvc" else None
    if kind == "shared" or why:
        check_shareable(cfg, runners)
        log.warning("the sweep's data is not moved by DVC (%s): another machine joins only if it sees %s at the same "
                    "path (a shared file system)", why or "no DVC remote, or the data outside the repository",
                    ", ".join(map(str, [paths.labels, *features])))
        inputs = [{"role": "labels", "path": str(paths.labels.resolve()), "sha256": sha256_tree(paths.labels)}]
        inputs += [{"role": "features", "path": str(f.resolve()), "sha256": sha256_tree(f)} for f in features]
        return {"mode": "shared", "inputs": inputs, "pushed_files": 0, "pushed_bytes": 0}

    from .worker import git_commit

    locked = lock_outs(root)
    rel_labels, rel_generations = _rel(root, paths.labels), _rel(root, paths.generations)
    inputs = [{"role": "labels", "path": rel_labels, **_entry(locked[rel_labels]), "dvcfile": "dvc.lock"},
              {"role": "generations", "path": rel_generations, **_entry(locked[rel_generations]), "dvcfile": "dvc.lock"}]
    for c, f in zip(configs, features):
        rel = _rel(root, f)
        if any(i["path"] == rel for i in inputs):
            continue
        if rel in locked:  # the pipeline's own features
            if status(["extract"], root):
                raise DataRefused(f"{rel} here is not what dvc.lock records (`dvc status extract`): run `dvc repro "
                                  f"extract` and commit dvc.lock, or remove {rel} so that the sweep extracts this layer "
                                  "set itself. Nothing was pushed.")
            inputs.append({"role": "features", "path": rel, "layers": fused_layers(c), **_entry(locked[rel]),
                           "dvcfile": "dvc.lock"})
            continue
        name = sweep_dvcfile(c)
        dvcfile = root / name
        if not dvcfile.exists() or status([str(name)], root):  # new, or a stale file: record what is here
            dvcfile.parent.mkdir(parents=True, exist_ok=True)
            dvcfile.write_text(yaml.safe_dump({"outs": [{"path": os.path.relpath(root / rel, dvcfile.parent)}]}))
            dvc(["commit", "-f", str(name)], root)
        inputs.append({"role": "features", "path": rel, "layers": fused_layers(c), **_entry(dvcfile_outs(dvcfile)),
                       "dvcfile": str(name), "dvcfile_text": dvcfile.read_text()})
    targets = _targets(inputs)
    new = cloud_status(root, targets)
    dvc(["push", *targets], root)
    n, size = files_size(root, [p for p, s in new.items() if s == "new"])
    left = cloud_status(root, targets)
    if left:
        raise RuntimeError(f"after `dvc push` the remote still lacks {left}")
    return {"mode": "dvc", "commit": git_commit(root), "remote": remote[0], "remote_url": remote[1], "inputs": inputs,
            "pushed_files": n, "pushed_bytes": size, "size_bytes": sum(i.get("size") or 0 for i in inputs)}


def _entry(out: dict[str, Any]) -> dict[str, Any]:
    return {k: out.get(k) for k in ("md5", "size", "nfiles")}


def _targets(inputs: list[dict[str, Any]]) -> list[str]:
    """What to name to DVC: a lock output by its path, a sweep layer set by its .dvc file."""
    return [i["path"] if i["dvcfile"] == "dvc.lock" else i["dvcfile"] for i in inputs]


# --- a runner ----------------------------------------------------------------------------------

def _runner_inputs(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """A runner reads the labels and the features; the generations only feed the coordinator's extraction."""
    return [i for i in manifest["inputs"] if i["role"] != "generations"]


def join(cfg: Config, manifest: dict[str, Any] | None, study_name: str) -> dict[str, Any]:
    """Make this checkout hold the coordinator's inputs before the first trial, or refuse with the fix."""
    if manifest is None:
        raise DataRefused(f"the study {study_name} has no data manifest: its coordinator has not prepared the sweep "
                          "yet (start it with `prefect deployment run sweep/<backbone>`). Nothing was created.")
    if manifest["mode"] == "shared":
        return _join_shared(manifest)
    root = repo_root()
    if root is None:
        raise DataRefused(f"the sweep's data comes through DVC, and {Path.cwd()} is not in a DVC repository: run the "
                          "runner in a clone of the repository (prefect.yaml's pull steps make one). Nothing was created.")
    inputs = _runner_inputs(manifest)
    locked = lock_outs(root)
    fix = f"`git fetch && git checkout {manifest.get('commit') or '<the coordinator commit>'} && dvc pull {' '.join(_targets(inputs))}`"
    for i in inputs:
        if i["dvcfile"] != "dvc.lock":
            own = root / i["dvcfile"]
            if own.exists() and dvcfile_outs(own).get("md5") != i["md5"]:
                raise DataRefused(f"{i['dvcfile']} here records {i['path']} as md5 {dvcfile_outs(own).get('md5')}, the "
                                  f"sweep's coordinator extracted md5 {i['md5']}: remove it (`git rm {i['dvcfile']}` if "
                                  "committed) or check out the coordinator's commit. Nothing was created.")
            continue
        mine = (locked.get(i["path"]) or {}).get("md5")
        if mine != i["md5"]:
            what = "the labels" if i["role"] == "labels" else i["path"]
            raise DataRefused(
                f"{what} of this machine differ from the coordinator's: this checkout's dvc.lock records {i['path']} as "
                f"{'md5 ' + mine if mine else 'nothing'}, the sweep {study_name} trains on md5 {i['md5']} (commit "
                f"{manifest.get('commit')}). A trial here would train on other data. Run this runner at the coordinator's "
                f"commit: {fix} (prefect.yaml's pull steps clone it). Nothing was created.")
    lock_targets = [i["path"] for i in inputs if i["dvcfile"] == "dvc.lock"]
    modified = {k: v for k, v in _workspace_changes(root, lock_targets).items() if (root / k).exists()}
    if modified:
        raise DataRefused(f"this machine's copy of {', '.join(modified)} differs from dvc.lock ({modified}): restore "
                          f"the locked version with `dvc checkout --force {' '.join(modified)}` (this discards the local "
                          "copy), then start the runner again. Nothing was created.")
    written = []
    for i in inputs:  # the coordinator's .dvc files of the layer sets it extracted
        own = root / i["dvcfile"]
        if i["dvcfile"] != "dvc.lock" and not own.exists():
            own.parent.mkdir(parents=True, exist_ok=True)
            own.write_text(i["dvcfile_text"])
            written.append(own)
    targets = _targets(inputs)
    before = cloud_status(root, targets)
    missing = {k: v for k, v in before.items() if v == "missing"}
    if missing:
        for f in written:
            f.unlink()
        raise DataRefused(f"neither this machine's DVC cache nor the remote {manifest.get('remote')} "
                          f"({manifest.get('remote_url')}) holds {', '.join(sorted(missing))}: on the coordinator's "
                          f"machine run `dvc push {' '.join(targets)}`, then start the runner again. Nothing was created.")
    report = {"mode": "dvc", **_pull(root, targets, before=before)}
    verify(root, inputs)
    return report


def _workspace_changes(root: Path, targets: list[str]) -> dict[str, str]:
    """{out path: deleted | modified | ...} for lock outputs whose workspace copy is not the locked one."""
    out: dict[str, str] = {}
    for stage_items in status(targets, root).values():
        for item in stage_items:
            for path, state in (item.get("changed outs") or {}).items():
                if path in targets:
                    out[path] = state
    return out


def verify(root: Path, inputs: list[dict[str, Any]]) -> None:
    """Every input is checked out here exactly as recorded (DVC's own comparison with the lock / .dvc file)."""
    bad = _workspace_changes(root, [i["path"] for i in inputs if i["dvcfile"] == "dvc.lock"])
    for i in inputs:
        if i["dvcfile"] != "dvc.lock" and status([i["dvcfile"]], root):
            bad[i["path"]] = "modified"
    if bad:
        raise RuntimeError(f"after `dvc pull` the checkout still differs from the coordinator's data: {bad}")


def _join_shared(manifest: dict[str, Any]) -> dict[str, Any]:
    for i in manifest["inputs"]:
        p = Path(i["path"])
        if not p.exists():
            raise DataRefused(f"this machine does not see {p}, which the sweep's coordinator trains on: mount the "
                              "coordinator's data folder at that path (a shared file system), or move the data through "
                              "DVC (`dvc remote add -d storage <url>`, commit .dvc/config, start the sweep again). "
                              "Nothing was created.")
        if sha256_tree(p) != i["sha256"]:
            raise DataRefused(f"{p} here differs from the coordinator's (sha256 {i['sha256'][:12]}…): the trials would "
                              "train on other data. Give this machine the coordinator's copy. Nothing was created.")
    return {"mode": "shared", "pulled_files": 0, "pulled_bytes": 0}


def final_status(manifest: dict[str, Any] | None, runner: bool) -> dict[str, str] | None:
    """``dvc status -c`` of the manifest's outputs in this checkout ({} = clean); None in shared mode."""
    if not manifest or manifest["mode"] != "dvc":
        return None
    root = repo_root()
    inputs = _runner_inputs(manifest) if runner else manifest["inputs"]
    return cloud_status(root, _targets(inputs))


def human(n: int | None) -> str:
    n = n or 0
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
