"""The with-sources reader: how well the sources back each word of an answer, read by a small encoder.

    encoder.py   every sentence of every passage read by MiniLM-L6 (word-piece and sentence embeddings)
    features.py  per answer word: whether the sources hold it, align with it, speak of the question
    model.py     the net over those rows (and their neighbours'), saved as safetensors
    spans.py     the answer's spans: names, numbers and content words with the function words leading in
    read.py      `Reader`: the three together, one answer at a time

Trained by `spanuq.train.reader` on real items (`spanuq.data.real`); the scorer reads answers with sources
through it (`spanuq.score.sourced`).
"""
