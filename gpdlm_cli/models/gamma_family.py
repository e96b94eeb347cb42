"""Local prediction of sparse-spectrum GPs: the k-means cells X_k and the gamma family of test
conditionals (Hoang, Hoang & Low, AAAI 2017, Sec. 2 Prop. 1 and Sec. 4.2).

For a test input x_* in cell k, phi_* = phi_theta(x_*), Phi_k = Phi_theta(X_k)^T (n_k x 2m) and
Gamma_k = Phi_k^T Phi_k + (s_n^2 m / s_s^2) I (2m x 2m), for |gamma| <= 1:

  mu_*(alpha)    = gamma phi_*^T s + (1 - gamma) phi_*^T Gamma_k^-1 Phi_k^T y_k
  sigma_*^2(alpha) = (1 - gamma^2) s_n^2 phi_*^T Gamma_k^-1 phi_*

gamma = 0 is the SSGP predictive on the cell's data (independent of s); gamma = 1 is the degenerate
N(phi_*^T s, 0) of VSSGP. Integrating s ~ p(s | y_k, theta) = N(Gamma_k^-1 Phi_k^T y_k,
s_n^2 Gamma_k^-1) gives the gamma = 0 moments for *every* gamma: the family is marginally
consistent, but only gamma = 1 is the conditional implied by the model f = Phi^T s (App. A's
argument that every member is "the" conditional does not hold; see docs/sparse_spectrum.md).

With r samples alpha_j ~ q the predictive of f_* has mean (1/r) sum_j mu_*(alpha_j) and variance
E[sigma_*^2] + Var[mu_*] (population variance over the samples; never a difference of second
moments). The noise s_n^2 is added for y by the Gaussian likelihood.
"""

from __future__ import annotations

import torch

from ..exceptions import NumericalError
from .sparse_spectrum import trig_features

#: above this many training rows the centroids are fitted on SUBSET_ROWS of them drawn at random
#: (seeded), and every row is then assigned to its nearest centroid: k-means with p = 2000 cells on
#: the 1.9M airline rows would take hours on 2 cores; no set below the threshold is affected (the
#: same rule as the inducing points' k-means, methods.components.KMEANS_SUBSET_*)
SUBSET_ABOVE = 500_000
SUBSET_ROWS = 200_000
_SUBSET_STREAM = 7919


class LocalCells:
    """The p cells of the local assumption: k-means (scikit-learn, seeded) on the standardised
    training inputs (above ``SUBSET_ABOVE`` rows: on a seeded subset of ``SUBSET_ROWS``); every point
    (training or test) belongs to its nearest centroid's cell.

    ``members[k]``: the training rows of cell k (1-D index tensors on x's device). k-means cells
    are uneven (the paper's "evenly partitioned" is not what k-means gives); an empty cell is
    allowed (its local predictor is the prior)."""

    def __init__(self, x_train: torch.Tensor, num_cells: int, seed: int, *, n_init: int = 1, max_iter: int = 100):
        import numpy as np
        from sklearn.cluster import KMeans

        km = KMeans(n_clusters=num_cells, n_init=n_init, random_state=seed, max_iter=max_iter)
        xs = x_train.detach().cpu().numpy()
        if xs.shape[0] > SUBSET_ABOVE:
            pick = np.random.default_rng(seed + _SUBSET_STREAM).choice(xs.shape[0], SUBSET_ROWS, replace=False)
            xs = xs[np.sort(pick)]
        km.fit(xs)
        self.centroids = torch.as_tensor(km.cluster_centers_, dtype=x_train.dtype, device=x_train.device)
        labels = self.assign(x_train)
        self.sizes = torch.bincount(labels, minlength=num_cells)
        order = torch.argsort(labels, stable=True)
        self.members = list(torch.split(order, self.sizes.tolist()))

    @property
    def num_cells(self) -> int:
        return self.centroids.shape[0]

    def assign(self, x: torch.Tensor, chunk: int = 8192) -> torch.Tensor:
        """The cell (nearest centroid) of each row of x."""
        out = [torch.cdist(x[i : i + chunk], self.centroids).argmin(-1) for i in range(0, x.shape[0], chunk)]
        return torch.cat(out) if out else torch.zeros(0, dtype=torch.long, device=x.device)


