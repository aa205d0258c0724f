"""Views of scored spans, one package for every place that shows them: the terminal (`spanuq score`,
``terminal.py``), the standalone HTML page (`spanuq score --html`) and the web page of `spanuq serve` (its
fragments come from `POST /render`; ``page.py``), and the evaluate stage's PNG (``png.py``); what they share —
tracks and colours (``colours.py``), the legend, ranking and the lines beside the spans (``legend.py``) — once.

A span is anything with character offsets and a score: ``(char_start, char_end, u)``.
Colour runs from green (u = 0, confident) through amber to red (u = 1, likely wrong); with a
result's *flag threshold* (the calibrated û from which its spans are shown as likely wrong,
chosen on held-out answers for precision) the scale bends so that amber sits at the threshold:
only a span at or above it is drawn red (`shade`). The spans are listed most doubtful first.

The probe may keep two spans that overlap or nest ('Nobel Prize' and 'Prize in Chemistry':
their overlap is below the duplicate threshold), each with its own û.  Every view keeps them
apart: spans are laid out on *tracks* (`tracks`: no two spans of one track overlap).  Track 0
is drawn as a background highlight; a span on a later track is drawn as an underline in its
own colour, inside its own brackets (``{…}``, then ``⟨…⟩``).  The plain terminal view brackets
every span: ``[Nobel {Prize] in Chemistry}``.

Every name is importable from here (``from spanuq.score.views import fragment``).
"""
from __future__ import annotations

from .colours import BRACKETS, GREY, Span, colour, position, shade, tracks
from .legend import (HOW_TO_CHOOSE, LEGEND, MEANING, NU_LINE, TIP, TIP_UNCALIBRATED, UNCALIBRATED_GIVEN, VALIDITY_LINE,
                     WITH_SOURCES, against, conformal_line, judged_flag, legend, likely_wrong, probe_line, ranked,
                     result_spans, sources_lines, tip_meaning, validity_line)
from .page import colour_bar, fragment, html_page, sources_html, tip, to_html
from .png import to_png, wrap
from .terminal import ANSI, LiveTerminal, stream_line, terminal_view, to_terminal

__all__ = ["ANSI", "BRACKETS", "GREY", "HOW_TO_CHOOSE", "LEGEND", "MEANING", "NU_LINE", "TIP", "TIP_UNCALIBRATED",
           "UNCALIBRATED_GIVEN", "VALIDITY_LINE", "WITH_SOURCES", "LiveTerminal", "Span", "against", "colour",
           "colour_bar", "conformal_line", "fragment", "html_page", "judged_flag", "legend", "likely_wrong", "position",
           "probe_line", "ranked", "result_spans", "shade", "sources_html", "sources_lines", "stream_line",
           "terminal_view", "tip", "tip_meaning", "to_html", "to_png", "to_terminal", "tracks", "validity_line", "wrap"]
