"""The OpenAI-compatible endpoints of `spanuq serve` (docs/openai.md).

* ``records.py``: the request, the responses (``chat.completion``, ``chat.completion.chunk``),
  the ``spanuq`` extension and OpenAI's error shape;
* ``conversation.py``: what a request asks to score (the new assistant turn, in the whole conversation);
* ``engines.py``: who writes the answer (the backbone, or an upstream OpenAI-compatible server);
* ``router.py``: the ``/v1`` routes and the streamed completion job.
"""
