"""PIC++ (``model=pic``, gpdlm_cli/models/pic.py) against dense computations written here: the PIC
bound for any q(u) equals log p_PIC(y) - KL(q(u) || p_PIC(u | y)) (so the PIC marginal likelihood at the
optimal q), the predictive equals the GP conditional under the PIC prior with the test point added to
its block, one block is the exact GP, single-row blocks are FITC, and the one-block step's gradient is
unbiased for the full bound's. N = 60 rows in 3 uneven spatial blocks, M = 8, float64."""

from __future__ import annotations

import gpytorch
import numpy as np
import pytest
import torch

from gpdlm_cli.likelihoods.gaussian import GaussianLikelihood
from gpdlm_cli.models.pic import PartiallyIndependentGP
from gpdlm_cli.objectives.pic import PICBlockBound

N, D, M = 60, 2, 8
LENGTHSCALES = np.array([0.7, 1.3])
OUTPUTSCALE, NOISE, JITTER = 1.5, 0.05, 1e-6
SIZES = (15, 20, 25)


# ----- dense references (numpy) --------------------------------------------------------------------
def k_se(A, B):
    d = (A[:, None, :] - B[None, :, :]) / LENGTHSCALES
    return OUTPUTSCALE * np.exp(-0.5 * (d**2).sum(-1))


def low_rank(A, B, Z):
    """Q_AB = K_Az (K_zz + jitter I)^-1 K_zB (the model's jitter, so both sides use the same Q)."""
    return k_se(A, Z) @ np.linalg.solve(k_se(Z, Z) + JITTER * np.eye(len(Z)), k_se(Z, B))


def pic_prior(X, Z, blocks):
    """Q_ff with the exact K on every block's diagonal block."""
    C = low_rank(X, X, Z)
    for b in blocks:
        C[np.ix_(b, b)] = k_se(X[b], X[b])
    return C


def log_normal(y, C):
    L = np.linalg.cholesky(C)
    a = np.linalg.solve(L, y)
    return -0.5 * len(y) * np.log(2 * np.pi) - np.log(np.diag(L)).sum() - 0.5 * a @ a


def pic_posterior_u(X, y, Z, blocks):
    """p_PIC(u | y) = N(mu, Sigma): Sigma = (K_uu^-1 + P^T Lam^-1 P)^-1, mu = Sigma P^T Lam^-1 y,
    P = K_fu K_uu^-1, Lam = blockdiag(K_kk - Q_kk) + s2 I."""
    Kuu = k_se(Z, Z) + JITTER * np.eye(len(Z))
    P = np.linalg.solve(Kuu, k_se(Z, X)).T
    lam = pic_prior(X, Z, blocks) - low_rank(X, X, Z) + NOISE * np.eye(len(X))
    prec = np.linalg.inv(Kuu) + P.T @ np.linalg.solve(lam, P)
    Sigma = np.linalg.inv(prec)
    return Sigma @ P.T @ np.linalg.solve(lam, y), Sigma


def kl_gauss(m0, S0, m1, S1):
    S1i = np.linalg.inv(S1)
    d = m1 - m0
    return 0.5 * (np.trace(S1i @ S0) + d @ S1i @ d - len(m0) + np.linalg.slogdet(S1)[1] - np.linalg.slogdet(S0)[1])


def whiten(Z, mu, Sigma):
    """(m~, R) with u = L v, v ~ N(m~, R R^T), K_uu + jitter I = L L^T."""
    L = np.linalg.cholesky(k_se(Z, Z) + JITTER * np.eye(len(Z)))
    m = np.linalg.solve(L, mu)
    S = np.linalg.solve(L, np.linalg.solve(L, Sigma).T)
    return m, np.linalg.cholesky(0.5 * (S + S.T))


def unwhiten(Z, m, R):
    L = np.linalg.cholesky(k_se(Z, Z) + JITTER * np.eye(len(Z)))
    return L @ m, L @ R @ R.T @ L.T


def dense_conditional(X, y, Z, blocks, xs, k):
    """Mean and variance of f(xs) given y under the PIC prior of the rows X + [xs], xs in block k
    (k = None: in a block of its own)."""
    Xa = np.vstack([X, xs[None]])
    aug = [list(b) + ([len(X)] if i == k else []) for i, b in enumerate(blocks)]
    if k is None:
        aug.append([len(X)])
    C = pic_prior(Xa, Z, [np.array(b) for b in aug])
    c, Kf = C[-1, :-1], C[:-1, :-1] + NOISE * np.eye(len(X))
    return c @ np.linalg.solve(Kf, y), C[-1, -1] - c @ np.linalg.solve(Kf, c)


