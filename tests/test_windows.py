"""Answers of any length: windows of the probe's trained length (`spanuq.score.windows`) and
chunked backbone passes past the context (`spanuq.llm.chunked`)."""
import numpy as np
import pytest
import torch

from spanuq.llm.chunked import chunk_plan, extract_long
from spanuq.llm.loading import token_offsets
from spanuq.llm.states import extract_batch
from spanuq.model.calibration import Calibration
from spanuq.model.postprocess import Prediction
from spanuq.score.windows import merge_windows, owned_ranges, plan_windows

PARTS = [
    "Marie Curie was a Polish–French physicist and chemist. She won two Nobel Prizes, in 1903 and 1911.",
    "The capital of Australia is Canberra. It was founded in 1913 and chosen as a compromise with Sydney.",
    "Alexander Fleming discovered penicillin in 1928 at St Mary's Hospital in London.",
    "The Four Seasons was composed by Antonio Vivaldi around 1720 in Venice.",
]


def long_answer(tok, n_tokens: int) -> str:
    """Known answers joined by blank lines until the text has at least ``n_tokens`` tokens."""
    parts, k = [], 0
    while len(tok("\n\n".join(parts), add_special_tokens=False)["input_ids"]) < n_tokens:
        parts.append(PARTS[k % len(PARTS)])
        k += 1
    return "\n\n".join(parts)


