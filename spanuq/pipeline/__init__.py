"""What every stage shares: where files live (``paths.py``), the records that flow between
stages (``records.py``), reading and writing them atomically (``files.py``), the per-item
content-hash cache of long stages (``cache.py``), MLflow tracking (``tracking.py``) and the CPUs a
process may use (``cpus.py``)."""