# ----- the model -----------------------------------------------------------------------------------
def _data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (N, D))
    y = np.sin(2 * X[:, 0]) + 0.5 * np.cos(X[:, 1]) + 0.2 * rng.standard_normal(N)
    Z = X[rng.choice(N, M, replace=False)] + 0.05 * rng.standard_normal((M, D))
    order = np.argsort(X[:, 0])  # spatial blocks: contiguous in x_1, uneven sizes
    blocks = np.split(order, np.cumsum(SIZES)[:-1])
    return X, y, Z, blocks


def _model(X, y, Z, blocks, assign=None):
    kernel = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=D)).double()
    kernel.base_kernel.lengthscale = torch.tensor(LENGTHSCALES)
    kernel.outputscale = torch.tensor(OUTPUTSCALE, dtype=torch.float64)
    likelihood = GaussianLikelihood().double()
    likelihood.gp.noise = torch.tensor(NOISE, dtype=torch.float64)
    model = PartiallyIndependentGP(torch.tensor(Z), kernel, likelihood, jitter=JITTER).double()
    t = torch.tensor
    model.set_train_data(t(X), t(y), [t(b) for b in blocks], assign)
    return model


def _set_q(model, m, R):
    with torch.no_grad():
        model.q_mean.copy_(torch.tensor(m))
        model.q_chol.copy_(torch.tensor(R) + torch.triu(torch.randn(M, M, dtype=torch.float64), 1))  # upper part unused


def _bound(model, X, y, blocks):
    with torch.no_grad():
        return float(model.bound(torch.tensor(X), torch.tensor(y), [torch.tensor(b) for b in blocks]))


