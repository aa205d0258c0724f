"""1-D span IoU / GIoU identities."""
import torch

from spanuq.model.span_ops import (
    generalized_span_iou,
    normalized_to_token_spans,
    pairwise_span_iou,
    span_cw_to_se,
    span_giou,
    span_iou,
    span_se_to_cw,
    token_spans_to_normalized,
)


def random_spans(n: int, gen: torch.Generator) -> torch.Tensor:
    return torch.rand(n, 2, generator=gen).sort(dim=-1).values


def test_iou_of_a_span_with_itself_is_one():
    a = random_spans(50, torch.Generator().manual_seed(0))
    torch.testing.assert_close(span_iou(a, a), torch.ones(50))
    torch.testing.assert_close(span_giou(a, a), torch.ones(50))


def test_giou_is_bounded_and_symmetric():
    g = torch.Generator().manual_seed(1)
    a, b = random_spans(500, g), random_spans(500, g)
    giou = span_giou(a, b)
    assert (giou >= -1).all() and (giou <= 1).all()
    torch.testing.assert_close(giou, span_giou(b, a))
    torch.testing.assert_close(span_iou(a, b), span_iou(b, a))
    assert (giou <= span_iou(a, b) + 1e-6).all()  # GIoU never exceeds IoU


def test_known_values():
    a = torch.tensor([0.0, 0.4])
    # overlap [0.2, 0.4] of union [0, 0.6]: IoU = 1/3, and the hull is the union so GIoU = IoU
    b = torch.tensor([0.2, 0.6])
    torch.testing.assert_close(span_iou(a, b), torch.tensor(1 / 3))
    torch.testing.assert_close(span_giou(a, b), torch.tensor(1 / 3))
    # disjoint [0, .4] and [.6, 1]: IoU 0, hull 1, union .8 -> GIoU = -0.2
    c = torch.tensor([0.6, 1.0])
    torch.testing.assert_close(span_iou(a, c), torch.tensor(0.0))
    torch.testing.assert_close(span_giou(a, c), torch.tensor(-0.2))


def test_giou_equals_iou_when_spans_overlap_and_is_negative_when_disjoint():
    g = torch.Generator().manual_seed(2)
    a, b = random_spans(1000, g), random_spans(1000, g)
    overlap = torch.minimum(a[:, 1], b[:, 1]) > torch.maximum(a[:, 0], b[:, 0])
    assert overlap.any() and (~overlap).any()
    torch.testing.assert_close(span_giou(a, b)[overlap], span_iou(a, b)[overlap])
    assert (span_giou(a, b)[~overlap] <= 0).all()
    # strictly separated spans: strictly negative
    gap = torch.maximum(a[:, 0], b[:, 0]) - torch.minimum(a[:, 1], b[:, 1]) > 1e-3
    assert (span_giou(a, b)[gap] < 0).all()


def test_pairwise_matrix_equals_elementwise():
    g = torch.Generator().manual_seed(3)
    a, b = random_spans(7, g), random_spans(5, g)
    G, I = generalized_span_iou(a, b), pairwise_span_iou(a, b)
    assert G.shape == (7, 5)
    for i in range(7):
        for j in range(5):
            torch.testing.assert_close(G[i, j], span_giou(a[i], b[j]))
            torch.testing.assert_close(I[i, j], span_iou(a[i], b[j]))


def test_conversions_round_trip():
    a = random_spans(20, torch.Generator().manual_seed(4))
    torch.testing.assert_close(span_cw_to_se(span_se_to_cw(a)), a)
    # token spans -> [b/T, (e+1)/T] -> token spans, for many lengths
    for T in (1, 7, 33, 301):
        b = torch.randint(0, T, (50,), generator=torch.Generator().manual_seed(T))
        e = b + torch.randint(0, 5, (50,), generator=torch.Generator().manual_seed(T + 1))
        tok = torch.stack([b, e.clamp(max=T - 1)], -1)
        assert torch.equal(normalized_to_token_spans(token_spans_to_normalized(tok, T), T), tok)


def test_duplicate_spans_are_suppressed_best_score_first():
    from spanuq.model.span_ops import suppress_duplicates

    spans = torch.tensor([[0.0, 4.0], [0.0, 5.0], [6.0, 9.0], [1.0, 4.0], [6.0, 7.0]])
    scores = torch.tensor([0.6, 0.9, 0.8, 0.7, 0.55])
    # [0,5] (0.9) wins over [0,4] (IoU 0.8) and [1,4] (IoU 0.6); [6,7] overlaps [6,9] by 1/3 only
    assert suppress_duplicates(spans, scores, iou_threshold=0.5) == [1, 2, 4]
    assert suppress_duplicates(spans, scores, iou_threshold=1.0) == [1, 2, 3, 0, 4]
    assert suppress_duplicates(torch.zeros(0, 2), torch.zeros(0)) == []
