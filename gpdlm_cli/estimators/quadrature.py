"""Gauss-Hermite quadrature of log-expectations, computed in log space.

log E_q[p(y|f)] is evaluated as a logsumexp over nodes, never as the log of a sum of
probabilities, so a Poisson count in the hundreds does not underflow to -inf (gpytorch's
``log_marginal`` does). With ``adaptive=True`` the nodes are centred at the mode of the tilted
density q(f) p(y|f) and scaled by its Laplace width (``tilted_mode.tilted_laplace``: a bracketed,
safeguarded Newton iteration that converges at any variance of q), so a likelihood much narrower
than q -- large counts, confident classes -- is still resolved (the *Laplace rule*):

    log E_q[p] = log int N(f|c,s2) [q(f) p(y|f) / N(f|c,s2)] df
               ~ logsumexp_k( log w_k/sqrt(pi) + log q(f_k) + log p(y|f_k) - log N(f_k|c,s2) )

with f_k = c + sqrt(2 s2) x_k. The centre (c, s2) is held fixed (detached) when differentiating:
the identity holds for any fixed centre, so autograd of this expression is the gradient of the
quadrature rule itself.

**The tail rule.** Where the likelihood saturates (y = 0 counts, binary classes, small counts under
a very negative mean) and q is wide, the tilted density is q cut by a soft wall: flat on one side,
falling like exp(-e^f) (Poisson) or e^-f (logit) on the other, within a distance of its mode much
smaller than q's sd. No Gaussian rule fits that shape: 20 Laplace-centred nodes lose up to 0.017
nats at var = 36 and 0.18 at var = 1000 (y = 0, mu = -9) for Poisson-exp, 0.19 for probit, and more
nodes barely help (50: 0.071 at var = 1000; issue 19, item 6). Each such likelihood writes itself as
the tail probability of a noise variable (``Likelihood.tail_forms``): p(y|f) = exp(beta f +
log_scale) P(e > sign f), e with a log-concave density rho of mode 0 (Gumbel-min for the exp link,
logistic, normal). Completing the square in q(f) e^(beta f) and integrating by parts moves the wall
into its derivative rho and q into its CDF:

    E_q[p(y|f)] = exp(log_scale + beta mu + beta^2 var / 2) int rho(e) Phi((e - shift) / sd) de,
    shift = sign (mu + beta var),  sd = var^(1/2).

Here the sharp factor is the fixed-width density rho and the wide one a smooth CDF, so the product
is close to rho (or to a Gaussian tail) and the same Gauss-Hermite rule, centred at the product's
mode with its Laplace width (``tilted_mode.tail_laplace``), resolves it; the gradient again flows
through the integrand with the nodes held fixed. The two rules are dual (each is the other with the
roles of q and the wall swapped), so each point takes the one that suits it: the tail rule where var
>= ``TAIL_MIN_VAR[noise]`` (4 for Gumbel-min, 10 for logistic, 2 for normal: where 20 nodes of the
tail rule start to beat 20 of the Laplace rule) and the depth shift / sd lies in ``TAIL_DEPTHS`` =
[-4, 20] (from a likelihood's forms, the one of smallest depth). Below -4, q lies in the
likelihood's flat part and the Laplace rule is exact to ~1e-5; beyond 20, the Gaussian has passed
the wall, the tilted density is the likelihood's own bump, and the constant exp(...) above, ~depth^2
/ 2 nats, would cancel against a far tail of Phi (float32 keeps 7 digits of it). Measured against a
dense log-space reference for y <= 1000, |mu| <= 20 and var 1e-4..1e3 (41 x 29 values of mu x var;
``tests/estimators/test_tail_quadrature.py``), 20 nodes are within 2.5e-4 nats for poisson_exp,
1.8e-4 for poisson_softplus (whose y >= 1 have no tail form: its rate grows linearly, there is no
wall), 8e-5 for logit and 7e-6 for probit (the Laplace rule alone: 0.18, 0.11, 0.11, 0.19); 64 nodes
within 3e-7. On the CPU the points are split between the rules; on an accelerator both are evaluated
for every point and selected (no host synchronisation).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from .base import Estimator
from .tilted_mode import TiltedLaplace, tail_laplace, tilted_laplace  # noqa: F401  (re-exported)

_LOG_SQRT_PI = 0.5 * math.log(math.pi)
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)

#: the tail rule takes a point whose var >= TAIL_MIN_VAR[noise] and whose depth sign (mu + beta var) / sd
#: lies in TAIL_DEPTHS (module doc: where 20 nodes of the tail rule beat 20 of the Laplace rule)
TAIL_MIN_VAR = {"gumbel_min": 4.0, "logistic": 10.0, "normal": 2.0}
TAIL_DEPTHS = (-4.0, 20.0)


@functools.lru_cache(maxsize=64)
def _gauss_hermite(num_nodes: int, dtype: torch.dtype, device: torch.device):
    nodes, w = np.polynomial.hermite.hermgauss(num_nodes)
    x = torch.as_tensor(nodes, dtype=dtype, device=device)
    logw = torch.as_tensor(np.log(w), dtype=dtype, device=device) - _LOG_SQRT_PI
    return x, logw


def gauss_hermite(num_nodes: int, like: torch.Tensor):
    """Nodes x_k and log weights log(w_k / sqrt(pi)) for E_{N(0,1/2)}-style integrals (cached per
    dtype and device: computing them costs ~1 ms, more than the quadrature itself)."""
    return _gauss_hermite(num_nodes, like.dtype, like.device)


def log_normal(f, mu, var):
    return -_LOG_SQRT_2PI - 0.5 * torch.log(var) - 0.5 * (f - mu) ** 2 / var


class QuadratureEstimator(Estimator):
    """Gauss-Hermite with ``num_nodes`` nodes; ``adaptive`` centres the nodes on the tilted density, and
    ``tail_rule`` (with ``adaptive``) integrates saturating likelihoods under a wide q in their tail form
    (module doc; ``tail_rule=False``: the Laplace rule for every point).

    ``newton_iters`` is the mode finder's budget before a point counts as unconverged and is finished
    by its bracketed bisection fallback (the tail rule's mode finder likewise); ``statistics()`` reports
    ``quadrature_unconverged``, the number of such point evaluations since construction (or
    ``reset_statistics``)."""

    name = "quadrature"

    def __init__(self, num_nodes: int = 20, adaptive: bool = True, newton_iters: int = 16, tail_rule: bool = True):
        self.num_nodes = num_nodes
        self.adaptive = adaptive
        self.newton_iters = newton_iters
        self.tail_rule = tail_rule
        self.partition = None  # None: split the points between the two rules on the CPU only (log_marginal)
        self.reset_statistics()

    def reset_statistics(self):
        self._centred = 0  # points centred by the mode finder
        self._unconverged = 0  # of which needed the bisection fallback (a device tensor once used)

    def statistics(self):
        if not self._centred:
            return {}
        return {"quadrature_unconverged": int(self._unconverged)}

    def centre(self, lik, y, mu, var):
        """(c, s2) of the tilted density, with the statistics updated (no host synchronisation)."""
        c, s2, unconverged = tilted_laplace(lik, y, mu, var, self.newton_iters)
        self._centred += c.numel()
        self._unconverged = self._unconverged + unconverged
        return c, s2

    def log_marginal(self, lik, y, mu, var, laplace=None):
        """log E_q[p(y|f)]; ``laplace``: the tilted densities' (centre, variance) for every point where the
        caller has them already (uPS), so that the Laplace rule does not look for them again."""
        x, logw = gauss_hermite(self.num_nodes, mu)
        if not self.adaptive:
            f = mu.unsqueeze(-1) + torch.sqrt(2 * var).unsqueeze(-1) * x
            return torch.logsumexp(lik.log_prob(y.unsqueeze(-1), f) + logw, dim=-1)
        y, mu, var = torch.broadcast_tensors(y, mu, var)
        shape = mu.shape
        y, mu, var = y.reshape(-1), mu.reshape(-1), var.reshape(-1)
        if laplace is not None:
            laplace = tuple(a.reshape(-1) for a in laplace)
        form = self.tail_form(lik, y, mu, var)
        partition = mu.device.type == "cpu" if self.partition is None else self.partition
        if form is None or (partition and not bool(form[0].any())):
            return self._laplace_rule(lik, y, mu, var, x, logw, laplace).reshape(shape)
        use, beta, log_scale, sign = form
        if partition:  # each point by its own rule (on the CPU the index sets cost nothing)
            tail, plain = torch.nonzero(use).squeeze(-1), torch.nonzero(~use).squeeze(-1)
            out = torch.cat(
                [
                    self._laplace_rule(
                        lik,
                        y[plain],
                        mu[plain],
                        var[plain],
                        x,
                        logw,
                        None if laplace is None else (laplace[0][plain], laplace[1][plain]),
                    ),
                    self._tail_rule(
                        lik.tail_noise, beta[tail], log_scale[tail], sign[tail], mu[tail], var[tail], x, logw
                    ),
                ]
            )
            return out[torch.argsort(torch.cat([plain, tail]))].reshape(shape)
        # on an accelerator both rules for every point, selected by ``use`` (no host synchronisation);
        # the tail rule's unused points get harmless inputs, so that their (zero) gradients stay finite
        safe = torch.full_like(var, TAIL_MIN_VAR[lik.tail_noise.name])
        tail = self._tail_rule(
            lik.tail_noise,
            torch.where(use, beta, 0),
            torch.where(use, log_scale, 0),
            torch.where(use, sign, 1),
            torch.where(use, mu, 0),
            torch.where(use, var, safe),
            x,
            logw,
        )
        return torch.where(use, tail, self._laplace_rule(lik, y, mu, var, x, logw, laplace)).reshape(shape)

    def tail_form(self, lik, y, mu, var):
        """(use, beta, log_scale, sign) per point: the likelihood's ``TailForm`` with the smallest depth
        sign (mu + beta var) / sd, and whether the tail rule takes the point (var >= TAIL_MIN_VAR[noise] and
        the depth in TAIL_DEPTHS); None where the likelihood has no tail form."""
        forms = lik.tail_forms(y) if self.tail_rule else []
        if not forms:
            return None
        mu, var = mu.detach(), var.detach()
        sd = torch.sqrt(var)
        best = None
        for beta, log_scale, sign, available in forms:
            depth = torch.where(available, sign * (mu + beta * var) / sd, torch.inf)
            if best is None:
                best = [depth, beta, log_scale, sign]
            else:
                better = depth < best[0]
                best = [torch.where(better, new, old) for new, old in zip((depth, beta, log_scale, sign), best)]
        depth, beta, log_scale, sign = best
        use = (var >= TAIL_MIN_VAR[lik.tail_noise.name]) & (depth >= TAIL_DEPTHS[0]) & (depth <= TAIL_DEPTHS[1])
        return use, beta.to(mu.dtype), log_scale.to(mu.dtype), sign.to(mu.dtype)

    def _laplace_rule(self, lik, y, mu, var, x, logw, laplace=None):
        """Gauss-Hermite centred at the tilted mode (module doc)."""
        c, s2 = self.centre(lik, y, mu, var) if laplace is None else laplace
        f = c.unsqueeze(-1) + torch.sqrt(2 * s2).unsqueeze(-1) * x
        log_proposal = -_LOG_SQRT_2PI - 0.5 * torch.log(s2).unsqueeze(-1) - x**2
        terms = log_normal(f, mu.unsqueeze(-1), var.unsqueeze(-1)) + lik.log_prob(y.unsqueeze(-1), f) - log_proposal
        return torch.logsumexp(terms + logw, dim=-1)

    def _tail_rule(self, noise, beta, log_scale, sign, mu, var, x, logw):
        """The tail form (module doc): log_scale + beta mu + beta^2 var / 2 + log int rho(e) Phi((e - shift)/sd) de,
        shift = sign (mu + beta var), by Gauss-Hermite centred at the integrand's mode (``tail_laplace``)."""
        shift, sd = sign * (mu + beta * var), torch.sqrt(var)
        c, s2, unconverged = tail_laplace(noise, shift, var, self.newton_iters)
        self._centred += c.numel()
        self._unconverged = self._unconverged + unconverged
        e = c.unsqueeze(-1) + torch.sqrt(2 * s2).unsqueeze(-1) * x
        terms = (
            noise.log_density(e)
            + torch.special.log_ndtr((e - shift.unsqueeze(-1)) / sd.unsqueeze(-1))
            + x**2
            + _LOG_SQRT_2PI
            + 0.5 * torch.log(s2).unsqueeze(-1)  # - log N(e | c, s2) at the nodes
        )
        return log_scale + beta * mu + 0.5 * beta**2 * var + torch.logsumexp(terms + logw, dim=-1)

    def expected_log_prob(self, lik, y, mu, var):
        x, logw = gauss_hermite(self.num_nodes, mu)
        f = mu.unsqueeze(-1) + torch.sqrt(2 * var).unsqueeze(-1) * x
        return (lik.log_prob(y.unsqueeze(-1), f) * logw.exp()).sum(-1)

    def expectation(self, fn, mu, var):
        """E_{N(f|mu,var)}[fn(f)] (e.g. the predictive mean E[y] = E_q[E[y|f]])."""
        x, logw = gauss_hermite(self.num_nodes, mu)
        f = mu.unsqueeze(-1) + torch.sqrt(2 * var).unsqueeze(-1) * x
        return (fn(f) * logw.exp()).sum(-1)
