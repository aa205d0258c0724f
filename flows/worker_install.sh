#!/usr/bin/env bash
# Prefect pull step (prefect.yaml), run in the fresh clone of a flow run: give the Python that
# runs the flow what this commit needs. The flow imports `spanuq` from the clone (it is first on
# sys.path); the worker's environment only has to hold the dependencies.
#
#   SPANUQ_REUSE_VENV=/path/to/venv   reuse that environment as it is: install nothing, only check
#                                     that it meets this commit's requirements (an image built from
#                                     the Dockerfile sets it; the multi-machine test does too, as
#                                     creating an environment per flow run takes minutes)
#   otherwise                         pip-install this commit's requirements (pyproject.toml's
#                                     dependencies + the orchestration extra, or the extras named in
#                                     SPANUQ_WORKER_EXTRAS, e.g. gpu; not spanuq itself) into the
#                                     worker's environment, one flow run at a time (a lock in that
#                                     environment); satisfied ones are kept, so a run that needs nothing
#                                     new costs seconds. The flow then checks its own Python again.
set -euo pipefail
if [ -n "${SPANUQ_REUSE_VENV:-}" ]; then
  py="$SPANUQ_REUSE_VENV/bin/python"
  [ -x "$py" ] || { echo "worker_install: SPANUQ_REUSE_VENV=$SPANUQ_REUSE_VENV has no bin/python" >&2; exit 1; }
  echo "worker_install: reusing the environment $SPANUQ_REUSE_VENV (nothing installed); code from $(pwd)"
else
  # the worker's Python: $SPANUQ_WORKER_PYTHON, else the active virtualenv's, else the one beside `prefect`
  py="${SPANUQ_WORKER_PYTHON:-${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}}"
  if [ -z "$py" ] && command -v prefect >/dev/null; then py="$(dirname "$(command -v prefect)")/python"; fi
  [ -x "${py:-}" ] || { echo "worker_install: cannot tell which Python runs the flow: set SPANUQ_WORKER_PYTHON" >&2; exit 1; }
  lock="$("$py" -c 'import sys; print(sys.prefix)')/.spanuq-install.lock"
  echo "worker_install: installing this commit's requirements into $("$py" -c 'import sys; print(sys.prefix)')"
  req=$(mktemp)
  trap 'rm -f "$req"' EXIT
  "$py" -m spanuq.sweep.worker requirements > "$req"
  flock "$lock" "$py" -m pip --disable-pip-version-check install -q -r "$req"
fi
"$py" -m spanuq.sweep.worker check
