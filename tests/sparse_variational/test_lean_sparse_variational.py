"""The sparse variational model's hand-written marginals and KL (issue 21, item 5) against gpytorch's
``VariationalStrategy`` and against a dense numpy computation: values and gradients to 1e-10 in float64."""

from __future__ import annotations

import gpytorch
import numpy as np
import pytest
import torch

from gpdlm_cli.models import SparseVariationalGP


def _model(seed: int = 0, N: int = 300, D: int = 3, M: int = 25):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, D, generator=g, dtype=torch.float64)
    kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=D)).double()
    kernel.base_kernel.lengthscale = torch.rand(D, generator=g, dtype=torch.float64) + 0.5
    kernel.outputscale = torch.tensor(1.7, dtype=torch.float64)
    model = SparseVariationalGP(x[:M].clone() + 0.01, kernel, gpytorch.means.ConstantMean().double()).double()
    with torch.no_grad():
        model.q_u.variational_mean.copy_(torch.randn(M, generator=g, dtype=torch.float64))
        model.q_u.chol_variational_covar.copy_(torch.randn(M, M, generator=g, dtype=torch.float64) * 0.2 + torch.eye(M))
        model.mean_module.constant.fill_(0.3)
    model.variational_strategy.variational_params_initialized.fill_(1)
    return model, x


@pytest.mark.parametrize("training", [True, False])
def test_marginals_and_kl_equal_gpytorch_values_and_gradients(training):
    model, x = _model()
    model.train(training)
    params = list(model.parameters())

    mu, var = model.marginals(x)
    kl = model.kl_divergence()
    ours = [mu, var, kl]
    grads = torch.autograd.grad((mu * 0.7).sum() + (var**2).sum() + 3 * kl, params, allow_unused=True)

    model.variational_strategy._clear_cache()
    q = model.variational_strategy(x)  # gpytorch's own path
    ref_kl = model.variational_strategy.kl_divergence()
    ref = [q.mean, q.variance, ref_kl]
    ref_grads = torch.autograd.grad(
        (q.mean * 0.7).sum() + (q.variance**2).sum() + 3 * ref_kl, params, allow_unused=True
    )

    for a, b in zip(ours, ref):
        assert torch.allclose(a, b, rtol=0, atol=1e-10), (a - b).abs().max()
    for a, b in zip(grads, ref_grads):
        if a is None or b is None:
            assert a is None and b is None
        else:
            assert torch.allclose(a, b, rtol=1e-10, atol=1e-10), (a - b).abs().max()


def test_marginals_and_kl_equal_a_dense_numpy_computation():
    """Unwhitened form: with u = L u~, m = L m~, V = L S L^T; mu = m(x) + K_xu K_uu^-1 m,
    var = K_xx + jitter + K_xu K_uu^-1 (V - K_uu) K_uu^-1 K_ux; KL(N(m, V) || N(0, K_uu))."""
    model, x = _model(seed=3)
    with torch.no_grad():
        mu, var = model.marginals(x)
        kl = float(model.kl_divergence())
        Z = model.inducing_points
        Kuu = model.covar_module(Z).to_dense().numpy() + model.jitter * np.eye(Z.shape[0])
        Kxu = model.covar_module(x, Z).to_dense().numpy()
        kxx = model.covar_module(x, diag=True).numpy()
        mt = model.q_u.variational_mean.numpy()
        Ls = np.tril(model.q_u.chol_variational_covar.numpy())
    L = np.linalg.cholesky(Kuu)
    m, V = L @ mt, L @ Ls @ Ls.T @ L.T
    W = np.linalg.solve(Kuu, Kxu.T)  # K_uu^-1 K_ux
    ref_mu = 0.3 + Kxu @ np.linalg.solve(Kuu, m)
    ref_var = kxx + model.jitter + np.einsum("ji,jk,ki->i", W, V - Kuu, W)
    M = len(m)
    _, logdet_K = np.linalg.slogdet(Kuu)
    _, logdet_V = np.linalg.slogdet(V)
    ref_kl = 0.5 * (np.trace(np.linalg.solve(Kuu, V)) + m @ np.linalg.solve(Kuu, m) - M + logdet_K - logdet_V)
    np.testing.assert_allclose(mu.numpy(), ref_mu, rtol=0, atol=1e-10)
    np.testing.assert_allclose(var.numpy(), ref_var, rtol=0, atol=1e-9)
    assert abs(kl - ref_kl) < 1e-9 * max(1.0, abs(ref_kl))


def test_first_call_initialises_q_like_gpytorch():
    """An uninitialised q(u) is set to gpytorch's start (m~ ~ N(0, 1e-6 I), S = I) at the first call."""
    torch.manual_seed(5)
    model, x = _model()
    model.variational_strategy.variational_params_initialized.fill_(0)
    model._q_ready = False
    torch.manual_seed(11)
    model.marginals(x)
    ours = model.q_u.variational_mean.detach().clone(), model.q_u.chol_variational_covar.detach().clone()
    other, _ = _model()
    other.variational_strategy.variational_params_initialized.fill_(0)
    torch.manual_seed(11)
    other.variational_strategy(x)
    assert torch.equal(ours[0], other.q_u.variational_mean.detach())
    assert torch.equal(ours[1], other.q_u.chol_variational_covar.detach())
    assert float(ours[0].abs().max()) < 0.01 and torch.equal(ours[1], torch.eye(ours[1].shape[0], dtype=torch.float64))


def test_the_hot_path_does_not_go_through_gpytorchs_strategy(monkeypatch):
    """marginals/kl_divergence are gpdlm's own torch code (issue 21, item 5): the strategy's call is never made."""
    import gpytorch.variational.variational_strategy as vs

    model, x = _model()

    def refuse(*a, **k):
        raise AssertionError("gpytorch's VariationalStrategy was called on the hot path")

    monkeypatch.setattr(vs.VariationalStrategy, "__call__", refuse)
    monkeypatch.setattr(vs.VariationalStrategy, "kl_divergence", refuse)
    mu, var = model.marginals(x)
    assert torch.isfinite(mu).all() and (var > 0).all() and torch.isfinite(model.kl_divergence())
