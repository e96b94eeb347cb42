"""The likelihood interface: log p(y|f) for scalar latent f, its f-derivatives, its mode, and
closed forms where they exist.

Estimators (``gpdlm_cli.estimators``) only talk to a likelihood through this interface, so a new
likelihood is one module here plus one YAML file in ``conf/likelihood``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

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

    # ----- the tail form (integration by parts; ``gpdlm_cli/estimators/quadrature.py``) ------------
    #: the noise density of ``tail_forms`` (one per likelihood), or None: no tail form
    tail_noise: NoiseDensity | None = None

    def tail_forms(self, y: torch.Tensor) -> list[TailForm]:
        """The ways of writing p(y|f) = exp(beta f + log_scale) P(e > sign f), e ~ ``tail_noise``
        (``TailForm``); empty where the likelihood has none."""
        return []

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


class NoiseDensity:
    """A log-concave density rho(e) of a scalar noise variable e with its mode at e = 0, for a
    likelihood written as a tail probability P(e > f) of e (``TailForm``)."""

    name = "noise"

    def log_density(self, e: torch.Tensor) -> torch.Tensor:
        """log rho(e)."""
        raise NotImplementedError

    def log_density_derivatives(self, e: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(d/de, d^2/de^2) log rho(e); the first is 0 at e = 0 and decreasing."""
        raise NotImplementedError

    def slope_root(self, a: torch.Tensor) -> torch.Tensor:
        """The e >= 0 where d/de log rho(e) = -a, for a >= 0; +inf where the slope never falls
        that low."""
        raise NotImplementedError


class GumbelMinNoise(NoiseDensity):
    """rho(e) = exp(e - e^e), P(e > f) = exp(-e^f): Poisson's p(0|f) with the exp link."""

    name = "gumbel_min"

    def log_density(self, e):
        return e - torch.exp(e)

    def log_density_derivatives(self, e):
        t = torch.exp(e)
        return 1 - t, -t

    def slope_root(self, a):
        return torch.log1p(a)


class LogisticNoise(NoiseDensity):
    """rho(e) = sigmoid(e) sigmoid(-e), P(e > f) = sigmoid(-f): the logit link, and Poisson's
    p(0|f) = exp(-softplus(f)) with the softplus link."""

    name = "logistic"

    def log_density(self, e):
        return F.logsigmoid(e) + F.logsigmoid(-e)

    def log_density_derivatives(self, e):
        s, s_neg = torch.sigmoid(e), torch.sigmoid(-e)
        return s_neg - s, -2 * s * s_neg

    def slope_root(self, a):
        # sigmoid(-e) - sigmoid(e) = -tanh(e/2) = -a  <=>  e = 2 atanh(a), for a < 1
        return torch.where(a < 1, 2 * torch.atanh(a.clamp_max(1)), torch.full_like(a, math.inf))


class NormalNoise(NoiseDensity):
    """rho(e) = N(e | 0, 1), P(e > f) = Phi(-f): the probit link."""

    name = "normal"

    def log_density(self, e):
        return -LOG_SQRT_2PI - 0.5 * e**2

    def log_density_derivatives(self, e):
        return -e, torch.full_like(e, -1.0)

    def slope_root(self, a):
        return a


GUMBEL_MIN, LOGISTIC, NORMAL = GumbelMinNoise(), LogisticNoise(), NormalNoise()


class TailForm(NamedTuple):
    """p(y|f) = exp(beta f + log_scale) P(e > sign f) with e ~ the likelihood's ``tail_noise``, for the
    points where ``available``: a likelihood that saturates (p(y|f) -> a constant times exp(beta f) on
    one side, a wall on the other) as the tail probability of a noise variable. Under q = N(mu, var),
    with m = mu + beta var and sd = var^(1/2), integrating by parts gives

        E_q[p(y|f)] = exp(log_scale + beta mu + beta^2 var / 2) int rho(e) Phi((e - sign m) / sd) de,

    whose integrand is smooth where q is wide (the adaptive quadrature's tail rule). All four fields
    are tensors of y's shape."""

    beta: torch.Tensor
    log_scale: torch.Tensor
    sign: torch.Tensor
    available: torch.Tensor


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
