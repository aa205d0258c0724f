"""SpanUQ: span-level uncertainty for LLM answers from one forward pass."""
__version__ = "0.1.0"
