"""Square-loss DLM (DLM paper, Sec. 2): the closed-form optimum in m against a dense numpy solve
and against numerical minimisation of gpdlm's own objective; the predictive-noise fit against a
dense grid search."""

from __future__ import annotations

import gpytorch
import numpy as np
import pytest
import torch
from gpdlm_math_ref import log_normal, make_svgp, rbf

from gpdlm_cli.objectives import SquareLossDLM, fit_predictive_noise, optimal_whitened_mean

N, M, D = 40, 6, 2
OUTPUTSCALE, LENGTHSCALE = 1.2, 1.1
JITTER = 1e-8


def _problem(seed, const_mean=None):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(N, D))
    Z = rng.uniform(-2, 2, size=(M, D))
    y = np.cos(X[:, 0]) + 0.4 * X[:, 1] + rng.normal(scale=0.2, size=N)
    mean = None
    if const_mean is not None:
        mean = gpytorch.means.ConstantMean().double()
        mean.constant.data.fill_(const_mean)
    model = make_svgp(Z, OUTPUTSCALE, LENGTHSCALE, JITTER, rng.normal(size=M), mean=mean)
    return X, Z, y, model


def _dense_optimum(X, Z, r, beta):
    """argmin_m 1/2 |K_fu K_uu^-1 m - r|^2 + beta/2 m^T K_uu^-1 m. Setting the gradient to zero and
    writing m = K_uu a: (K_uf K_fu + beta K_uu) a = K_uf r. Returned in whitened coordinates
    m~ = L^-1 m, L = chol(K_uu) (K_uu with the model's jitter, the prior gpdlm uses)."""
    Kuu = rbf(Z, Z, OUTPUTSCALE, LENGTHSCALE) + JITTER * np.eye(len(Z))
    Kfu = rbf(X, Z, OUTPUTSCALE, LENGTHSCALE)
    a = np.linalg.solve(Kfu.T @ Kfu + beta * Kuu, Kfu.T @ r)
    m = Kuu @ a
    return np.linalg.solve(np.linalg.cholesky(Kuu), m), m


@pytest.mark.parametrize("beta", [0.5, 2.0])
@pytest.mark.parametrize("const_mean", [None, 0.7])
def test_optimal_whitened_mean_matches_dense_solution(beta, const_mean):
    X, Z, y, model = _problem(0, const_mean)
    got = optimal_whitened_mean(model, torch.as_tensor(X), torch.as_tensor(y), beta).numpy()
    r = y - (0.0 if const_mean is None else const_mean)
    ref, m = _dense_optimum(X, Z, r, beta)
    np.testing.assert_allclose(got, ref, rtol=1e-7, atol=1e-8)
    # first-order optimality of the *unwhitened* problem at the reference, checked directly
    Kuu = rbf(Z, Z, OUTPUTSCALE, LENGTHSCALE) + JITTER * np.eye(M)
    Kfu = rbf(X, Z, OUTPUTSCALE, LENGTHSCALE)
    Kinv_m = np.linalg.solve(Kuu, m)
    grad = np.linalg.solve(Kuu, Kfu.T @ (Kfu @ Kinv_m - r)) + beta * Kinv_m
    assert np.abs(grad).max() < 1e-6 * np.abs(Kfu.T @ r).max()


@pytest.mark.parametrize("beta", [0.5, 2.0])
def test_optimal_whitened_mean_minimises_the_objective(beta):
    """LBFGS on SquareLossDLM w.r.t. the variational mean alone lands on optimal_whitened_mean."""
    X, Z, y, model = _problem(1, const_mean=-0.3)
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y)
    obj = SquareLossDLM(model, None, None, N, beta)
    star = optimal_whitened_mean(model, Xt, yt, beta)

    vm = model.q_u.variational_mean
    start = vm.detach().clone()
    assert (start - star).abs().max() > 0.1  # the optimiser has somewhere to go
    opt = torch.optim.LBFGS(
        [vm],
        lr=1.0,
        max_iter=200,
        tolerance_grad=1e-13,
        tolerance_change=1e-16,
        history_size=20,
        line_search_fn="strong_wolfe",
    )

    def closure():
        opt.zero_grad()
        loss = obj(Xt, yt)
        loss.backward()
        return loss

    opt.step(closure)  # a quadratic in M = 6 unknowns: ~20 evaluations
    np.testing.assert_allclose(vm.detach().numpy(), star.numpy(), rtol=1e-6, atol=1e-7)

    # and it is the minimum: the objective at star is below the objective at perturbed points
    with torch.no_grad():
        vm.copy_(star)
        f_star = obj(Xt, yt).item()
        rng = np.random.default_rng(2)
        for _ in range(5):
            vm.copy_(star + 1e-3 * torch.as_tensor(rng.normal(size=M)))
            assert obj(Xt, yt).item() > f_star


def test_square_loss_objective_value_matches_dense():
    X, Z, y, model = _problem(3)
    beta = 0.8
    got = SquareLossDLM(model, None, None, N, beta)(torch.as_tensor(X), torch.as_tensor(y)).item()
    Kuu = rbf(Z, Z, OUTPUTSCALE, LENGTHSCALE) + JITTER * np.eye(M)
    Kfu = rbf(X, Z, OUTPUTSCALE, LENGTHSCALE)
    m = np.linalg.cholesky(Kuu) @ model.q_u.variational_mean.detach().numpy()
    mu = Kfu @ np.linalg.solve(Kuu, m)
    ref = (0.5 * ((mu - y) ** 2).sum() + 0.5 * beta * m @ np.linalg.solve(Kuu, m)) / N
    assert got == pytest.approx(ref, rel=1e-9)


def _grid_noise(mu, var, y):
    log_s2 = np.linspace(-12, 6, 60_001)
    s2 = np.exp(log_s2)
    ll = log_normal(y[None, :], mu[None, :], var[None, :] + s2[:, None]).sum(1)
    i = int(np.argmax(ll))
    return s2[i], ll[i], log_s2[1] - log_s2[0]


def _ll(mu, var, y, s2):
    return log_normal(y, mu, var + s2).sum()


@pytest.mark.parametrize("case", ["constant_var", "varying_var", "one_large_residual"])
def test_fit_predictive_noise_maximises_likelihood(case):
    rng = np.random.default_rng(4)
    n = 50
    mu = rng.normal(size=n)
    if case == "constant_var":  # sq_dlm's own use: var_i = K_ii, the prior variance
        var = np.full(n, 0.3)
        y = mu + rng.normal(scale=1.1, size=n)
    elif case == "varying_var":
        var = rng.uniform(0.01, 1.0, size=n)
        y = mu + rng.normal(scale=0.7, size=n)
    else:
        # heteroscedastic var and one dominant residual: the optimum s2 is ~ that residual^2, far
        # above mean residual^2
        var = np.full(n, 1e4)
        var[0] = 1e-3
        y = mu.copy()
        y[0] += 10.0
    s2 = fit_predictive_noise(torch.as_tensor(mu), torch.as_tensor(var), torch.as_tensor(y))
    s2_grid, ll_grid, step = _grid_noise(mu, var, y)
    assert _ll(mu, var, y, s2) >= ll_grid - 1e-9
    assert abs(np.log(s2) - np.log(s2_grid)) <= 2 * step
    # stationarity: d/ds2 sum log N(y|mu, var+s2) = 1/2 sum ((y-mu)^2 - s) / s^2 = 0
    s = var + s2
    assert abs(0.5 * (((y - mu) ** 2 - s) / s**2).sum()) < 1e-4 * (0.5 / s**2 * (y - mu) ** 2).sum()
