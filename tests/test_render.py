"""Views of scored spans: terminal, HTML and the PNG layout."""
from spanuq.score.views import colour, to_html, to_png, to_terminal, wrap

TEXT = "Canberra is the capital of Australia. It was founded in 1913."
SPANS = [(0, 8, 0.05), (27, 36, 0.1), (56, 60, 0.9)]


def test_wrapping_breaks_at_spaces_and_keeps_every_character():
    lines = wrap(TEXT, 20)
    assert all(b - a <= 20 for a, b in lines)
    assert " ".join(TEXT[a:b] for a, b in lines) == TEXT
    assert wrap("x" * 45, 20) == [(0, 20), (20, 40), (40, 45)]  # a word longer than a line is cut


def test_colours_run_from_green_to_red_and_views_carry_the_scores(tmp_path):
    assert colour(0.0)[1] > colour(0.0)[0] and colour(1.0)[0] > colour(1.0)[1]
    html = to_html(TEXT, SPANS, title="<answer>")
    assert 'title="u = 0.90"' in html and "&lt;answer&gt;" in html and html.count('class="uq"') == 3
    term = to_terminal(TEXT, SPANS)
    assert term.count("\x1b[0m") == 3 and "1913" in term
    to_png([("an answer", TEXT, SPANS)], str(tmp_path / "a.png"))
    assert (tmp_path / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_overlapping_spans_keep_their_own_indices_and_scores_in_the_html():
    html = to_html(TEXT, [(0, 20, 0.2), (9, 36, 0.8)])
    assert 'data-spans="0" data-u="0.2000"' in html and 'data-spans="1" data-u="0.8000"' in html
    assert 'data-spans="0 1" data-u="0.2000 0.8000" title="u = 0.20; u = 0.80"' in html  # "is the" is in both
