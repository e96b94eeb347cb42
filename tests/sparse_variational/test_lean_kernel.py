"""The hot path's kernel matrices (gpdlm_cli/models/kernels.py, issue 21 item 5): ScaleKernel(RBF)
written in torch against gpytorch's own, values and gradients to 1e-10 in float64; other kernels go
through gpytorch; the collapsed bound's O(M^2) trace equals the O(M^2 N) one."""

from __future__ import annotations

import math

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
    """Anything that is not a plain ScaleKernel(RBF) or ScaleKernel(Matern) (tests/kernels/test_lean_matern.py),
    and batched inputs, are gpytorch's own matrices, exactly."""
    g = torch.Generator().manual_seed(1)
    kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.PeriodicKernel()).double()
    Z, X = torch.randn(10, 3, generator=g, dtype=torch.float64), torch.randn(50, 3, generator=g, dtype=torch.float64)
    assert torch.equal(dense_covariance(kernel, Z, X), kernel(Z, X).to_dense())
    assert torch.equal(diagonal_covariance(kernel, X), kernel(X, diag=True))
    rbf, _ = _kernel(None)
    Xb = torch.randn(2, 50, 3, generator=g, dtype=torch.float64)  # batched inputs: gpytorch's broadcasting
    assert torch.equal(dense_covariance(rbf, Xb[:, :10], Xb), rbf(Xb[:, :10], Xb).to_dense())


def test_the_sparse_models_do_not_call_gpytorchs_rbf(monkeypatch):
    """SVGP's marginals and the collapsed models' factors compute the RBF themselves."""
    from gpdlm_cli.likelihoods import GaussianLikelihood
    from gpdlm_cli.models import SparseVariationalGP
    from gpdlm_cli.models.collapsed import CollapsedSparseGP

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