def gamma_conditional(phi_star, phi_k, y_k, s, noise, signal, gammas):
    """mu_*(alpha), sigma_*^2(alpha) of Prop. 1 for one cell, batched over r samples of alpha.

    phi_star (r, t, 2m), phi_k (r, n_k, 2m), y_k (n_k,), s (r, 2m), gammas (G,).
    Returns (mu, var), each (G, r, t). One Cholesky of Gamma_k per sample."""
    two_m = phi_k.shape[-1]
    ridge = noise * (two_m // 2) / signal
    eye = torch.eye(two_m, dtype=phi_k.dtype, device=phi_k.device)
    gram = phi_k.transpose(-1, -2) @ phi_k + ridge * eye
    L, info = torch.linalg.cholesky_ex(gram)
    if bool(info.any()):
        raise NumericalError(
            "Gamma_k = Phi_k^T Phi_k + (s_n^2 m / s_s^2) I is not positive definite; "
            "the noise variance may have collapsed (try likelihood.noise_init or dtype=float64)"
        )
    rhs = (phi_k.transpose(-1, -2) @ y_k).unsqueeze(-1)
    w = torch.cholesky_solve(rhs, L)
    mu_local = (phi_star @ w).squeeze(-1)
    V = torch.linalg.solve_triangular(L, phi_star.transpose(-1, -2), upper=False)
    var_local = noise * (V**2).sum(-2)
    mu_global = (phi_star @ s.unsqueeze(-1)).squeeze(-1)
    g = gammas.view(-1, 1, 1)
    return g * mu_global + (1 - g) * mu_local, (1 - g**2) * var_local


def mixture_moments(mu: torch.Tensor, var: torch.Tensor):
    """Mean and variance of the equal mixture over samples (dim 1): E[var] + Var_pop[mu]."""
    mean = mu.mean(1)
    spread = ((mu - mean.unsqueeze(1)) ** 2).mean(1)
    return mean, (var.mean(1) + spread).clamp_min(0.0)


@torch.no_grad()
def predict_gamma_family(cells: LocalCells, x_train, y_train, x, thetas, ss, noise, signal, gammas):
    """The r-sample predictive of f at the rows of x for each gamma (Sec. 4.2).

    thetas (r, m, d) and ss (r, 2m): the samples alpha_j = (theta_j, s_j); noise, signal: s_n^2,
    s_s^2. Returns (mu, var), each (G, n_*). Cost: for each cell holding test points and each
    sample, O(n_k m^2 + m^3)."""
    gammas = torch.as_tensor(gammas, dtype=x.dtype, device=x.device)
    G, n = gammas.shape[0], x.shape[0]
    mu_out = torch.empty(G, n, dtype=x.dtype, device=x.device)
    var_out = torch.empty(G, n, dtype=x.dtype, device=x.device)
    labels = cells.assign(x)
    counts = torch.bincount(labels, minlength=cells.num_cells).tolist()
    order = torch.argsort(labels, stable=True)
    start = 0
    for k, c in enumerate(counts):
        if c == 0:
            continue
        q = order[start : start + c]
        start += c
        rows = cells.members[k]
        mu, var = gamma_conditional(
            trig_features(x[q], thetas), trig_features(x_train[rows], thetas), y_train[rows], ss, noise, signal, gammas
        )
        mu_out[:, q], var_out[:, q] = mixture_moments(mu, var)
    return mu_out, var_out


__all__ = ["LocalCells", "gamma_conditional", "mixture_moments", "predict_gamma_family"]
