"""The product: scoring answers with a trained probe.

* ``scorer.py``: the `SpanUQ` API (``from spanuq import SpanUQ``; docs/score.md);
* ``schema.py``: its request and result records (docs/score.schema.json);
* ``service.py``: the HTTP service of `spanuq serve`, with its web page (``web/``);
* ``views.py``: every view of scored spans (terminal, HTML, the web page's fragments, PNG);
* ``mlflow_model.py`` and ``registry.py``: the probe as an MLflow pyfunc model, logged and
  registered with its ``champion`` alias;
* ``commands.py``: the `spanuq score` and `spanuq serve` commands.
"""
