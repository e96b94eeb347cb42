"""The exact GP (O(N^3)): a small-data baseline and the correctness anchor of the sparse methods."""

from __future__ import annotations

import gpytorch


class ExactGP(gpytorch.models.ExactGP):
    """gpytorch's ExactGP with a Gaussian likelihood; ``marginals`` gives the latent predictive."""

    def __init__(self, train_x, train_y, kernel, mean, likelihood):
        super().__init__(train_x, train_y, likelihood.gp)
        self.covar_module = kernel
        self.mean_module = mean
        self.gpdlm_likelihood = likelihood

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

    def marginals(self, x):
        was_training = self.training
        self.eval()
        try:
            with gpytorch.settings.fast_pred_var(False):
                q_f = self(x)
                return q_f.mean, q_f.variance.clamp_min(1e-12)
        finally:
            self.train(was_training)
