"""The hot path's kernel matrices (gpdlm_cli/models/kernels.py, issue 21 item 5): ScaleKernel(RBF)
written in torch against gpytorch's own, values and gradients to 1e-10 in float64; other kernels go
through gpytorch; the collapsed bound's O(M^2) trace equals the O(M^2 N) one."""

from __future__ import annotations

import gpytorch
import pytest
import torch

from gpdlm_cli.models.kernels import dense_covariance, diagonal_covariance


def _kernel(ard: int | None, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    base = gpytorch.kernels.RBFKernel(ard_num_dims=ard).double()
    kernel = gpytorch.kernels.ScaleKernel(base).double()
    base.lengthscale = torch.rand(1, ard or 1, generator=g, dtype=torch.float64) + 0.5
    kernel.outputscale = torch.tensor(1.7, dtype=torch.float64)
    return kernel, g


@pytest.mark.parametrize("ard", [None, 4])
@pytest.mark.parametrize("pair", ["cross", "self", "same_tensor_twice"])
def test_rbf_values_and_gradients_equal_gpytorch(ard, pair):
    kernel, g = _kernel(ard)
    Z = torch.nn.Parameter(torch.randn(15, 4, generator=g, dtype=torch.float64))
    X = torch.randn(200, 4, generator=g, dtype=torch.float64) * 2 + 3  # far from the origin: the centring matters
    args = {"cross": (Z, X), "self": (Z,), "same_tensor_twice": (Z, Z)}[pair]
    G = torch.randn(15, args[-1].shape[0], generator=g, dtype=torch.float64)
    params = [Z, kernel.base_kernel.raw_lengthscale, kernel.raw_outputscale]
    ours = dense_covariance(kernel, *args)
    ref = kernel(*args).to_dense()
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-12)
    for a, b in zip(torch.autograd.grad((ours * G).sum(), params), torch.autograd.grad((ref * G).sum(), params)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(diagonal_covariance(kernel, X), kernel(X, diag=True), rtol=0, atol=0)


def test_other_kernels_go_through_gpytorch():
    """Matern (and anything that is not a plain ScaleKernel(RBF)), and batched inputs, are gpytorch's own
    matrices, exactly."""
    g = torch.Generator().manual_seed(1)
    kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=1.5)).double()
    Z, X = torch.randn(10, 3, generator=g, dtype=torch.float64), torch.randn(50, 3, generator=g, dtype=torch.float64)
    assert torch.equal(dense_covariance(kernel, Z, X), kernel(Z, X).to_dense())
    assert torch.equal(diagonal_covariance(kernel, X), kernel(X, diag=True))
    rbf, _ = _kernel(None)
    Xb = torch.randn(2, 50, 3, generator=g, dtype=torch.float64)  # batched inputs: gpytorch's broadcasting
    assert torch.equal(dense_covariance(rbf, Xb[:, :10], Xb), rbf(Xb[:, :10], Xb).to_dense())


def test_the_sparse_models_do_not_call_gpytorchs_rbf(monkeypatch):
    """SVGP's marginals and the collapsed models' factors compute the RBF themselves."""
    from gpdlm_cli.models import SparseVariationalGP
    from gpdlm_cli.models.collapsed import CollapsedSparseGP
    from gpdlm_cli.likelihoods import GaussianLikelihood

    kernel, g = _kernel(None)
    X, y = torch.randn(80, 2, generator=g, dtype=torch.float64), torch.randn(80, generator=g, dtype=torch.float64)

    def refuse(*a, **k):
        raise AssertionError("gpytorch's RBF forward was called on the hot path")

    monkeypatch.setattr(gpytorch.kernels.RBFKernel, "forward", refuse)
    svgp = SparseVariationalGP(X[:10].clone(), kernel, gpytorch.means.ZeroMean()).double()
    mu, var = svgp.marginals(X)
    assert torch.isfinite(mu).all() and (var > 0).all()
    sgpr = CollapsedSparseGP(X[:10].clone(), kernel, gpytorch.means.ZeroMean(), GaussianLikelihood().double())
    assert torch.isfinite(sgpr.log_marginal(X, y))


def test_collapsed_bound_trace_from_AAt_equals_the_direct_one():
    from gpdlm_cli.objectives.collapsed_elbo import collapsed_bound

    g = torch.Generator().manual_seed(2)
    A = torch.randn(3, 12, 90, generator=g, dtype=torch.float64) * 0.3  # batched: 3 members
    r, k = torch.randn(3, 90, generator=g, dtype=torch.float64), torch.rand(3, 90, generator=g, dtype=torch.float64)
    noise, beta = torch.tensor([0.3, 0.5, 1.1], dtype=torch.float64), torch.tensor([0.1, 1.0, 7.0], dtype=torch.float64)
    AAt = A @ A.mT
    L_B = torch.linalg.cholesky(torch.eye(12, dtype=torch.float64) + AAt / (beta * noise)[:, None, None])
    direct = collapsed_bound(A, r, k, noise, beta, L_B)
    via = collapsed_bound(A, r, k, noise, beta, L_B, AAt)
    for a, b in zip(direct, via):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_q_u_starts_where_gpytorch_starts_it_drawn_from_the_cpu_stream():
    """The first call initialises q(u~) as gpytorch's CholeskyVariationalDistribution does (m~ = 1e-3
    N(0, I) noise, L_S = I), bit for bit on the CPU at the same seed; the noise comes from the CPU's
    generator on every device, so a CUDA run starts at the CPU run's q(u) (tests/gpu checks the runs)."""
    import gpytorch

    from gpdlm_cli.models.sparse_variational import SparseVariationalGP

    def model():
        kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel()).double()
        return SparseVariationalGP(torch.randn(12, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1)),
                                   kernel, gpytorch.means.ZeroMean())

    ours, ref = model(), model()
    torch.manual_seed(5)
    ours._ensure_initialised()
    torch.manual_seed(5)
    strategy = ref.variational_strategy
    ref.q_u.initialize_variational_distribution(strategy.prior_distribution)
    assert torch.equal(ours.q_u.variational_mean, ref.q_u.variational_mean)
    assert torch.equal(ours.q_u.chol_variational_covar, ref.q_u.chol_variational_covar)
    assert 0 < ours.q_u.variational_mean.abs().max() < 1e-2  # the noise is there (1e-3 scale)
    assert bool(ours.variational_strategy.variational_params_initialized)
