"""The estimator interface: the two per-point quantities objectives need from a likelihood.

* ``log_marginal(lik, y, mu, var)``: log E_{N(f|mu,var)}[p(y|f)], the log-loss DLM term (GPflow's
  ``predict_log_density``). Its *gradient* is what an estimator is about: exact, quadrature, biased
  Monte Carlo, or the unbiased product-sampling estimator of the DLM paper (Sec. 3-4).
* ``expected_log_prob(lik, y, mu, var)``: E_{N(f|mu,var)}[log p(y|f)], the ELBO term (GPflow's
  ``variational_expectations``).

Objectives receive an estimator as an injected object, so ``objective x estimator`` pairs need no
code of their own.
"""

from __future__ import annotations

import torch

from ..likelihoods import Likelihood


class Estimator:
    """Base class. Subclasses implement ``log_marginal`` and ``expected_log_prob``."""

    name = "estimator"
    stochastic = False

    def log_marginal(self, lik: Likelihood, y, mu, var) -> torch.Tensor:
        raise NotImplementedError

    def expected_log_prob(self, lik: Likelihood, y, mu, var) -> torch.Tensor:
        raise NotImplementedError

    def check(self, lik: Likelihood, quantity: str) -> None:
        """Raise UnsupportedCombination if this estimator cannot compute ``quantity``
        ('log_marginal' or 'expected_log_prob') for ``lik``. Called once, before training."""

    def seed(self, seed: int, device) -> None:
        """Reset the estimator's own random generator (no-op for deterministic estimators)."""

    def statistics(self) -> dict[str, float]:
        """Estimator diagnostics to log as metrics (e.g. uPS proposals per accepted sample)."""
        return {}
