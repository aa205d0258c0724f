"""The terminal views: the answer with its spans in ANSI colour or ``[brackets]`` (`spanuq score`), the live
block of `spanuq score --stream` and one plain line per streamed update (piped output)."""
from __future__ import annotations

import re
from typing import Sequence

from .colours import Span, brackets, colour, covered_runs, shade, tracks
from .legend import against, conformal_line, judged_flag, legend, likely_wrong, probe_line, ranked, result_spans, \
    sources_lines


ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _rgb_at(u: float, flag: float | None) -> str:
    return ";".join(map(str, shade(u, flag)))


def _rgb(u: float) -> str:
    return ";".join(map(str, colour(u)))


def _marks(spans: Sequence[Span], track: list[int], colour_on: bool, every: bool,
           flag: float | None = 0.5) -> dict[int, list[str]]:
    """The brackets inserted before character i: closing ones (inner first), then opening ones.
    ``every``: bracket track-0 spans too (the plain view); otherwise only the later tracks."""
    closing: dict[int, list[tuple[int, str]]] = {}
    opening: dict[int, list[tuple[int, str]]] = {}
    for k, (start, end, u) in enumerate(spans):
        if track[k] == 0 and not every:
            continue
        left, right = brackets(track[k])
        if colour_on:
            left, right = (f"\x1b[1m\x1b[38;2;{_rgb_at(u, flag)}m{c}\x1b[0m" for c in (left, right))
        closing.setdefault(end, []).append((track[k], right))
        opening.setdefault(start, []).append((track[k], left))
    out: dict[int, list[str]] = {}
    for i in set(closing) | set(opening):
        out[i] = ([c for _, c in sorted(closing.get(i, []), reverse=True)]
                  + [c for _, c in sorted(opening.get(i, []))])
    return out


def to_terminal(text: str, spans: Sequence[Span], colour_on: bool = True, flag: float | None = 0.5) -> str:
    """The answer with its spans marked.  Colour (amber at ``flag``, `shade`): track 0 on its ANSI
    24-bit background colour, later tracks underlined in their colour (SGR 58) inside their
    brackets.  Plain: every span in brackets."""
    spans = list(spans)
    track = tracks(spans)
    marks = _marks(spans, track, colour_on, not colour_on, flag)
    out: list[str] = []
    for a, b, ks in covered_runs(text, spans):
        out.extend(marks.get(a, []))
        chunk = text[a:b]
        if not colour_on or not ks:
            out.append(chunk)
            continue
        style = ""
        first = [k for k in ks if track[k] == 0]
        if first:
            style += f"\x1b[48;2;{_rgb_at(spans[first[0]][2], flag)}m\x1b[38;2;0;0;0m"
        later = [k for k in ks if track[k] > 0]
        if later:
            style += f"\x1b[4m\x1b[58;2;{_rgb_at(max(spans[k][2] for k in later), flag)}m"
        out.append(f"{style}{chunk}\x1b[0m")
    out.extend(marks.get(len(text), []))
    return "".join(out)


def _chip(u: float, colour_on: bool, flag: float | None = 0.5) -> str:
    if not colour_on:
        return f"{u:.2f}"
    r, g, b = shade(u, flag)
    return f"\x1b[48;2;{r};{g};{b}m\x1b[38;2;0;0;0m {u:.2f} \x1b[0m"


def terminal_view(result, colour_on: bool = True) -> str:
    """The answer with its spans coloured by û, a legend, then one line per span.
    ``colour_on=False``: plain text (spans marked ``[like this]``), for pipes and NO_COLOR."""
    spans = result_spans(result)
    flag = judged_flag(result)
    body = to_terminal(result.answer, spans, colour_on, flag)
    if colour_on:
        bar = "".join(f"\x1b[48;2;{_rgb(k / 19)}m \x1b[0m" for k in range(20))
        key = f"0 {bar} 1   {legend(result)}"
    else:
        key = legend(result)
    flagged = sum(likely_wrong(s.u, flag) for s in result.spans)
    lines = [body, "", key, f"{_useq(result)}   {len(spans)} span{'s' * (len(spans) != 1)}, {flagged} likely wrong   "
             f"{result.n_tokens} tokens" + ("   (stopped at max_new_tokens)" if result.truncated else "")]
    conformal = set(result.conformal.flagged) if result.conformal else set()
    index = {id(s): k for k, s in enumerate(result.spans)}
    if result.spans:
        lines.append("most doubtful first:")
    for s in ranked(result):
        mark = ("  likely wrong" if likely_wrong(s.u, flag) else "") + ("  above the conformal threshold"
                                                          if index[id(s)] in conformal else "")
        mark += f"  {against(s, flag)}" if against(s, flag) else ""
        lines.append(f"  {_chip(s.u, colour_on, flag)}  {s.text!r}  chars {s.start}-{s.end}{'' if s.nu is None else f'  ν {s.nu:.1f}'}{mark}")
    if result.status == "unverified":
        lines.insert(0, "UNVERIFIED: SpanUQ could not judge this answer; do not read it as free of doubt")
        lines += [f"unverified ({r.code}): {r.message}" for r in result.status_reasons]
    if result.conformal:
        lines.append(conformal_line(result.conformal))
    lines += sources_lines(result)
    if result.probe:
        lines.append(probe_line(result.probe))
    return "\n".join(lines)


def _useq(result) -> str:
    return "no answer score (unverified)" if result.u_seq is None else f"answer score û_seq = {result.u_seq:.2f}"


class LiveTerminal:
    """Redraws a block of text in place on a terminal (`spanuq score --stream`): each ``draw`` moves the
    cursor back over the rows the previous block took (wrapped lines included) and clears them."""

    def __init__(self, stream):
        self.stream, self.rows = stream, 0

    def draw(self, text: str) -> None:
        import shutil

        cols = max(1, shutil.get_terminal_size().columns)
        back = f"\x1b[{self.rows}F\x1b[J" if self.rows else ""
        self.stream.write(back + text + "\n")
        self.stream.flush()
        self.rows = sum(max(1, -(-len(ANSI.sub("", line)) // cols)) for line in text.split("\n"))


def stream_line(update) -> str:
    """One plain line per streamed update (piped output): tokens so far, spans, û_seq, the answer with [spans]."""
    r = update.result
    body = terminal_view(r, colour_on=False).split("\n\n" + legend(r))[0].replace("\n", " ")
    useq = "unverified" if r.u_seq is None else f"û_seq {r.u_seq:.2f}"
    return (f"[{update.n_generated:>3} tokens, {len(r.spans)} spans, {useq}"
            f"{', unverified' if r.status == 'unverified' and r.u_seq is not None else ''}"
            f"{', done' if update.done else ''}] {body}")
