"""The Matern kernels on the hot path (gpdlm_cli/models/kernels.py, issue 47 item 4): ScaleKernel(Matern
nu = 1/2, 3/2, 5/2) computed with a hand-written backward, against gpytorch's MaternKernel: values and the
gradients in the inputs, lengthscales and outputscale to 1e-12 in float64, with and without ARD; torch's
gradcheck; the sparse models no longer call gpytorch's Matern."""

from __future__ import annotations

import gpytorch
import pytest
import torch

from gpdlm_cli.models import kernels as K
from gpdlm_cli.models.kernels import dense_covariance, diagonal_covariance

NUS = [0.5, 1.5, 2.5]


def _kernel(nu: float, ard: int | None, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    base = gpytorch.kernels.MaternKernel(nu=nu, ard_num_dims=ard).double()
    kernel = gpytorch.kernels.ScaleKernel(base).double()
    base.lengthscale = torch.rand(1, ard or 1, generator=g, dtype=torch.float64) + 0.5
    kernel.outputscale = torch.tensor(1.7, dtype=torch.float64)
    return kernel, g


@pytest.mark.parametrize("nu", NUS)
@pytest.mark.parametrize("ard", [None, 4])
@pytest.mark.parametrize("pair", ["cross", "self", "same_tensor_twice"])
def test_matern_values_and_gradients_equal_gpytorch(nu, ard, pair):
    kernel, g = _kernel(nu, ard)
    assert K._lean(kernel) == nu
    Z = torch.nn.Parameter(torch.randn(15, 4, generator=g, dtype=torch.float64))
    X = torch.randn(200, 4, generator=g, dtype=torch.float64) * 2 + 3  # far from the origin: the centring matters
    args = {"cross": (Z, X), "self": (Z,), "same_tensor_twice": (Z, Z)}[pair]
    G = torch.randn(15, args[-1].shape[0], generator=g, dtype=torch.float64)
    if pair != "cross":
        # K(Z, Z)'s diagonal is s whatever Z and l are; gpytorch's gradient path computes it as s f(r) with
        # r = sqrt(rounding) ~ 1e-8 (nu = 1/2: ~1e-8 off, with a matching spurious gradient); compare the rest
        G.fill_diagonal_(0.0)
    params = [Z, kernel.base_kernel.raw_lengthscale, kernel.raw_outputscale]
    ours = dense_covariance(kernel, *args)
    with torch.no_grad():  # gpytorch's exact-diagonal path for the values
        ref_values = kernel(*[a.detach() for a in args]).to_dense()
    torch.testing.assert_close(ours, ref_values, rtol=0, atol=1e-12)
    if pair != "cross":
        assert torch.equal(ours.diagonal(), kernel.outputscale.detach().expand(15))
    ref = kernel(*args).to_dense()
    for a, b in zip(torch.autograd.grad((ours * G).sum(), params), torch.autograd.grad((ref * G).sum(), params)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    # the outputscale's gradient with the diagonal included (it is s there, its derivative 1)
    Gd = torch.randn(15, args[-1].shape[0], generator=g, dtype=torch.float64)
    ours_s = torch.autograd.grad((dense_covariance(kernel, *args) * Gd).sum(), kernel.raw_outputscale)[0]
    with torch.no_grad():
        ref_s = (ref_values * Gd).sum() / kernel.outputscale * torch.sigmoid(kernel.raw_outputscale)
    torch.testing.assert_close(ours_s, ref_s, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(diagonal_covariance(kernel, X), kernel(X, diag=True), rtol=0, atol=0)


@pytest.mark.parametrize("nu", NUS)
def test_matern_gradcheck(nu):
    g = torch.Generator().manual_seed(3)
    a = torch.randn(5, 3, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(7, 3, generator=g, dtype=torch.float64, requires_grad=True)
    s = torch.tensor(0.8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a_, b_, s_: K._ScaledMatern.apply(a_, b_, s_, nu), (a, b, s))
    # the self case (b is a): the diagonal's zero distance, smooth off it
    assert torch.autograd.gradcheck(lambda a_, s_: K._ScaledMatern.apply(a_, a_, s_, nu), (a, s))


@pytest.mark.parametrize("nu", NUS)
def test_matern_is_not_batched_or_wrapped_here(nu):
    """Batched inputs and kernels with active_dims go through gpytorch, exactly as before."""
    kernel, g = _kernel(nu, None)
    Xb = torch.randn(2, 50, 3, generator=g, dtype=torch.float64)
    assert torch.equal(dense_covariance(kernel, Xb[:, :10], Xb), kernel(Xb[:, :10], Xb).to_dense())
    wrapped = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=nu, active_dims=[0, 1])).double()
    assert K._lean(wrapped) is None


@pytest.mark.parametrize("nu", NUS)
def test_the_sparse_models_do_not_call_gpytorchs_matern(monkeypatch, nu):
    from gpdlm_cli.likelihoods import GaussianLikelihood
    from gpdlm_cli.models import SparseVariationalGP
    from gpdlm_cli.models.collapsed import CollapsedSparseGP

    kernel, g = _kernel(nu, 2)
    X, y = torch.randn(80, 2, generator=g, dtype=torch.float64), torch.randn(80, generator=g, dtype=torch.float64)

    def refuse(*a, **k):
        raise AssertionError("gpytorch's Matern forward was called on the hot path")

    monkeypatch.setattr(gpytorch.kernels.MaternKernel, "forward", refuse)
    svgp = SparseVariationalGP(X[:10].clone(), kernel, gpytorch.means.ZeroMean()).double()
    mu, var = svgp.marginals(X)
    assert torch.isfinite(mu).all() and (var > 0).all()
    sgpr = CollapsedSparseGP(X[:10].clone(), kernel, gpytorch.means.ZeroMean(), GaussianLikelihood().double())
    assert torch.isfinite(sgpr.log_marginal(X, y))
