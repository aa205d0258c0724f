"""HungarianMatcher finds the optimal assignment."""
import itertools

import pytest
import torch

from spanuq.model.matcher import HungarianMatcher


def random_case(B, N, sizes, seed):
    g = torch.Generator().manual_seed(seed)
    outputs = {
        "spans": torch.rand(B, N, 2, generator=g).sort(-1).values,
        "validity_logits": torch.randn(B, N, generator=g),
        "u": torch.rand(B, N, generator=g),
    }
    targets = [{"spans": torch.rand(k, 2, generator=g).sort(-1).values, "u": torch.rand(k, generator=g)}
               for k in sizes]
    return outputs, targets


def brute_force(C: torch.Tensor) -> float:
    N, K = C.shape
    return min(sum(float(C[p[j], j]) for j in range(K)) for p in itertools.permutations(range(N), K))


@pytest.mark.parametrize("seed", range(6))
def test_matches_brute_force_optimum(seed):
    matcher = HungarianMatcher(cost_span=1.0, cost_giou=1.0, cost_u=1.0, cost_val=1.0)
    outputs, targets = random_case(B=3, N=5, sizes=[1, 3, 5], seed=seed)
    costs = matcher.cost_matrix(outputs, targets)
    for (i, j), C, t in zip(matcher(outputs, targets), costs, targets):
        assert i.dtype == j.dtype == torch.int64
        assert len(i) == len(j) == len(t["spans"])
        assert len(set(i.tolist())) == len(i) and sorted(j.tolist()) == list(range(len(t["spans"])))
        assert abs(float(C[i, j].sum()) - brute_force(C)) < 1e-5


def test_cost_terms():
    # one query, one target: cost = L1 - GIoU + |û-u*| - log σ(l)
    outputs = {"spans": torch.tensor([[[0.1, 0.5]]]), "validity_logits": torch.tensor([[0.0]]), "u": torch.tensor([[0.7]])}
    targets = [{"spans": torch.tensor([[0.3, 0.5]]), "u": torch.tensor([0.2])}]
    C = HungarianMatcher(2.0, 3.0, 4.0, 5.0).cost_matrix(outputs, targets)[0]
    expected = 2.0 * 0.2 - 3.0 * 0.5 + 4.0 * 0.5 + 5.0 * torch.log(torch.tensor(2.0))
    torch.testing.assert_close(C[0, 0], expected)
    C_no_u = HungarianMatcher(2.0, 3.0, 4.0, 5.0).cost_matrix(outputs, targets, with_uncertainty=False)[0]
    torch.testing.assert_close(C_no_u[0, 0], expected - 4.0 * 0.5)


def test_examples_without_targets():
    matcher = HungarianMatcher()
    outputs, targets = random_case(B=3, N=4, sizes=[0, 2, 0], seed=0)
    idx = matcher(outputs, targets)
    assert [len(i) for i, _ in idx] == [0, 2, 0]
    outputs, targets = random_case(B=2, N=4, sizes=[0, 0], seed=1)
    assert all(len(i) == 0 and i.dtype == torch.int64 for i, _ in matcher(outputs, targets))
