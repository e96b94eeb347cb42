"""The gamma family of test conditionals (Prop. 1) and the r-sample predictive (Sec. 4.2), against
dense numpy computations: gamma = 0 is the exact GP posterior with the finite kernel on the test
point's k-means cell; gamma = 1 is N(phi_*^T s, 0); integrating s ~ p(s | y_k, theta) gives the
gamma = 0 moments for every gamma (marginal consistency, Monte Carlo within 5 standard errors)."""

from __future__ import annotations

import math

import numpy as np
import torch

from gpdlm_cli.models import LocalCells, predict_gamma_family
from gpdlm_cli.models.gamma_family import gamma_conditional, mixture_moments

from .test_spectral_math import np_features

M, D, N_K = 10, 2, 40
NOISE, SIGNAL = 0.25, 1.7


def _cell(seed=0):
    rng = np.random.default_rng(seed)
    freqs = rng.normal(size=(M, D)) / (2 * np.pi)
    x, xs = rng.normal(size=(N_K, D)), rng.normal(size=(6, D))
    y = np.sin(x @ np.array([1.0, -0.5])) + 0.3 * rng.normal(size=N_K)
    return freqs, x, y, xs


def _dense_gp(freqs, x, y, xs):
    """Posterior of f_* under K = Phi^T Lambda Phi + s_n^2 I on (x, y)."""
    phi, phs = np_features(x, freqs), np_features(xs, freqs)
    lam = SIGNAL / M
    K = lam * phi @ phi.T + NOISE * np.eye(len(y))
    Ks = lam * phs @ phi.T
    mean = Ks @ np.linalg.solve(K, y)
    var = lam * (phs**2).sum(1) - np.einsum("ij,ji->i", Ks, np.linalg.solve(K, Ks.T))
    return mean, var


def _torch_conditional(freqs, x, y, xs, s, gammas):
    t = lambda a: torch.as_tensor(np.asarray(a, dtype=float))  # noqa: E731
    phs = torch.as_tensor(np_features(xs, freqs))[None]
    phk = torch.as_tensor(np_features(x, freqs))[None]
    return gamma_conditional(phs, phk, t(y), t(s), t(NOISE), t(SIGNAL), t(gammas))


def test_gamma_zero_is_the_exact_gp_posterior_and_gamma_one_is_degenerate():
    freqs, x, y, xs = _cell()
    s = np.random.default_rng(5).normal(size=(1, 2 * M))
    mu, var = _torch_conditional(freqs, x, y, xs, s, [0.0, 1.0])
    mean, v = _dense_gp(freqs, x, y, xs)
    np.testing.assert_allclose(mu[0, 0].numpy(), mean, rtol=0, atol=1e-10)
    np.testing.assert_allclose(var[0, 0].numpy(), v, rtol=0, atol=1e-10)
    assert torch.all(var[1] == 0)
    np.testing.assert_allclose(mu[1, 0].numpy(), np_features(xs, freqs) @ s[0], rtol=0, atol=1e-12)


def test_integrating_s_gives_the_gamma_zero_moments_for_every_gamma():
    """s ~ N(Gamma^-1 Phi y, s_n^2 Gamma^-1) (200,000 draws); the mixture over s of
    N(mu_*(s), sigma_*^2) has the gamma = 0 mean and variance, gamma in {1, 0.5, -0.5, -1}."""
    freqs, x, y, xs = _cell(1)
    phi = np_features(x, freqs)
    gram = phi.T @ phi + NOISE * M / SIGNAL * np.eye(2 * M)
    post_mean = np.linalg.solve(gram, phi.T @ y)
    post_cov = NOISE * np.linalg.inv(gram)
    N = 200_000
    s = np.random.default_rng(2).multivariate_normal(post_mean, post_cov, size=N)
    gammas = [1.0, 0.5, -0.5, -1.0]
    mu, var = _torch_conditional(freqs, x, y, xs, s, gammas)
    mean, v = mixture_moments(mu, var)
    target_mean, target_var = _dense_gp(freqs, x, y, xs)
    for i, g in enumerate(gammas):
        draws = mu[i].numpy()  # (N, 6)
        se_mean = draws.std(0) / math.sqrt(N)
        se_var = ((draws - draws.mean(0)) ** 2).std(0) / math.sqrt(N)
        assert np.all(np.abs(mean[i].numpy() - target_mean) < 5 * se_mean + 1e-12), g
        assert np.all(np.abs(v[i].numpy() - target_var) < 5 * se_var + 1e-12), g
        assert np.all(se_var < 0.02 * target_var)  # the test has power


