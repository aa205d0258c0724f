#!/usr/bin/env bash
# Re-train and re-ship the probe packaged in spanuq/probes/<backbone>/ — run it when the teacher
# (generation, labelling) changes. The cpu-full preset end to end into its own data folder (every
# stage resumes where it stopped), the Mu-SHROOM yardstick (validation chooses the settings, the
# test split is read once for the new weights), the planted-error pairs, then scripts/ship_probe.py writes the package
# files and the model card. Commit spanuq/probes/ afterwards.
#
#   scripts/retrain_shipped_probe.sh <mu-shroom checkout or its English files>
set -euo pipefail
cd "$(dirname "$0")/.."
mushroom=${1:?usage: scripts/retrain_shipped_probe.sh <mu-shroom checkout or its English val/test files>}
data=${SPANUQ_SHIP_DATA:-data-cpu-full}
backbone=$(python -c "from spanuq.config import load_config; print(load_config('params.yaml').backbone.name)")
opts=(--preset cpu-full -o "paths.data=$data")
for stage in prompts generate index label extract train evaluate baselines; do
  echo "== $stage"
  spanuq "$stage" "${opts[@]}"
done
probe="$data/$backbone/probe"
spanuq bench mushroom "${opts[@]}" --split val --probe "$probe" --data "$mushroom"
spanuq bench mushroom "${opts[@]}" --split test --probe "$probe"
spanuq bench planted "${opts[@]}" --probe "$probe" --refine
python scripts/ship_probe.py --run "$data" "${opts[@]}" --bench "$data/$backbone/bench/mushroom-test.json" \
  --planted "$data/$backbone/bench/planted.json"
