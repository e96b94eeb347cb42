"""Objectives: per-datum losses to *minimise*, so values compare across batch sizes and datasets.

A sparse variational objective is  mean_i loss_i(y_i, mu_i, var_i) + beta * R(q) / N  over a
minibatch, an unbiased estimate of (1/N) [sum_i loss_i + beta R(q)]. Subclasses fill one hook,
``data_term`` (as gpytorch's VariationalELBO and PredictiveLogLikelihood differ only in theirs), and
may replace ``regulariser`` (KL by default).
"""

from __future__ import annotations

import torch


class Objective(torch.nn.Module):
    """A loss to minimise over minibatches (x, y); ``num_data`` is the training-set size N."""

    name = "objective"

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class SparseVariationalObjective(Objective):
    """mean_i data_term(y_i, mu_i, var_i) + beta * regulariser() / N.

    Batched over leading dimensions as well (a model whose parameters carry a leading batch dimension,
    ``sweep.batched_model``: x B x N x D, y B x N, ``beta`` a float or a B-vector): the B members' losses."""

    def __init__(self, model, likelihood, estimator, num_data: int, beta: float = 1.0):
        super().__init__()
        self.model = model
        self.likelihood = likelihood
        self.estimator = estimator
        self.num_data = num_data
        self.beta = beta

    def data_term(self, y, mu, var) -> torch.Tensor:
        raise NotImplementedError

    def regulariser(self) -> torch.Tensor:
        return self.model.kl_divergence()

    def forward(self, x, y):
        mu, var = self.model.marginals(x)
        return self.data_term(y, mu, var).mean(-1) + self.beta * self.regulariser() / self.num_data
