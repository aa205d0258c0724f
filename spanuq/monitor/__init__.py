"""`spanuq monitor`: a report over many answers (HTML + JSON), resumable.

* ``rows.py``: the answers file (prompt, response, domain, metadata);
* ``cache.py``: per-answer results keyed by a content hash, appended as they are scored;
* ``report.py``: the numbers (shares with intervals, histograms, groups, the most doubtful answers);
* ``html.py``: the page; ``run.py``: the command's work; ``command.py``: its arguments.
"""
