#!/usr/bin/env bash
# Prefect pull step (prefect.yaml), run in the fresh clone of a flow run: give the Python that
# runs the flow what this commit needs. The flow imports `spanuq` from the clone (it is first on
# sys.path); the worker's environment only has to hold the dependencies.
#
#   SPANUQ_REUSE_VENV=/path/to/venv   reuse that environment as it is: install nothing, only check
#                                     that it meets this commit's requirements (an image built from
#                                     the Dockerfile sets it; the multi-machine test does too, as
#                                     creating an environment per flow run takes minutes)
#   otherwise                         pip-install this commit's requirements into the worker's
#                                     environment ($VIRTUAL_ENV, else python3 on PATH), one flow run
#                                     at a time (a lock in that environment); satisfied ones are kept
set -euo pipefail
if [ -n "${SPANUQ_REUSE_VENV:-}" ]; then
  py="$SPANUQ_REUSE_VENV/bin/python"
  [ -x "$py" ] || { echo "worker_install: SPANUQ_REUSE_VENV=$SPANUQ_REUSE_VENV has no bin/python" >&2; exit 1; }
  echo "worker_install: reusing the environment $SPANUQ_REUSE_VENV (nothing installed); code from $(pwd)"
else
  py="${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}"
  py="${py:-$(command -v python3)}"
  lock="$("$py" -c 'import sys; print(sys.prefix)')/.spanuq-install.lock"
  echo "worker_install: installing this commit's requirements into $("$py" -c 'import sys; print(sys.prefix)')"
  "$py" -m spanuq.sweep.worker requirements > .worker-requirements.txt
  flock "$lock" "$py" -m pip --disable-pip-version-check install -q -r .worker-requirements.txt
fi
"$py" -m spanuq.sweep.worker check
