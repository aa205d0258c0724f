"""Generation: greedy primary answer + S samples, behind one `Generator` interface."""
from .base import Completion, Generator, make_generator

__all__ = ["Completion", "Generator", "make_generator"]
