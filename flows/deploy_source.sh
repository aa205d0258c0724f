#!/usr/bin/env bash
# Prefect build step (prefect.yaml): print the repository every worker clones the deployment's
# commit from. `origin` when HEAD has been pushed there; otherwise this checkout's own path
# (workers on this machine or on a shared file system can clone it), with a warning.
# Uncommitted changes never reach a worker: they are named on stderr.
set -euo pipefail
dirty=$(git status --porcelain --untracked-files=no)
[ -z "$dirty" ] || echo "warning: uncommitted changes are not deployed (workers clone commit $(git rev-parse --short HEAD)):
$dirty" >&2
if url=$(git remote get-url origin 2>/dev/null) && [ -n "$(git branch -r --contains HEAD 2>/dev/null)" ]; then
  echo "$url"
else
  echo "warning: HEAD $(git rev-parse --short HEAD) is on no branch of a remote: workers clone it from $(pwd)" >&2
  git rev-parse --show-toplevel
fi