def test_collapsed_bound_from_its_gram_statistics_equals_the_direct_formula():
    """``collapsed_bound`` works from A A^T, A r, |r|^2 and sum_i k_i alone (|r - A^T m|^2 expanded,
    tr(A^T S A) = sum(S o A A^T)); here against the formula evaluated directly on A, batched."""
    from gpdlm_cli.objectives.collapsed_elbo import collapsed_bound

    g = torch.Generator().manual_seed(2)
    A = torch.randn(3, 12, 90, generator=g, dtype=torch.float64) * 0.3  # batched: 3 members
    r, k = torch.randn(3, 90, generator=g, dtype=torch.float64), torch.rand(3, 90, generator=g, dtype=torch.float64)
    noise, beta = torch.tensor([0.3, 0.5, 1.1], dtype=torch.float64), torch.tensor([0.1, 1.0, 7.0], dtype=torch.float64)
    bs2 = (beta * noise)[:, None, None]
    B = torch.eye(12, dtype=torch.float64) + A @ A.mT / bs2
    L_B = torch.linalg.cholesky(B)
    value, m, S = collapsed_bound(A, r, k, noise, beta, L_B)
    m_ref = torch.linalg.solve(B, A @ r.unsqueeze(-1)).squeeze(-1) / bs2[..., 0]
    S_ref = torch.linalg.inv(B)
    resid = r - (A.mT @ m_ref.unsqueeze(-1)).squeeze(-1)
    trace = torch.einsum("bmn,bmk,bkn->b", A, S_ref, A)
    n, M = 90, 12
    expected = (
        -0.5 * n * math.log(2 * math.pi)
        - 0.5 * n * noise.log()
        - ((resid**2).sum(-1) + trace + k.sum(-1)) / (2 * noise)
    )
    kl = 0.5 * (torch.diagonal(S_ref, dim1=-2, dim2=-1).sum(-1) + (m_ref**2).sum(-1) - M - torch.logdet(S_ref))
    torch.testing.assert_close(value, expected - beta * kl, rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(m, m_ref, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(S, S_ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("batch", [(), (3,)])
def test_whitened_gram_values_and_gradients_equal_autograd(batch):
    """``linalg.whitened_gram``'s hand-written backward against autograd through the plain computation
    (A = L^{-1} K_uf, A A^T, A r) in L, K_uf and r, to 1e-10; and torch's gradcheck on a small case."""
    from gpdlm_cli.models.linalg import whitened_gram

    g = torch.Generator().manual_seed(5)
    M, N = 9, 70
    X = torch.randn(*batch, M, M, generator=g, dtype=torch.float64)
    L = torch.linalg.cholesky(X @ X.mT + M * torch.eye(M, dtype=torch.float64)).requires_grad_()
    K = torch.randn(*batch, M, N, generator=g, dtype=torch.float64, requires_grad=True)
    r = torch.randn(*batch, N, generator=g, dtype=torch.float64, requires_grad=True)
    G1 = torch.randn(*batch, M, M, generator=g, dtype=torch.float64)
    G2 = torch.randn(*batch, M, generator=g, dtype=torch.float64)
    AAt, Ar = whitened_gram(L, K, r)
    A = torch.linalg.solve_triangular(L, K, upper=False)
    AAt_ref, Ar_ref = A @ A.mT, (A @ r.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(AAt, AAt_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(Ar, Ar_ref, rtol=1e-12, atol=1e-12)
    ours = torch.autograd.grad((AAt * G1).sum() + (Ar * G2).sum(), [L, K, r])
    ref = torch.autograd.grad((AAt_ref * G1).sum() + (Ar_ref * G2).sum(), [L, K, r])
    for a, b in zip(ours, ref):
        torch.testing.assert_close(
            a.tril() if a.shape == L.shape else a, b.tril() if b.shape == L.shape else b, rtol=1e-10, atol=1e-12
        )
    small = (
        L[..., :3, :3].detach().clone().requires_grad_(),
        K[..., :3, :5].detach().clone().requires_grad_(),
        r[..., :5].detach().clone().requires_grad_(),
    )
    assert torch.autograd.gradcheck(lambda L_, K_, r_: whitened_gram(L_.tril(), K_, r_), small)


def test_q_u_starts_where_gpytorch_starts_it_drawn_from_the_cpu_stream():
    """The first call initialises q(u~) as gpytorch's CholeskyVariationalDistribution does (m~ = 1e-3
    N(0, I) noise, L_S = I), bit for bit on the CPU at the same seed; the noise comes from the CPU's
    generator on every device, so a CUDA run starts at the CPU run's q(u) (tests/gpu checks the runs)."""
    import gpytorch

    from gpdlm_cli.models.sparse_variational import SparseVariationalGP

    def model():
        kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel()).double()
        return SparseVariationalGP(
            torch.randn(12, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1)),
            kernel,
            gpytorch.means.ZeroMean(),
        )

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


@pytest.mark.parametrize("batch", [(), (2,)])
def test_whitened_marginal_updates_equal_gpytorchs(batch):
    """``linalg.whitened_marginal_updates`` against gpytorch's ``ComputePredictiveUpdates`` (the same
    numbers, another layout): values to 1e-12 and gradients in L, K_uf, S - I and m~ to 1e-10."""
    from gpytorch.variational.variational_strategy import ComputePredictiveUpdates

    from gpdlm_cli.models.linalg import whitened_marginal_updates

    g = torch.Generator().manual_seed(7)
    M, N = 8, 50
    X = torch.randn(*batch, M, M, generator=g, dtype=torch.float64)
    L = torch.linalg.cholesky(X @ X.mT + M * torch.eye(M, dtype=torch.float64)).requires_grad_()
    K = torch.randn(*batch, M, N, generator=g, dtype=torch.float64, requires_grad=True)
    L_S = torch.randn(*batch, M, M, generator=g, dtype=torch.float64).tril() * 0.3 + torch.eye(M, dtype=torch.float64)
    middle = (L_S @ L_S.mT - torch.eye(M, dtype=torch.float64)).requires_grad_()
    m = torch.randn(*batch, M, generator=g, dtype=torch.float64, requires_grad=True)
    G1, G2 = (
        torch.randn(*batch, N, generator=g, dtype=torch.float64),
        torch.randn(*batch, N, generator=g, dtype=torch.float64),
    )
    ours = whitened_marginal_updates(L, K, middle, m)
    theirs = ComputePredictiveUpdates.apply(L, K, middle, m)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    go = torch.autograd.grad((ours[0] * G1).sum() + (ours[1] * G2).sum(), [L, K, middle, m])
    gt = torch.autograd.grad((theirs[0] * G1).sum() + (theirs[1] * G2).sum(), [L, K, middle, m])
    for a, b in zip(go, gt):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    A = torch.linalg.solve_triangular(L, K, upper=False)  # and the plain formula
    torch.testing.assert_close(ours[1], (A * (middle @ A)).sum(-2), rtol=1e-12, atol=1e-12)
