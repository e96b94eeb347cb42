"""Full-batch marginal-likelihood objectives: collapsed (SGPR, FITC) and exact."""

from __future__ import annotations

import gpytorch

from .base import Objective


class CollapsedBound(Objective):
    """-(1/N) log-marginal of a ``CollapsedSparseGP``: the Titsias bound (sgpr) or FITC's."""

    def __init__(self, model, num_data: int):
        super().__init__()
        self.model = model
        self.num_data = num_data
        self.name = model.kind

    def forward(self, x, y):
        return -self.model.log_marginal(x, y) / self.num_data


class ExactMarginalLikelihood(Objective):
    """-(1/N) log N(y | m(X), K + s2 I) via gpytorch's ExactMarginalLogLikelihood."""

    name = "exact"

    def __init__(self, model, num_data: int):
        super().__init__()
        self.model = model
        self.num_data = num_data
        self.mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)

    def forward(self, x, y):
        return -self.mll(self.model(x), y)  # gpytorch already divides by N
