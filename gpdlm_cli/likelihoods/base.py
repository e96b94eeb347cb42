"""The likelihood interface: log p(y|f) for scalar latent f, its f-derivatives, its mode, and
closed forms where they exist.

Estimators (``gpdlm_cli.estimators``) only talk to a likelihood through this interface, so a new
likelihood is one module here plus one YAML file in ``conf/likelihood``.
"""

from __future__ import annotations

import math

import torch

from ..exceptions import DataError


class Likelihood(torch.nn.Module):
    """p(y|f) for a scalar latent f, elementwise and broadcastable.

    Subclasses fill ``log_prob``, ``dlog_prob``, ``d2log_prob`` and ``mode``. All five likelihoods
    shipped are log-concave in f, which the quadrature (Newton centring) and the uPS rejection
    sampler (maximum over an interval at the clamped mode) rely on.
    """

    name: str = "likelihood"
    task: str = "regression"  # regression | classification | count

    # ----- the model -----------------------------------------------------------------------------
    def log_prob(self, y: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        """log p(y|f), broadcasting y against f."""
        raise NotImplementedError

    def dlog_prob(self, y: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        """d/df log p(y|f)."""
        raise NotImplementedError

    def d2log_prob(self, y: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        """d^2/df^2 log p(y|f) (<= 0: log-concave)."""
        raise NotImplementedError

    def log_prob_derivatives(self, y: torch.Tensor, f: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(d/df, d^2/df^2) log p(y|f) together; subclasses share the work where they can (the
        tilted mode finder calls this once per iteration)."""
        return self.dlog_prob(y, f), self.d2log_prob(y, f)

    def mode(self, y: torch.Tensor) -> torch.Tensor:
        """argmax_f log p(y|f); +-inf where the supremum is approached only in the limit."""
        raise NotImplementedError

    def mean(self, f: torch.Tensor) -> torch.Tensor:
        """E[y | f], the point prediction's building block."""
        raise NotImplementedError

    # ----- closed forms (None = not available: an estimator must approximate) ------------------
    def log_marginal_closed(self, y, mu, var):
        """log E_{N(f|mu,var)}[p(y|f)] in closed form, or None."""
        return None

    def expected_log_prob_closed(self, y, mu, var):
        """E_{N(f|mu,var)}[log p(y|f)] in closed form, or None."""
        return None

    def predictive_mean_closed(self, mu, var):
        """E_{N(f|mu,var)}[E[y|f]] in closed form, or None."""
        return None

    # ----- helpers shared by estimators ----------------------------------------------------------
    def max_log_prob(self, y: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
        """max_{f in [lo, hi]} log p(y|f): by log-concavity, the value at the clamped mode."""
        f = torch.minimum(torch.maximum(self.mode(y).expand_as(lo), lo), hi)
        return self.log_prob(y, f)

    def sup_log_prob(self, y: torch.Tensor) -> torch.Tensor:
        """sup_f log p(y|f) (finite for every likelihood here)."""
        f = self.mode(y)
        return self.log_prob(y, torch.nan_to_num(f, posinf=1e4, neginf=-1e4))

    def validate_targets(self, y) -> None:
        """Raise DataError if y cannot come from this likelihood."""
        if not torch.isfinite(torch.as_tensor(y)).all():
            raise DataError(f"likelihood={self.name}: targets contain NaN or inf")


def _check_binary(name: str, y) -> None:
    y = torch.as_tensor(y)
    bad = ~((y == 0) | (y == 1))
    if bad.any():
        vals = torch.unique(y[bad])[:5].tolist()
        raise DataError(f"likelihood={name} needs targets in {{0, 1}}; found {vals}")


def _check_counts(name: str, y) -> None:
    y = torch.as_tensor(y)
    if (y < 0).any() or (y != torch.round(y)).any() or not torch.isfinite(y).all():
        bad = y[(y < 0) | (y != torch.round(y)) | ~torch.isfinite(y)][:5].tolist()
        raise DataError(f"likelihood={name} needs non-negative integer counts; found {bad}")


LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
