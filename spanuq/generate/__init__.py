"""Generation: greedy primary answer + S samples.  Backends (``hf.py``, ``server.py``, ``vllm.py``)
implement one `Generator` interface (``base.py``); the stage (``stage.py``) builds the configured one
(`make_generator`, `open_generator`) and writes generations.jsonl."""
