"""A sparse variational GP on transformed inputs: f(x) = h(g(x)), h ~ GP (deep kernel learning;
Shoham & Avron's SVGP column: SVGP with the same network as the RKHS methods, M = batch size)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .sparse_variational import SparseVariationalGP


class FeatureInputGP(torch.nn.Module):
    """``gp`` (a ``SparseVariationalGP`` whose inducing inputs live in feature space) applied to
    ``features(x)``; the network is trained jointly with it (its own parameter group).

    Exposes what the sparse variational objectives and metrics use -- ``marginals``,
    ``kl_divergence``, ``whitened_mean``, ``interpolation``, ``q_u``, ``mean_module``,
    ``reset_variational``, ``variational_parameters`` -- with the input map applied first;
    ``hyperparameters`` include the network's weights (the fixed variant freezes them too)."""

    def __init__(self, gp: SparseVariationalGP, features: torch.nn.Module):
        super().__init__()
        self.gp = gp
        self.features = features

    def marginals(self, x: torch.Tensor):
        return self.gp.marginals(self.features(x))

    def kl_divergence(self) -> torch.Tensor:
        return self.gp.kl_divergence()

    def whitened_mean(self) -> torch.Tensor:
        return self.gp.whitened_mean()

    def interpolation(self, x: torch.Tensor) -> torch.Tensor:
        return self.gp.interpolation(self.features(x))

    def whitened_gram(self, x: torch.Tensor, r: torch.Tensor):
        return self.gp.whitened_gram(self.features(x), r)

    @property
    def q_u(self):
        return self.gp.q_u

    @property
    def mean_module(self):
        return self.gp.mean_module

    @property
    def inducing_points(self) -> torch.Tensor:
        return self.gp.inducing_points

    def set_whitened_q(self, mean: torch.Tensor, chol_covar: torch.Tensor) -> None:
        self.gp.set_whitened_q(mean, chol_covar)

    def reset_variational(self, covariance_scale: float = 1.0) -> None:
        self.gp.reset_variational(covariance_scale)

    def variational_parameters(self):
        return self.gp.variational_parameters()

    def prior_mean(self, x: torch.Tensor) -> torch.Tensor:
        return self.gp.prior_mean(self.features(x))

    def prior_variance(self, x: torch.Tensor) -> torch.Tensor:
        return self.gp.prior_variance(self.features(x))

    @property
    def covar_module(self):
        return self.gp.covar_module

    def hyperparameters(self):
        return self.gp.hyperparameters() + list(self.features.parameters())
