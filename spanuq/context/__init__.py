"""The sources an answer is read against (``context``, as LettuceDetect names it): retrieved passages,
tool results, a user's documents.

* ``passages.py``: what a source is (`Passage`), checking the ``context`` a user gives;
* ``render.py``: the one way sources reach the backbone (numbered in the system message, up to a
  token budget, in windows past it), and which characters of which passage each window read;
* ``retrieval.py``: the BM25 index over a JSONL corpus (one index format: the label stage's
  judge and ``spanuq score --corpus`` retrieve with it).
"""
