"""Independent dense references (numpy/scipy, float64) for tests/math, plus small builders of
gpdlm objects with known hyperparameters.

Nothing in the reference half calls gpdlm: the builders only *construct* gpdlm/gpytorch objects and
read their hyperparameters back, so a test compares gpdlm's computation against a formula written
here from the paper (DLM paper, Sec. 2) or the textbooks (Rasmussen and Williams, 2006; Titsias,
2009; Snelson and Ghahramani, 2006).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import scipy.integrate
import scipy.optimize
import scipy.special
import scipy.stats

# ----------------------------------------------------------------------------------------------
# kernels and Gaussian bits
# ----------------------------------------------------------------------------------------------


def rbf(A, B, outputscale, lengthscale):
    """outputscale * exp(-|a - b|^2 / (2 l^2)) for rows a of A, b of B."""
    A, B = np.asarray(A, float), np.asarray(B, float)
    d2 = ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)
    return outputscale * np.exp(-0.5 * d2 / lengthscale**2)


def log_normal(y, mu, var):
    return -0.5 * np.log(2 * np.pi * var) - 0.5 * (y - mu) ** 2 / var


def kl_gauss(m, V, K):
    """KL(N(m, V) || N(0, K)), dense."""
    M = len(m)
    Kinv_V = np.linalg.solve(K, V)
    quad = m @ np.linalg.solve(K, m)
    _, logdetK = np.linalg.slogdet(K)
    _, logdetV = np.linalg.slogdet(V)
    return 0.5 * (np.trace(Kinv_V) + quad - M + logdetK - logdetV)


def svgp_marginals(X, Z, m, V, outputscale, lengthscale, jitter):
    """DLM paper Sec. 2: mu_i = K_iu K_uu^-1 m, var_i = K_ii + K_iu K_uu^-1 (V - K_uu) K_uu^-1 K_ui,
    with K_uu = K(Z, Z) + jitter I (the prior gpdlm/gpytorch actually use)."""
    Kuu = rbf(Z, Z, outputscale, lengthscale) + jitter * np.eye(len(Z))
    Kfu = rbf(X, Z, outputscale, lengthscale)
    A = np.linalg.solve(Kuu, Kfu.T).T  # K_fu K_uu^-1
    mu = A @ m
    var = outputscale + np.einsum("ij,jk,ik->i", A, V - Kuu, A)
    return mu, var, Kuu


# ----------------------------------------------------------------------------------------------
# likelihoods, written from their definitions (scipy only)
# ----------------------------------------------------------------------------------------------


def _softplus(f):
    return np.logaddexp(0.0, f)


def np_log_prob(name, y, f, noise=None):
    """log p(y|f) for the five likelihoods, vectorised in f (scipy.special, not scipy.stats: this
    runs inside quad's integrand, where scipy.stats' per-call overhead dominates)."""
    f = np.asarray(f, float)
    if name == "gaussian":
        return -0.5 * np.log(2 * np.pi * noise) - 0.5 * (y - f) ** 2 / noise
    if name == "probit":
        return scipy.special.log_ndtr((2 * y - 1) * f)
    if name == "logit":
        return -_softplus(-(2 * y - 1) * f)
    if name == "poisson_exp":
        return y * f - np.exp(f) - scipy.special.gammaln(y + 1)
    if name == "poisson_softplus":
        lam = np.maximum(_softplus(f), 1e-300)
        return scipy.special.xlogy(y, lam) - lam - scipy.special.gammaln(y + 1)
    raise KeyError(name)


def _tilted_peak(logg, mu, var):
    """Mode and a width scale of a log-concave integrand logg (for integration limits)."""
    res = scipy.optimize.minimize_scalar(lambda f: -logg(f), bracket=(mu - 1.0, mu + 1.0), tol=1e-12)
    c = float(res.x)
    h = 1e-4 * max(1.0, abs(c))
    curv = -(logg(c + h) - 2 * logg(c) + logg(c - h)) / h**2
    sd = 1.0 / math.sqrt(curv) if curv > 0 else math.sqrt(var)
    return c, min(sd, math.sqrt(var))


@functools.cache
def quad_log_marginal(name, y, mu, var, noise=None, with_grad=False):
    """log int N(f|mu,var) p(y|f) df by scipy.integrate.quad, the integrand scaled by exp(-max).

    With ``with_grad`` also returns d/dmu and d/dvar of it, as ratios of integrals:
    d/dmu log Z = E_t[(f-mu)/var], d/dvar log Z = E_t[((f-mu)^2/var^2 - 1/var)/2] under the tilted
    density t(f) ~ N(f|mu,var) p(y|f)."""

    def logg(f):
        return float(log_normal(f, mu, var) + np_log_prob(name, y, f, noise))

    c, sd = _tilted_peak(logg, mu, var)
    gmax = logg(c)
    lo, hi = c - 20 * sd, c + 20 * sd
    while logg(lo) - gmax > -100:  # widen until the scaled integrand is < e^-100 at the ends
        lo = c - 2 * (c - lo)
    while logg(hi) - gmax > -100:
        hi = c + 2 * (hi - c)

    def integral(weight):
        val, _ = scipy.integrate.quad(
            lambda f: math.exp(logg(f) - gmax) * weight(f),
            lo,
            hi,
            points=[c],
            epsabs=1e-13,
            epsrel=1e-11,
            limit=500,  # epsabs: some gradients are 0
        )
        return val

    Z0 = integral(lambda f: 1.0)
    logZ = gmax + math.log(Z0)
    if not with_grad:
        return logZ
    d_mu = integral(lambda f: (f - mu) / var) / Z0
    d_var = integral(lambda f: 0.5 * ((f - mu) ** 2 / var**2 - 1.0 / var)) / Z0
    return logZ, d_mu, d_var


def quad_expected_log_prob(name, y, mu, var, noise=None):
    """int N(f|mu,var) log p(y|f) df by scipy.integrate.quad over mu +- 40 sd."""
    sd = math.sqrt(var)
    val, _ = scipy.integrate.quad(
        lambda f: math.exp(float(log_normal(f, mu, var))) * float(np_log_prob(name, y, f, noise)),
        mu - 40 * sd,
        mu + 40 * sd,
        points=[mu],
        epsabs=0.0,
        epsrel=1e-11,
        limit=500,
    )
    return val


def quad_expectation(fn, mu, var):
    """int N(f|mu,var) fn(f) df."""
    sd = math.sqrt(var)
    val, _ = scipy.integrate.quad(
        lambda f: math.exp(float(log_normal(f, mu, var))) * fn(f),
        mu - 40 * sd,
        mu + 40 * sd,
        points=[mu],
        epsabs=0.0,
        epsrel=1e-11,
        limit=500,
    )
    return val


# ----------------------------------------------------------------------------------------------
# builders (construct gpdlm objects; no gpdlm computation happens here)
# ----------------------------------------------------------------------------------------------


def make_kernel(outputscale, lengthscale):
    """ScaleKernel(RBFKernel()) in float64 with the given hyperparameters (set after .double())."""
    import gpytorch
    import torch

    k = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel()).double()
    # float64 tensors: a Python float would pass through a float32 tensor inside gpytorch's setter
    k.base_kernel.lengthscale = torch.tensor(lengthscale, dtype=torch.float64)
    k.outputscale = torch.tensor(outputscale, dtype=torch.float64)
    return k


def kernel_hypers(kernel):
    """(outputscale, lengthscale) as floats, read back from the (constrained) gpytorch kernel."""
    return float(kernel.outputscale.detach()), float(kernel.base_kernel.lengthscale.detach())


def make_gaussian_lik(noise):
    import torch

    from gpdlm_cli.likelihoods import GaussianLikelihood

    lik = GaussianLikelihood(noise_init=noise).double()
    lik.gp.noise = torch.tensor(noise, dtype=torch.float64)  # again in float64: the init rounds
    return lik


def make_svgp(Z, outputscale, lengthscale, jitter, m_tilde=None, S_chol=None, mean=None):
    """SparseVariationalGP with whitened variational parameters set (and marked initialised so
    gpytorch does not overwrite them with the prior on the first call)."""
    import gpytorch
    import torch

    from gpdlm_cli.models import SparseVariationalGP

    kernel = make_kernel(outputscale, lengthscale)
    mean = gpytorch.means.ZeroMean() if mean is None else mean
    model = SparseVariationalGP(torch.as_tensor(Z), kernel, mean, jitter=jitter).double()
    model.reset_variational()
    with torch.no_grad():
        if m_tilde is not None:
            model.q_u.variational_mean.copy_(torch.as_tensor(m_tilde))
        if S_chol is not None:
            model.q_u.chol_variational_covar.copy_(torch.as_tensor(S_chol))
    model.variational_strategy.variational_params_initialized.fill_(1)
    return model


def whitened_to_dense(model, Z, jitter):
    """(m, V) = (L m~, L S L^T) with L = chol(K_uu + jitter I) computed here in numpy from the
    model's kernel hyperparameters and the model's raw whitened parameters."""
    os_, ls = kernel_hypers(model.covar_module)
    Kuu = rbf(Z, Z, os_, ls) + jitter * np.eye(len(Z))
    L = np.linalg.cholesky(Kuu)
    m_t = model.q_u.variational_mean.detach().numpy().astype(float)
    S_chol = np.tril(model.q_u.chol_variational_covar.detach().numpy().astype(float))
    S = S_chol @ S_chol.T
    return L @ m_t, L @ S @ L.T, os_, ls
