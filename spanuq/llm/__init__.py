"""Backbone plumbing: everything that talks to the frozen LLM.

* ``presets.py``: the backbones (hub id or shipped GGUF, layers to fuse, d_model);
* ``loading.py``: loading the model and tokenizer, the chat template, the canonical tokenisation;
* ``states.py``: the probe's input for an answer (fused hidden states + token entropy), from a
  teacher-forced pass or captured while transformers generates;
* ``llamacpp.py``: the real llama.cpp server on the shipped GGUF;
* ``openai_client.py``: one client for OpenAI-compatible endpoints (retries, API key).
"""