@pytest.mark.parametrize("window", [16, 128])
def test_windows_have_the_trained_length_overlap_and_tile_the_answer_by_ownership(window):
    for T in [1, window - 1, window, window + 1, 3 * window + 7, 2000]:
        ws = plan_windows(T, window)
        if T <= window:
            assert ws == [(0, T)]
            continue
        assert ws[0][0] == 0 and ws[-1][1] == T and all(e - s == window for s, e in ws)
        assert all(b[0] - a[0] > 0 and a[1] - b[0] >= window // 4 for a, b in zip(ws, ws[1:]))  # overlap ≥ W/4
        owned = owned_ranges(ws, T)
        assert owned[0][0] == 0 and owned[-1][1] == T and all(a[1] == b[0] for a, b in zip(owned, owned[1:]))
        for k, ((s, e), (lo, hi)) in enumerate(zip(ws, owned)):  # a window owns its middle, not its edges
            assert s <= lo < hi <= e
            assert k == 0 or lo - s >= window // 8
            assert k == len(ws) - 1 or e - hi >= window // 8


def test_plan_windows_refuses_an_overlap_as_long_as_the_window():
    with pytest.raises(ValueError, match="overlap < window"):
        plan_windows(500, 64, 64)


def _pred(spans, validity, u, u_seq):
    spans = np.array(spans, dtype=np.int64).reshape(-1, 2)
    n = len(spans)
    return Prediction("p", spans, np.array(u, float), np.array(validity, float), u_seq, np.arange(n),
                      u_raw=np.array(u, float), u_seq_raw=u_seq, nu=np.full(n, 5.0))


def test_merge_takes_each_span_from_the_window_that_owns_its_centre_and_shows_a_duplicate_once():
    T, W = 200, 128  # windows [0, 128) and [72, 200); the boundary is the middle of the overlap, token 100
    ws = plan_windows(T, W)
    assert ws == [(0, 128), (72, 200)] and owned_ranges(ws, T) == [(0, 100), (100, 200)]
    cal = Calibration(temperature=1.0, validity_threshold=0.5, dup_iou=0.5)
    first = _pred([[10, 12], [95, 103], [120, 127]], [0.9, 0.8, 0.9], [0.1, 0.2, 0.3], 0.2)  # window-relative
    last = _pred([[22, 30], [25, 31], [40, 45]], [0.7, 0.9, 0.2], [0.4, 0.5, 0.6], 0.6)  # = tokens 94.., 97.., 112..
    merged = merge_windows([first, last], ws, T, cal, "p")
    shown = [(int(merged.spans[q, 0]), int(merged.spans[q, 1])) for q in merged.keep]
    # window 1's [120, 127] is centred in window 2's part: left out (window 2 sees it in its middle);
    # window 2's [94, 102] (centre 98) is centred in window 1's part: left out;
    # window 1's [95, 103] (centre 99, p 0.8) and window 2's [97, 103] (centre 100, p 0.9) are each their
    # owner's, but the same claim (IoU 7/9 > dup_iou): suppression over the merged set shows the more valid once
    assert shown == [(10, 12), (97, 103)]
    assert len(merged.spans) == 4  # owned queries: (10,12), (95,103) from window 1; (97,103), (112,117) from 2
    assert merged.u_seq == pytest.approx(0.5 * 0.2 + 0.5 * 0.6)  # owned-token-weighted: 100 and 100 tokens


def test_a_2000_token_answer_is_scored_in_windows_with_spans_to_its_end(scorer):
    answer = long_answer(scorer.tok, 2000)
    r = scorer.score("Tell me four facts.", response=answer)
    assert r.n_tokens >= 2000 and scorer.window == 128
    ws = plan_windows(r.n_tokens, scorer.window)
    assert r.windows == len(ws) >= 16
    last_lo = owned_ranges(ws, r.n_tokens)[-1][0]
    assert any(s.b >= last_lo for s in r.spans), "the last window's spans are shown"
    assert [(s.start, s.end) for s in r.spans] == sorted((s.start, s.end) for s in r.spans)
    for s in r.spans:
        assert answer[s.start:s.end] == s.text and s.text == s.text.strip() and 0 <= s.b <= s.e < r.n_tokens
    assert 0 <= r.u_seq <= 1


def test_a_short_answer_is_one_window_as_before(scorer):
    r = scorer.score("Who was Marie Curie?", response=PARTS[0])
    assert r.windows == 1 and r.n_tokens < scorer.window


def test_chunked_states_equal_one_pass_where_a_chunk_sees_the_whole_answer_before_it(scorer):
    chat, n_prompt = scorer._chat("Tell me four facts.")
    ids, _ = token_offsets(scorer.tok, long_answer(scorer.tok, 300))
    ctx = n_prompt + 200  # chunks of 100 tokens: [0,100) and [100,200) see all before them, [200,300) only 100
    assert chunk_plan(n_prompt, len(ids), ctx)[:3] == [(0, 0, 100), (0, 100, 200), (100, 200, 300)]
    one = extract_batch(scorer.model, scorer.tok, [chat], [ids], scorer.layers, torch.float32)[0]
    chunked = extract_long(scorer.model, scorer.tok, chat, ids, scorer.layers, torch.float32, ctx)
    assert chunked.h.shape == one.h.shape and chunked.token_ids.tolist() == ids
    torch.testing.assert_close(chunked.h[:200], one.h[:200], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(chunked.entropy[:200], one.entropy[:200], atol=1e-4, rtol=1e-4)
    assert (chunked.h[200:300] - one.h[200:300]).abs().max() > 1e-3  # the third chunk lost the answer's start


def test_an_answer_longer_than_the_backbone_context_is_scored_not_refused(scorer, monkeypatch):
    chat, n_prompt = scorer._chat("Tell me four facts.")
    answer = long_answer(scorer.tok, 600)
    monkeypatch.setattr(scorer, "max_context", n_prompt + 256)  # a small context: chunked passes
    r = scorer.score("Tell me four facts.", response=answer)
    assert r.n_tokens >= 600 and len(chunk_plan(n_prompt, r.n_tokens, scorer.max_context)) >= 5
    assert r.spans and r.timings.backbone_s > 0 and r.windows > 1
    # the prompt itself must leave room: a clear 422 before any model call
    monkeypatch.setattr(scorer, "max_context", n_prompt + 10)
    from spanuq import InputError

    with pytest.raises(InputError, match="shorten the prompt") as e:
        scorer.score("Tell me four facts.", response=answer)
    assert e.value.status == 422