def _random_q(seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(M), np.tril(0.3 * rng.standard_normal((M, M)), -1) + np.diag(rng.uniform(0.2, 1.0, M))


# ----- the bound and the marginal likelihood ------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1])
def test_bound_for_any_q_is_the_pic_evidence_minus_kl_to_the_pic_posterior(seed):
    X, y, Z, blocks = _data(seed)
    model = _model(X, y, Z, blocks)
    m, R = _random_q(seed + 10)
    _set_q(model, m, R)
    logp = log_normal(y, pic_prior(X, Z, blocks) + NOISE * np.eye(N))
    mu_post, S_post = pic_posterior_u(X, y, Z, blocks)
    mu_q, S_q = unwhiten(Z, m, R)
    expected = logp - kl_gauss(mu_q, S_q, mu_post, S_post)
    assert _bound(model, X, y, blocks) == pytest.approx(expected, rel=1e-9, abs=1e-7)
    assert expected < logp - 1.0  # a q far from the posterior: the bound is well below the evidence


def test_bound_at_the_pic_posterior_is_the_pic_marginal_likelihood():
    X, y, Z, blocks = _data(0)
    model = _model(X, y, Z, blocks)
    _set_q(model, *whiten(Z, *pic_posterior_u(X, y, Z, blocks)))
    logp = log_normal(y, pic_prior(X, Z, blocks) + NOISE * np.eye(N))
    assert _bound(model, X, y, blocks) == pytest.approx(logp, rel=1e-9, abs=1e-7)
    # PIC is neither the exact GP nor FITC here (the check can tell them apart)
    exact = log_normal(y, k_se(X, X) + NOISE * np.eye(N))
    Q = low_rank(X, X, Z)
    fitc = log_normal(y, Q + np.diag(np.diag(k_se(X, X) - Q)) + NOISE * np.eye(N))
    assert abs(logp - exact) > 0.5 and abs(logp - fitc) > 0.5, (logp, exact, fitc)


def test_one_block_of_all_rows_is_the_exact_gp():
    X, y, Z, _ = _data(1)
    blocks = [np.arange(N)]
    model = _model(X, y, Z, blocks, assign=lambda x: torch.zeros(x.shape[0], dtype=torch.long))
    _set_q(model, *whiten(Z, *pic_posterior_u(X, y, Z, blocks)))
    K = k_se(X, X) + NOISE * np.eye(N)
    assert _bound(model, X, y, blocks) == pytest.approx(log_normal(y, K), rel=1e-9, abs=1e-7)
    xs = np.random.default_rng(5).uniform(-2, 2, (7, D))
    Ks = k_se(xs, X)
    mean = Ks @ np.linalg.solve(K, y)
    var = OUTPUTSCALE - np.einsum("ij,ji->i", Ks, np.linalg.solve(K, Ks.T))
    with torch.no_grad():
        mu, v = model.marginals(torch.tensor(xs))
    np.testing.assert_allclose(mu.numpy(), mean, rtol=0, atol=1e-8)
    np.testing.assert_allclose(v.numpy(), var, rtol=0, atol=1e-8)


def test_single_row_blocks_are_fitc_and_a_blockless_test_point_predicts_as_fitc():
    X, y, Z, _ = _data(2)
    blocks = [np.array([i]) for i in range(N)]
    model = _model(X, y, Z, blocks, assign=lambda x: torch.full((x.shape[0],), -1, dtype=torch.long))
    _set_q(model, *whiten(Z, *pic_posterior_u(X, y, Z, blocks)))
    Q = low_rank(X, X, Z)
    C = Q + np.diag(np.diag(k_se(X, X) - Q)) + NOISE * np.eye(N)  # FITC (Snelson & Ghahramani 2006)
    assert _bound(model, X, y, blocks) == pytest.approx(log_normal(y, C), rel=1e-9, abs=1e-7)
    xs = np.random.default_rng(6).uniform(-2, 2, (7, D))
    Qs = low_rank(xs, X, Z)
    mean = Qs @ np.linalg.solve(C, y)
    var = OUTPUTSCALE - np.einsum("ij,ji->i", Qs, np.linalg.solve(C, Qs.T))
    with torch.no_grad():
        mu, v = model.marginals(torch.tensor(xs))
    np.testing.assert_allclose(mu.numpy(), mean, rtol=0, atol=1e-8)
    np.testing.assert_allclose(v.numpy(), var, rtol=0, atol=1e-8)


# ----- the predictive ------------------------------------------------------------------------------
def test_predictive_is_the_gp_conditional_under_the_pic_prior_with_the_point_in_its_block():
    X, y, Z, blocks = _data(3)
    rng = np.random.default_rng(7)
    xs = rng.uniform(-2, 2, (9, D))
    labels = np.array([0, 1, 2, 0, 1, 2, -1, 2, 0])  # -1: no block (x_* in a block of its own)
    model = _model(X, y, Z, blocks)
    _set_q(model, *whiten(Z, *pic_posterior_u(X, y, Z, blocks)))
    with torch.no_grad():
        mu, var = model.predict(torch.tensor(xs), torch.tensor(labels))
    ref = [dense_conditional(X, y, Z, blocks, xs[i], None if k < 0 else k) for i, k in enumerate(labels)]
    np.testing.assert_allclose(mu.numpy(), [r[0] for r in ref], rtol=0, atol=1e-8)
    np.testing.assert_allclose(var.numpy(), [r[1] for r in ref], rtol=0, atol=1e-8)
    # the block's own data matter: the same points predicted without a block differ
    with torch.no_grad():
        mu_fitc, _ = model.predict(torch.tensor(xs), torch.full((9,), -1))
    assert (mu - mu_fitc)[labels >= 0].abs().max() > 1e-2


def test_predictive_with_any_q_integrates_the_block_conditional_over_q():
    """mu = E_q[E[f_* | u, y_k]], var = E_q[Var] + Var_q[E]: by Monte Carlo over u ~ q (20,000 draws,
    fixed seed), within 5 standard errors for the mean and 2% for the variance."""
    X, y, Z, blocks = _data(4)
    xs = np.random.default_rng(8).uniform(-2, 2, (4, D))
    labels = np.array([0, 1, 2, 1])
    model = _model(X, y, Z, blocks)
    m, R = _random_q(3)
    _set_q(model, m, R)
    with torch.no_grad():
        mu, var = model.predict(torch.tensor(xs), torch.tensor(labels))
    mu_q, S_q = unwhiten(Z, m, R)
    u = np.random.default_rng(9).multivariate_normal(mu_q, S_q, size=20000)
    Kuu = k_se(Z, Z) + JITTER * np.eye(M)
    for i, k in enumerate(labels):
        b = blocks[k]
        xk = X[b]
        lam = k_se(xk, xk) - low_rank(xk, xk, Z) + NOISE * np.eye(len(b))
        c = k_se(xk, xs[i : i + 1])[:, 0] - low_rank(xk, xs[i : i + 1], Z)[:, 0]
        p_star = np.linalg.solve(Kuu, k_se(Z, xs[i : i + 1]))[:, 0]
        p_k = np.linalg.solve(Kuu, k_se(Z, xk)).T
        g = np.linalg.solve(lam, c)
        means = u @ p_star + (y[b][None, :] - u @ p_k.T) @ g  # E[f_* | u, y_k] per draw
        cond_var = OUTPUTSCALE - low_rank(xs[i : i + 1], xs[i : i + 1], Z)[0, 0] - c @ g
        assert abs(float(mu[i]) - means.mean()) < 5 * means.std() / np.sqrt(len(means))
        assert float(var[i]) == pytest.approx(cond_var + means.var(), rel=0.02)


# ----- the stochastic gradient ----------------------------------------------------------------------
def _dense_bound_torch(model, X, y, blocks):
    """L(q) = log p_PIC(y) - KL(q || p_PIC(u | y)) as a dense torch function of the model's
    parameters (its own RBF, solves and log-determinants; no production code) for autograd."""
    ls = model.covar_module.base_kernel.lengthscale.squeeze(0)
    os_ = model.covar_module.outputscale
    s2 = model.likelihood.noise

    def k(A, B):
        d = (A[:, None, :] - B[None, :, :]) / ls
        return os_ * torch.exp(-0.5 * (d**2).sum(-1))

    x, yt, Z = torch.tensor(X), torch.tensor(y), model.Z
    Kuu = k(Z, Z) + JITTER * torch.eye(M, dtype=torch.float64)
    Kuf = k(Z, x)
    Q = Kuf.T @ torch.linalg.solve(Kuu, Kuf)
    mask = torch.zeros(N, N, dtype=torch.bool)
    for b in blocks:
        mask[np.ix_(b, b)] = True
    C = torch.where(mask, k(x, x), Q) + s2 * torch.eye(N, dtype=torch.float64)
    logp = -0.5 * N * np.log(2 * np.pi) - 0.5 * torch.logdet(C) - 0.5 * yt @ torch.linalg.solve(C, yt)
    lam = torch.where(mask, k(x, x) - Q, torch.zeros_like(Q)) + s2 * torch.eye(N, dtype=torch.float64)
    P = torch.linalg.solve(Kuu, Kuf).T
    Sigma = torch.linalg.inv(torch.linalg.inv(Kuu) + P.T @ torch.linalg.solve(lam, P))
    mu_post = Sigma @ P.T @ torch.linalg.solve(lam, yt)
    L = torch.linalg.cholesky(Kuu)
    R = torch.tril(model.q_chol)
    mu_q, S_q = L @ model.q_mean, L @ R @ R.T @ L.T
    Si = torch.linalg.inv(Sigma)
    d = mu_post - mu_q
    kl = 0.5 * (torch.trace(Si @ S_q) + d @ Si @ d - M + torch.logdet(Sigma) - torch.logdet(S_q))
    return logp - kl


def test_one_block_gradient_is_unbiased_for_the_full_bound():
    """The step's objective -(p F_k - KL)/N with k uniform over the p = 3 blocks: its mean over the
    blocks equals the gradient of -L/N (dense, autograd) to 1e-9 in every parameter, and a
    Monte Carlo average over 600 uniform draws (seed 0) is within 4.5 standard errors of it."""
    X, y, Z, blocks = _data(5)
    model = _model(X, y, Z, blocks)
    _set_q(model, *_random_q(4))
    params = [p for p in model.parameters() if p.requires_grad]
    full = torch.autograd.grad(-_dense_bound_torch(model, X, y, blocks) / N, params)
    full = torch.cat([g.reshape(-1) for g in full])
    objective = PICBlockBound(model, N, len(blocks))
    per_block = []
    for b in blocks:
        bt = torch.tensor(b)
        g = torch.autograd.grad(objective(torch.tensor(X)[bt], torch.tensor(y)[bt]), params, allow_unused=True)
        per_block.append(
            torch.cat([(torch.zeros_like(p) if gi is None else gi).reshape(-1) for p, gi in zip(params, g)])
        )
    G = torch.stack(per_block)
    np.testing.assert_allclose(G.mean(0).numpy(), full.numpy(), rtol=1e-7, atol=1e-9)
    assert (G - full).abs().max() > 1e-2  # one block alone is not the full gradient
    draws = torch.randint(len(blocks), (600,), generator=torch.Generator().manual_seed(0))
    sample = G[draws]
    se = sample.std(0) / np.sqrt(len(draws))
    moving = se > 1e-12
    assert moving.sum() > 50
    assert ((sample.mean(0) - full).abs()[moving] <= 4.5 * se[moving]).all()
