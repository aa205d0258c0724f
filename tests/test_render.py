"""Views of scored spans: terminal, HTML and the PNG layout."""
from spanuq.score.views import colour, shade, to_html, to_png, to_terminal, wrap

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
    assert 'title="û = 0.90 (likely wrong: û ≥ 0.50)"' in html and "&lt;answer&gt;" in html and html.count('class="uq"') == 3
    term = to_terminal(TEXT, SPANS)
    assert term.count("\x1b[0m") == 3 and "1913" in term
    to_png([("an answer", TEXT, SPANS)], str(tmp_path / "a.png"))
    assert (tmp_path / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_overlapping_spans_keep_their_own_indices_and_scores_in_the_html():
    html = to_html(TEXT, [(0, 20, 0.2), (9, 36, 0.8)])
    assert 'data-spans="0" data-u="0.2000"' in html and 'data-spans="1" data-u="0.8000"' in html
    assert ('data-spans="0 1" data-u="0.2000 0.8000" title="û = 0.20; û = 0.80 (likely wrong: û ≥ 0.50)"'
            in html)  # "is the" is in both


# Overlapping and nested kept spans (the probe keeps both when their IoU is below the duplicate
# threshold): every view keeps them apart, so a reader sees two spans, each with its own score.
NOBEL = "She won the Nobel Prize in Chemistry in 1911."
OVERLAP = [(12, 23, 0.3), (18, 36, 0.8)]  # 'Nobel Prize', 'Prize in Chemistry'


def test_overlapping_spans_go_on_separate_tracks_and_disjoint_ones_share_the_first():
    from spanuq.score.views import tracks

    assert tracks(OVERLAP) == [0, 1]
    assert tracks([(0, 36, 0.5), (12, 23, 0.1), (40, 44, 0.2)]) == [0, 1, 0]  # nested, then a disjoint one
    assert tracks([(0, 5, 0.1), (5, 9, 0.2)]) == [0, 0]  # touching is not overlapping


def test_the_plain_terminal_view_brackets_each_overlapping_span_on_its_own():
    assert to_terminal(NOBEL, OVERLAP, colour_on=False) == "She won the [Nobel {Prize] in Chemistry} in 1911."
    nested = to_terminal(NOBEL, [(12, 36, 0.5), (18, 23, 0.9)], colour_on=False)
    assert nested == "She won the [Nobel {Prize} in Chemistry] in 1911."
    assert to_terminal(NOBEL, [(12, 17, 0.5), (18, 23, 0.5)], colour_on=False) == "She won the [Nobel] [Prize] in Chemistry in 1911."


def test_the_coloured_terminal_view_underlines_the_second_span_inside_its_own_braces():
    from spanuq.score.views import ANSI

    out = to_terminal(NOBEL, OVERLAP)
    assert ANSI.sub("", out) == "She won the Nobel {Prize in Chemistry} in 1911."
    r, g, b = shade(0.8)
    assert f"\x1b[4m\x1b[58;2;{r};{g};{b}m" in out  # the second span: underlined in its own colour
    r, g, b = shade(0.3)
    assert out.count(f"\x1b[48;2;{r};{g};{b}m") == 2  # the first: its background on 'Nobel ' and 'Prize'


def test_the_html_view_draws_the_first_span_as_a_highlight_and_the_second_as_an_underline():
    import re

    html = to_html(NOBEL, OVERLAP)
    runs = re.findall(r'<span class="uq" style="([^"]*)" data-spans="([^"]*)"[^>]*>([^<]*)</span>', html)
    assert [(text, ks) for _, ks, text in runs] == [("Nobel ", "0"), ("Prize", "0 1"), (" in Chemistry", "1")]
    first, second = (",".join(map(str, shade(u))) for _, _, u in OVERLAP)
    style = {text: s for s, _, text in runs}
    assert f"background:rgba({first}," in style["Nobel "] and "border-bottom" not in style["Nobel "]
    assert f"background:rgba({first}," in style["Prize"] and f"border-bottom:3px solid rgb({second})" in style["Prize"]
    assert "background" not in style[" in Chemistry"] and f"border-bottom:3px solid rgb({second})" in style[" in Chemistry"]


def test_a_result_with_overlapping_spans_lists_both_and_draws_both(tmp_path):
    from spanuq.score.schema import ScoredSpan, ScoreResult, Timings
    from spanuq.score.views import fragment, terminal_view

    spans = [ScoredSpan(start=a, end=b, text=NOBEL[a:b], b=0, e=1, u=u, u_raw=u, validity=0.9, nu=5.0)
             for a, b, u in OVERLAP]
    r = ScoreResult(prompt="Who?", answer=NOBEL, answer_source="given", backbone="smollm2-135m", generator=None,
                    n_tokens=12, truncated=False, u_seq=0.5, validity_threshold=0.5, spans=spans,
                    timings=Timings(generate_s=None, backbone_s=0.1, probe_s=0.01, total_s=0.2))
    plain = terminal_view(r, colour_on=False)
    assert plain.startswith("She won the [Nobel {Prize] in Chemistry} in 1911.")
    assert "'Nobel Prize'  chars 12-23" in plain and "'Prize in Chemistry'  chars 18-36" in plain
    assert fragment(r).count('class="uq-item"') == 2 and "border-bottom" in fragment(r)
    to_png([("overlapping", NOBEL, OVERLAP)], str(tmp_path / "o.png"))
    assert (tmp_path / "o.png").stat().st_size > 0


def _result(answer_source="given", flag=0.7, status="scored", reasons=(), calibration_source=None):
    from spanuq.score.schema import ScoredSpan, ScoreResult, Timings
    from spanuq.score.status import StatusReason

    spans = [ScoredSpan(start=a, end=b, text=NOBEL[a:b], b=0, e=1, u=u, u_raw=u, validity=0.9, nu=5.0)
             for a, b, u in [(12, 23, 0.3), (40, 44, 0.85), (27, 36, 0.6)]]
    return ScoreResult(prompt="Who?", answer=NOBEL, answer_source=answer_source, backbone="smollm2-135m",
                       generator=None, n_tokens=12, truncated=False, u_seq=0.5, validity_threshold=0.5, spans=spans,
                       flag_threshold=flag, status=status, calibration_source=calibration_source or answer_source,
                       status_reasons=[StatusReason(code=c, message=m) for c, m in reasons],
                       timings=Timings(generate_s=None, backbone_s=0.1, probe_s=0.01, total_s=0.2))


def test_the_view_ranks_spans_most_doubtful_first_and_reds_only_what_passes_the_flag_threshold():
    from spanuq.score.views import fragment, position, shade, terminal_view

    plain = terminal_view(_result(), colour_on=False)
    listed = [line.split("'")[1] for line in plain.splitlines() if line.startswith("  0.")]
    assert listed == ["1911", "Chemistry", "Nobel Prize"]  # û 0.85, 0.60, 0.30
    assert "'1911'  chars 40-44  ν 5.0  likely wrong" in plain and "Chemistry'  chars 27-36  ν 5.0\n" in plain + "\n"
    assert "3 spans, 1 likely wrong" in plain
    # the colour scale bends at the flag: 0.6 is below a flag of 0.7, so amber at most; from 0.7 on, red
    assert position(0.6, 0.7) < 0.5 and shade(0.6, 0.7) == shade(0.6 / 0.7 * 0.5, 0.5)
    assert shade(0.7, 0.7) == shade(0.95, 0.7) == colour(1.0)
    html = fragment(_result())
    assert html.index("</b> 1911 <em>likely wrong</em>") < html.index("</b> Chemistry ") < html.index("</b> Nobel Prize ")
    assert html.count('data-likely-wrong="true"') == 1


def test_the_legend_says_what_u_means_for_an_own_answer_and_for_a_given_one():
    from spanuq.score.views import legend

    own, given = legend(_result("generated")), legend(_result("given", flag=0.62))
    assert "would not say this again" in own and "its own answer" in own
    assert "chance this fact is wrong" in given and "did not write" in given and "û ≥ 0.62" in given
    # a probe with no given-answer calibration says so instead of claiming what û means
    bare = legend(_result("given", calibration_source="generated"))
    assert "no calibration for answers it did not write" in bare and "chance this fact is wrong" not in bare


def test_an_answer_spanuq_could_not_judge_is_grey_with_nothing_likely_wrong():
    from spanuq.score.views import GREY, fragment, terminal_view

    r = _result(status="unverified", reasons=[("subject_unknown", "the backbone does not know this subject: ...")])
    plain = terminal_view(r, colour_on=False)
    assert plain.startswith("UNVERIFIED") and "3 spans, 0 likely wrong" in plain
    assert not any(line.endswith("likely wrong") for line in plain.splitlines() if line.startswith("  0."))
    assert "unverified (subject_unknown): the backbone does not know this subject" in plain
    coloured = terminal_view(r, colour_on=True)
    assert f"48;2;{';'.join(map(str, GREY))}m" in coloured
    assert 'data-likely-wrong="true"' not in fragment(r)


def test_spans_over_the_red_line_are_red_and_the_page_says_what_each_number_is():
    """The legend says red from the flag threshold on: every span at or above it is drawn in the bar's red
    (not a pale orange just past amber), the bar marks the line, a tooltip says what û is for this answer's
    source, and ν and validity are explained in one line each."""
    import re

    from spanuq.score.views import fragment

    red = ",".join(map(str, colour(1.0)))
    html = fragment(_result(flag=0.53))  # û 0.30, 0.85, 0.60 against a red line of 0.53
    runs = dict((text, style) for style, text in
                re.findall(r'<span class="uq" style="([^"]*)"[^>]*>([^<]*)</span>', html))
    assert f"rgba({red},0.55)" in runs["1911"] and f"rgba({red},0.55)" in runs["Chemistry"]  # 0.85 and 0.60: red
    assert red not in runs["Nobel Prize"]  # 0.30: below the line
    assert 'class="uq-line" data-flag="0.5300"' in html and "left:53.0%" in html and "red line û = 0.53" in html
    assert 'title="û = 0.85: chance this fact is wrong (likely wrong: û ≥ 0.53)"' in html
    assert 'title="û = 0.30: chance this fact is wrong"' in html
    own = fragment(_result("generated", flag=0.53))
    assert 'title="û = 0.30: chance the backbone would not say this again"' in own
    assert "ν: how sure the probe is of û itself" in html and "validity: how likely the probe&#x27;s query" in html


def test_the_validity_line_agrees_with_the_spans_listed():
    """The page lists a pasted answer's names, dates and numbers as spans of their own even where the query over
    them is under the probe's validity cut (`spanuq.score.facts`): the trial's page listed spans at validity 0.00
    and 0.03 under a legend saying such spans are not shown.  The line names the cut and, when spans
    under it are listed, says which they are; when none is, it says only that the cut leaves spans out."""
    import html as html_lib
    import re

    from spanuq.score.views import fragment

    def terms(r) -> str:
        return html_lib.unescape(re.search(r'<p class="meta uq-terms">(.*?)</p>', fragment(r)).group(1))

    r = _result()
    r.validity_threshold = 0.2
    r.spans[1].validity, r.spans[2].validity = 0.0, 0.03
    listed = [float(v) for v in re.findall(r"validity (\d\.\d\d)\)", fragment(r))]
    assert sorted(listed) == [0.0, 0.03, 0.9]  # the list shows them, with their validity
    line = terms(r)
    assert "are not shown" not in line or "on its own" in line, line
    assert "0.20" in line and "name, date or number" in line
    above = _result()
    above.validity_threshold = 0.5
    assert "under the probe's cut, 0.50, are not shown" in terms(above) and "name, date" not in terms(above)
