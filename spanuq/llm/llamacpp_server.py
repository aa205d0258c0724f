"""llama-cpp-python's OpenAI-compatible server with every request decoded from an empty KV cache.

``python -m spanuq.llm.llamacpp_server ARGS`` runs ``python -m llama_cpp.server ARGS`` (the same arguments),
with one change: `llama_cpp.Llama.generate` starts each request from a clean state.  Left as it is, the server
keeps the KV cache of the prefix a request shares with the request before it and decodes only the rest, so
its float sums depend on what it served before: the same greedy request flipped a near tie ("2,417.5 metres"
on the first request, "2,401.5 metres" on the next ones) depending on whether the prompt before it
shared its start.  Evaluated whole every time, a prompt's answer is the one a freshly started server gives,
whatever came before it, streamed or not (llama.cpp's own server calls this ``cache_prompt: false``).  The
cost: each prompt is read again, a fraction of the time its answer takes.

`spanuq.llm.llamacpp.LlamaCppServer` starts this module; it imports nothing of spanuq but this file.
"""
from __future__ import annotations

import functools


def from_clean_state(generate):
    """``Llama.generate`` that first resets the model's state, so no KV of an earlier request is reused."""

    @functools.wraps(generate)
    def wrapped(self, tokens, *args, **kwargs):
        self.reset()  # n_tokens = 0: the prompt is evaluated whole, the cache cleared from position 0 on
        return (yield from generate(self, tokens, *args, **kwargs))

    return wrapped


def main() -> None:
    import llama_cpp
    from llama_cpp.server.__main__ import main as serve

    llama_cpp.Llama.generate = from_clean_state(llama_cpp.Llama.generate)
    serve()


if __name__ == "__main__":
    main()