def test_r_sample_predictive_on_kmeans_cells():
    """predict_gamma_family: each test point uses its nearest centroid's training rows; the
    mixture over r samples has mean (1/r) sum mu_j and variance mean(sigma_j^2) + var_pop(mu_j)."""
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(300, D)), rng.normal(size=300)
    xs = rng.normal(size=(40, D))
    tx = torch.as_tensor(x)
    cells = LocalCells(tx, 6, seed=0)
    centroids = cells.centroids.numpy()
    train_cell = ((x[:, None] - centroids[None]) ** 2).sum(-1).argmin(1)
    test_cell = ((xs[:, None] - centroids[None]) ** 2).sum(-1).argmin(1)
    assert sorted(np.bincount(train_cell, minlength=6)) == sorted(cells.sizes.tolist())
    r = 3
    thetas = rng.normal(size=(r, M, D)) / (2 * np.pi)
    ss = rng.normal(size=(r, 2 * M)) * 0.3
    gammas = [0.0, 0.3, 1.0]
    mu, var = predict_gamma_family(
        cells,
        tx,
        torch.as_tensor(y),
        torch.as_tensor(xs),
        torch.as_tensor(thetas),
        torch.as_tensor(ss),
        torch.tensor(NOISE, dtype=torch.float64),
        torch.tensor(SIGNAL, dtype=torch.float64),
        gammas,
    )
    for k in np.unique(test_cell):
        q, rows = test_cell == k, train_cell == k
        per = []
        for j in range(r):
            mean0, var0 = _dense_gp(thetas[j], x[rows], y[rows], xs[q])
            glob = np_features(xs[q], thetas[j]) @ ss[j]
            per.append([(g * glob + (1 - g) * mean0, (1 - g**2) * var0) for g in gammas])
        for i in range(len(gammas)):
            mus = np.stack([per[j][i][0] for j in range(r)])
            vs = np.stack([per[j][i][1] for j in range(r)])
            np.testing.assert_allclose(mu[i, q].numpy(), mus.mean(0), rtol=0, atol=1e-10)
            np.testing.assert_allclose(var[i, q].numpy(), vs.mean(0) + mus.var(0), rtol=0, atol=1e-10)


def test_cells_above_the_row_threshold_fit_on_a_seeded_subset_and_assign_every_row(monkeypatch):
    """Issue 39: above SUBSET_ABOVE rows (the 1.9M airline rows at p = 2000) the centroids are those of
    k-means on SUBSET_ROWS rows drawn with the seed; every training row still belongs to its nearest
    centroid's cell."""
    from sklearn.cluster import KMeans

    from gpdlm_cli.models import gamma_family

    monkeypatch.setattr(gamma_family, "SUBSET_ABOVE", 200)
    monkeypatch.setattr(gamma_family, "SUBSET_ROWS", 120)
    x = np.random.default_rng(5).normal(size=(250, D))
    cells = LocalCells(torch.as_tensor(x), 4, seed=1)
    pick = np.sort(np.random.default_rng(1 + gamma_family._SUBSET_STREAM).choice(250, 120, replace=False))
    ref = KMeans(n_clusters=4, n_init=1, random_state=1, max_iter=100).fit(x[pick]).cluster_centers_
    np.testing.assert_array_equal(cells.centroids.numpy(), ref)
    nearest = ((x[:, None] - ref[None]) ** 2).sum(-1).argmin(1)
    assert cells.sizes.tolist() == np.bincount(nearest, minlength=4).tolist() and int(cells.sizes.sum()) == 250
