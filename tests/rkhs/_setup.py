"""Shared set-up of the RKHS tests: a slice of offline UCI concrete and the full-data optimum of an
RFF model on it, found once per session (float64, one thread)."""

from __future__ import annotations

import functools

import numpy as np
import torch

from gpdlm_cli.features import Identity, RandomFourierMap
from gpdlm_cli.likelihoods import GaussianLikelihood
from gpdlm_cli.models.bayesian_linear import BayesianLinearGP
from gpdlm_cli.objectives import feature_nlml

LOG_2PI = float(np.log(2 * np.pi))


@functools.cache
def concrete(n: int):
    """The first n training rows of concrete (90/10 split, seed 0), standardised, float64."""
    from gpdlm_cli.data import load_table, make_splits

    s = make_splits(load_table("concrete"), seed=0, val_fraction=0.0, test_fraction=0.1)
    return torch.as_tensor(s.X_train[:n], dtype=torch.float64), torch.as_tensor(s.y_train[:n], dtype=torch.float64)


def rff_model(x, y, d: int, *, noise: float = 0.1, seed: int = 1, form: str = "sincos") -> BayesianLinearGP:
    """An RFF Bayesian-linear GP on the raw inputs (lengthscale 1, magnitude 1 to start)."""
    lik = GaussianLikelihood(noise_init=noise).double()
    km = RandomFourierMap(x.shape[1], d, form=form, generator=torch.Generator().manual_seed(seed)).double()
    return BayesianLinearGP(Identity(x.shape[1]), km, lik, x, y)


def hyperparameters(model) -> list[torch.Tensor]:
    """(raw lengthscale, raw magnitude, raw noise): theta of the tests."""
    return [
        model.kernel_map.raw_lengthscale,
        model.kernel_map.raw_outputscale,
        model.likelihood.gp.noise_covar.raw_noise,
    ]


@functools.cache
def _optimum_state(n: int, d: int):
    x, y = concrete(n)
    model = rff_model(x, y, d)
    params = hyperparameters(model)
    opt = torch.optim.LBFGS(
        params, lr=1, max_iter=300, line_search_fn="strong_wolfe", tolerance_grad=1e-11, tolerance_change=1e-15
    )

    def closure():
        opt.zero_grad()
        v = feature_nlml(model.features(x), y, model.noise)
        v.backward()
        return v

    for _ in range(2):
        opt.step(closure)
    return [p.detach().clone() for p in params], model.nlml()


def model_at_optimum(n: int, d: int):
    """A fresh model at the full-data optimum theta* of its per-point NLML, and NLML*."""
    state, nlml = _optimum_state(n, d)
    x, y = concrete(n)
    model = rff_model(x, y, d)
    with torch.no_grad():
        for p, s in zip(hyperparameters(model), state):
            p.copy_(s)
    return model, nlml


def non_optimal_model(n: int, d: int) -> BayesianLinearGP:
    """The RFF model of ``model_at_optimum`` at a fixed non-optimal point: raw lengthscale 0.7, raw
    magnitude 1.3, noise 0.05 (the full NLML gradient is far from 0 there)."""
    x, y = concrete(n)
    model = rff_model(x, y, d)
    with torch.no_grad():
        model.kernel_map.raw_lengthscale.fill_(0.7)
        model.kernel_map.raw_outputscale.fill_(1.3)
        model.likelihood.gp.noise = 0.05
    return model


def l_gradient_numpy(model, w) -> np.ndarray:
    """grad of l / (2n) in ((raw lengthscale, raw magnitude, raw noise), w), with
    l = (1/s2)||Z w - y||^2 + ||w||^2 + log|F| + (n - d) log s2, from numpy's closed forms
    dl/dZ = (2/s2)(Z w - y) w^T + 2 Z F^-1, dl/ds2 = -||Z w - y||^2/s2^2 + tr F^-1 + (n - d)/s2 and
    dl/dw = (2/s2) Z^T (Z w - y) + 2 w, chained to the raw parameters by one vector-Jacobian product of
    the feature map and the noise's softplus. At w = w* its theta part is the gradient of the NLML."""
    x, y = model.x_train, model.y_train
    Zt = model.features(x)
    s2t = model.noise
    Z, yn, wn, s2 = Zt.detach().numpy(), y.numpy(), np.asarray(w.detach()), float(s2t.detach())
    n, d = Z.shape
    Finv = np.linalg.inv(Z.T @ Z + s2 * np.eye(d))
    r = Z @ wn - yn
    dZ = (2 / s2) * np.outer(r, wn) + 2 * Z @ Finv
    ds2 = -(r @ r) / s2**2 + np.trace(Finv) + (n - d) / s2
    dw = (2 / s2) * Z.T @ r + 2 * wn
    g = torch.autograd.grad(
        [Zt, s2t], hyperparameters(model), grad_outputs=[torch.as_tensor(dZ), torch.tensor(ds2, dtype=torch.float64)]
    )
    return np.concatenate([np.array([float(v) for v in g]), dw]) / (2 * n)


def set_state(params, state) -> None:
    with torch.no_grad():
        for p, s in zip(params, state):
            p.copy_(s)
