"""Square-loss DLM (DLM paper, Sec. 2) and its closed-form optimum in m."""

from __future__ import annotations

import math

import torch

from .base import SparseVariationalObjective


class SquareLossDLM(SparseVariationalObjective):
    """Square-loss DLM per datum:

        (1/N) [ (1/2) sum_i (mu_i - y_i)^2 + (beta/2) m^T K_uu^{-1} m ],   mu_i = K_iu K_uu^{-1} m

    The optimal prediction under square loss is the predictive mean, so the loss depends on q(u)
    only through m; in whitened coordinates m^T K_uu^{-1} m = |m~|^2. V and the noise do not enter:
    see ``fit_predictive_noise`` for the predictive distribution used for NLL.
    """

    name = "sq_dlm"

    def data_term(self, y, mu, var):
        return 0.5 * (mu - y) ** 2

    def regulariser(self):
        return 0.5 * (self.model.whitened_mean() ** 2).sum()


def optimal_whitened_mean(model, x, y, beta: float) -> torch.Tensor:
    """argmin over m~ of (1/2)|B m~ - r|^2 + (beta/2)|m~|^2 with B = K_xu L^{-T}, r = y - mean(x):

    m~* = (B^T B + beta I)^{-1} B^T r     (one M x M solve; the fixed-variant step of App. D)
    """
    with torch.no_grad():
        B = model.interpolation(x)
        r = y - model.prior_mean(x)
        A = B.T @ B + beta * torch.eye(B.shape[1], dtype=B.dtype, device=B.device)
        return torch.linalg.solve(A, B.T @ r)


def fit_predictive_noise(mu: torch.Tensor, var: torch.Tensor, y: torch.Tensor, lower: float = 1e-8) -> float:
    """Noise variance s2 maximising sum_i log N(y_i | mu_i, var_i + s2) on the training residuals.

    Square-loss DLM learns only m, so gpdlm completes it into a predictive distribution with
    q(u) = N(m, K_uu) (var_i = K_ii, the prior variance) and this maximum-likelihood s2; test NLL
    of sq_dlm is reported for that distribution. A 1-D bounded search over log s2 >= log(lower).
    """
    from scipy.optimize import minimize_scalar

    mu, var, y = (t.detach().double().cpu() for t in (mu, var, y))
    r2 = (y - mu) ** 2

    def nll(log_s2: float) -> float:
        s = var + float(torch.exp(torch.tensor(log_s2)))
        return float(0.5 * (torch.log(s) + r2 / s).sum())

    # the optimum is below max r2: for s2 >= max r2 every term's derivative (r2 - s) / s^2 is < 0
    # (mean r2 is not a bound when var varies across points)
    hi = float(torch.log(r2.max() + 1e-8)) + 1.0
    lo = math.log(lower)
    res = minimize_scalar(nll, bounds=(lo, max(hi, lo + 1.0)), method="bounded", options={"xatol": 1e-6})
    return float(torch.exp(torch.tensor(res.x)))


def fit_square_loss_predictive(
    residual: torch.Tensor, k: torch.Tensor, kind: str = "residual", lower: float = 1e-8
) -> tuple[float, float]:
    """The predictive distribution that completes square-loss DLM, N(y_i | mu_i, c k_i + s2).

    Square loss determines only the mean mu_i; the variance is fitted by maximum likelihood on the
    training residuals r_i = y_i - mu_i:

    * ``residual``: c = 0, s2 = mean_i r_i^2 -- the ordinary completion N(mu_i, s2);
    * ``scaled``: (c, s2) = argmax sum_i log N(r_i | 0, c k_i + s2) over c >= 0, s2 >= lower, with
      k_i = K_ii - Q_ii the conditional variance of f_i given u (what q(u) = delta(m) leaves), so the
      predictive widens away from the inducing inputs.

    (The completion q(u) = N(m, K_uu) with var_i = K_ii, used before, always put s2 on its floor:
    K_ii exceeds the residual variance, so the reported NLL was the prior's.) Returns (c, s2)."""
    import numpy as np
    from scipy.optimize import minimize

    r2 = (residual.detach().double().cpu()) ** 2
    s2_res = max(float(r2.mean()), lower)
    if kind == "residual":
        return 0.0, s2_res
    if kind != "scaled":
        raise ValueError(f"unknown square-loss predictive {kind!r}")
    kk = k.detach().double().cpu().clamp_min(0).numpy()
    r2n = r2.numpy()

    def nll(theta):
        c, s2 = math.exp(theta[0]), math.exp(theta[1])
        v = c * kk + s2
        g_v = 0.5 * (1.0 / v - r2n / v**2)  # d nll / d v_i
        return 0.5 * float((np.log(v) + r2n / v).sum()), [float((g_v * kk).sum() * c), float(g_v.sum() * s2)]

    best = (0.0, s2_res, nll([math.log(1e-12), math.log(s2_res)])[0])
    for c0 in (1e-3, 1e-1, 1.0):
        res = minimize(
            nll,
            np.array([math.log(c0), math.log(s2_res)]),
            jac=True,
            method="L-BFGS-B",
            bounds=[(math.log(1e-12), math.log(1e6)), (math.log(lower), math.log(max(10 * s2_res, lower * 10)))],
        )
        if res.fun < best[2]:
            best = (math.exp(res.x[0]), math.exp(res.x[1]), float(res.fun))
    return best[0], best[1]
