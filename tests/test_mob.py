"""Mixture-of-Beta density, mean and precision against scipy."""
import numpy as np
import pytest
import torch
from scipy import stats

from spanuq.model.mob import MixtureOfBeta, mob_log_prob, mob_mean, mob_precision


@pytest.mark.parametrize("J", [1, 3])
def test_log_density_matches_scipy(J):
    g = torch.Generator().manual_seed(J)
    n = 64
    pi = torch.rand(n, J, generator=g, dtype=torch.float64).softmax(-1)
    alpha = 0.5 + 5 * torch.rand(n, J, generator=g, dtype=torch.float64)
    beta = 0.5 + 5 * torch.rand(n, J, generator=g, dtype=torch.float64)
    u = torch.rand(n, generator=g, dtype=torch.float64).clamp(1e-4, 1 - 1e-4)
    ours = mob_log_prob(u, pi, alpha, beta).numpy()
    ref = np.log(sum(pi[:, j].numpy() * stats.beta.pdf(u.numpy(), alpha[:, j].numpy(), beta[:, j].numpy())
                     for j in range(J)))
    np.testing.assert_allclose(ours, ref, rtol=1e-8, atol=1e-10)


def test_mean_and_precision_formulas():
    pi = torch.tensor([[0.2, 0.3, 0.5]])
    alpha = torch.tensor([[1.0, 2.0, 0.5]])
    beta = torch.tensor([[3.0, 2.0, 4.5]])
    # û = Σ π α/(α+β) = .2·.25 + .3·.5 + .5·.1 ; ν = Σ π(α+β) = .2·4 + .3·4 + .5·5
    torch.testing.assert_close(mob_mean(pi, alpha, beta), torch.tensor([0.25]))
    torch.testing.assert_close(mob_precision(pi, alpha, beta), torch.tensor([4.5]))
    # the mixture mean equals ∫ u p(u) du
    grid = torch.linspace(1e-6, 1 - 1e-6, 200001, dtype=torch.float64)
    dens = mob_log_prob(grid, pi.double().expand(len(grid), 3), alpha.double().expand(len(grid), 3),
                        beta.double().expand(len(grid), 3)).exp()
    assert abs(float(torch.trapezoid(grid * dens, grid)) - 0.25) < 1e-3


@pytest.mark.parametrize("J", [1, 3])
def test_head_outputs(J):
    head = MixtureOfBeta(16, n_components=J, alpha_min=0.5)
    out = head(torch.randn(4, 5, 16) * 10)
    assert out["pi"].shape == out["alpha"].shape == out["beta"].shape == (4, 5, J)
    torch.testing.assert_close(out["pi"].sum(-1), torch.ones(4, 5))
    assert (out["alpha"] >= 0.5).all() and (out["beta"] >= 0.5).all()
    assert ((out["u"] > 0) & (out["u"] < 1)).all()
    torch.testing.assert_close(out["u"], mob_mean(out["pi"], out["alpha"], out["beta"]))
    torch.testing.assert_close(out["nu"], mob_precision(out["pi"], out["alpha"], out["beta"]))
