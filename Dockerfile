# The environment of a SpanUQ worker for a Docker or Kubernetes work pool (docs/orchestration.md).
# The image holds the environment only: each flow run still clones the repository at the
# deployment's commit (prefect.yaml's pull steps), imports spanuq from that clone, and
# flows/worker_install.sh only checks this environment (SPANUQ_REUSE_VENV).
#
#   docker build -t spanuq-worker .                     # from the repository root
#   prefect work-pool create spanuq-docker --type docker
#   (deployments: work_pool: {name: spanuq-docker, job_variables: {image: <registry>/spanuq-worker}})
#
# CPU image: torch's CPU wheel and llama.cpp built for x86-64-v3 (scripts/setup.sh). For GPU
# nodes start FROM an image with CUDA and install `.[gpu]`.
FROM python:3.11-slim

RUN apt-get update \
 && apt-get install -y --no-install-recommends git build-essential cmake util-linux ca-certificates \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/spanuq
# What the install reads first (pyproject, setup script), so code edits keep the dependency layer cached.
COPY pyproject.toml README.md ./
COPY scripts/setup.sh scripts/setup.sh
COPY spanuq spanuq
# scripts/setup.sh is the one install (torch CPU wheel first, the portable llama.cpp build, the extras);
# a worker drives no browser, so a stand-in `chromium` keeps it from installing one.
RUN ln -s /bin/true /usr/local/bin/chromium \
 && bash scripts/setup.sh \
 && rm /usr/local/bin/chromium && rm -rf /root/.cache/pip

ENV PATH=/opt/spanuq/.venv/bin:$PATH \
    VIRTUAL_ENV=/opt/spanuq/.venv \
    SPANUQ_REUSE_VENV=/opt/spanuq/.venv \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MLFLOW_DISABLE_TELEMETRY=true TOKENIZERS_PARALLELISM=false \
    PREFECT_SERVER_ANALYTICS_ENABLED=false DVC_NO_ANALYTICS=1

# Checked at build time: the environment meets the requirements of the commit it was built from.
RUN python -m spanuq.sweep.worker check

# The process a Docker work pool runs is Prefect's own command (`prefect flow-run execute`);
# as a plain container this starts a process worker instead.
CMD ["prefect", "worker", "start", "--pool", "spanuq", "--limit", "1"]
