"""Unbiased product sampling (uPS) of the DLM log-loss gradient (DLM paper, Sec. 3, App. A).

Proposition 1: for samples f_s ~ q~(f) = N(f|mu,var) p(y|f) / C,  C = E_q[p(y|f)], the score of q

    d/dmu  log C  = E_q~[(f - mu) / var]                       ~ mean_s (f_s - mu) / var
    d/dvar log C  = E_q~[((f - mu)^2 / var^2 - 1/var) / 2]     ~ mean_s ((f_s - mu)^2 / var^2 - 1/var) / 2

is an unbiased estimate of the gradient of log C. ``UPSEstimator.log_marginal`` returns the surrogate

    value(mu.detach(), var.detach()) + g_mu.detach() (mu - mu.detach()) + g_var.detach() (var - var.detach())

whose forward value is the best deterministic log C (the likelihood's closed form, else adaptive
Gauss-Hermite quadrature, ``QuadratureEstimator`` with its tail rule) and whose autograd gradient w.r.t. mu and var -- hence w.r.t. every model
parameter -- is the uPS estimate. Gradients w.r.t. *likelihood* parameters (e.g. the Gaussian noise)
come from the deterministic value term alone: uPS only estimates the q-score part, which is the
product-sampling identity of Prop. 1.

Samplers of q~ (``sampler``):

* ``rejection`` -- vectorised over the whole minibatch (no per-point Python loop): every round draws a
  rectangular batch of proposals for all points still short of L accepted samples, accepts with
  probability q(f) p(y|f) / (K h(f)), keeps the first accepted ones in draw order, and repeats for the
  stragglers (at most ``max_rounds`` rounds and ``max_proposals`` proposals per point). Batch sizes
  come from each point's known acceptance rate C / (envelope mass). The envelope K h (``envelope``):

  - ``paper``: App. A verbatim. h = N(mu, n var), intersection points mu +- r, r = sd sqrt(log n/(1-1/n)),
    m1 = max_[mu-r, mu+r] p(y|f) (``lik.max_log_prob``, exact by log-concavity), m2 = 1/sqrt(n), the
    largest n <= max_width with m1/m2 <= l_max = sup_f p(y|f), and K = l_max. Valid but loose: since h is
    normalised, the acceptance rate is C / l_max whatever n is, so the width multiplier changes the
    proposals but never the acceptance rate.
  - ``exact_k``: the paper's proposals N(mu, n var) with the exact envelope constant
    K(n) = max_f q(f) p(y|f) / N(f|mu, n var): for n > 1 the log ratio is strongly concave (modulus
    (1 - 1/n)/var, as log p is concave), so a few Newton steps find its maximum and the
    strong-concavity bound  R(f) + R'(f)^2 / (2 kappa)  makes K a rigorous upper bound even before
    convergence. n in {1..max_width} is chosen to maximise the acceptance rate C / K(n), so here the
    width multiplier does raise it.
  - ``tight`` (default): log q~ is concave (log q and log p are), so tangent lines of log q(f) + log p(y|f)
    around the tilted Laplace mode c (``tilted_laplace``, the quadrature's Newton machinery, width s) bound
    it from above everywhere. Their minimum is a piecewise-exponential envelope, sampled exactly (segment
    by its mass, then inverse CDF inside). With tangents at c + s {0, +-1.41} (L < 20) or
    c + s {0, +-0.82, +-1.88} (L >= 20) it accepts 88.6% / 95.6% of proposals for a Gaussian target, and it
    does not degrade when q and p(y|f) are misaligned or of very different widths (e.g. y = 200 counts
    under q = N(0, 1), where the paper's envelope accepts 6e-8 of its proposals). No width multiplier:
    ``max_width`` is not used.

* ``exact`` -- direct sampling where q~ is known: Gaussian likelihood, q~ = N((mu s2 + var y)/(var + s2),
  var s2/(var + s2)); probit, q~ is skew-normal (sampled by the standard construction, a normal
  truncated in log space plus an independent normal). Other likelihoods: UnsupportedCombination.

Points the sampler cannot serve (non-finite envelope, or no accepted sample within the caps)
fall back to the quadrature gradient (tilted moments by the same adaptive Gauss-Hermite rule); their
share is reported as ``ups_fallback_fraction`` by ``statistics()``, and ``quadrature_unconverged``
counts the points whose tilted mode needed the mode finder's bisection fallback (``tilted_mode``).

``expected_log_prob`` (the ELBO term) is delegated to ``AutoEstimator``: uPS estimates gradients of
log-expectations only (``log_marginal_only = True``).
"""

from __future__ import annotations

import math

import torch

from ..exceptions import UnsupportedCombination
from ..likelihoods import GaussianLikelihood, ProbitLikelihood
from .auto import AutoEstimator
from .base import Estimator
from .monte_carlo import RandomStream
from .quadrature import _LOG_SQRT_2PI, gauss_hermite, log_normal
from .tilted_mode import tilted_laplace

# Tangent points of the tight envelope, in units of the Laplace standard deviation around the tilted
# mode: the optima for a Gaussian target with three (acceptance rate 0.886) and five (0.956) tangents.
# Five pay off for many samples per point, three (fewer envelope evaluations) for few.
_TANGENTS = {3: (-1.4142, 0.0, 1.4142), 5: (-1.8834, -0.8214, 0.0, 0.8214, 1.8834)}
_FIVE_TANGENTS_FROM = 20  # samples per point
_MAX_BATCH_ELEMENTS = 2**22  # proposals per rejection round (all active points together)


# ----- envelopes ------------------------------------------------------------------------------------
class _Envelope:
    """Per-point envelope K h(f) >= q(f) p(y|f); rows index minibatch points."""

    _fields: tuple[str, ...] = ()

    def __getitem__(self, rows):
        out = object.__new__(type(self))
        for k in self._fields:
            setattr(out, k, getattr(self, k)[rows])
        return out

    def log_mass(self) -> torch.Tensor:
        """log of the envelope's integral (acceptance rate = C / mass)."""
        raise NotImplementedError

    def sample(self, num: int, gen: torch.Generator):
        """num proposals per row and the log envelope at each: two (rows, num) tensors."""
        raise NotImplementedError

    def log_env(self, f: torch.Tensor) -> torch.Tensor:
        """log K h(f) at f of shape (rows, G)."""
        raise NotImplementedError


class GaussianEnvelope(_Envelope):
    """K N(f | c, s2) (``paper`` and ``exact_k``); ``width`` is the multiplier n of s2 = n var."""

    _fields = ("c", "s2", "log_k", "width")

    def __init__(self, c, s2, log_k, width):
        self.c, self.s2, self.log_k, self.width = c, s2, log_k, width

    def log_mass(self):
        return self.log_k

    def log_env(self, f):
        return self.log_k.unsqueeze(-1) + log_normal(f, self.c.unsqueeze(-1), self.s2.unsqueeze(-1))

    def sample(self, num, gen):
        eps = torch.randn((self.c.shape[0], num), generator=gen, dtype=self.c.dtype, device=self.c.device)
        f = self.c.unsqueeze(-1) + self.s2.sqrt().unsqueeze(-1) * eps
        return f, self.log_env(f)


class TangentEnvelope(_Envelope):
    """min_k of tangent lines  T_k + g_k (f - x_k)  of the concave T(f) = log q(f) + log p(y|f).

    Line k is used on [z_{k-1}, z_k] (z_{-1} = -inf, z_{K-1} = inf; z_k is where lines k and k+1
    cross, clamped to [x_k, x_{k+1}]). Any breakpoints give a valid envelope, since every tangent
    line lies above T; the outer slopes must satisfy g_0 > 0 > g_{K-1} for the envelope to be
    integrable (rows where they do not get an infinite mass and are not sampled). Sampling uses one
    uniform per proposal: it picks the segment by its mass and, rescaled within the segment, inverts
    the segment's exponential CDF. Everything is computed without infinities (slow on CPUs).
    """

    _fields = ("x", "h", "g", "ref", "z", "log_seg", "cum_lo", "r", "r0", "anchor", "scale", "top")  # by row

    def __init__(self, x, h, g, ref):
        self.x, self.h, self.g, self.ref = x, h, g, ref
        K = x.shape[1]
        z = x[:, :-1] + (h[:, 1:] - h[:, :-1] - g[:, 1:] * (x[:, 1:] - x[:, :-1])) / (g[:, :-1] - g[:, 1:])
        z = torch.nan_to_num(z, nan=0.0, posinf=0.0, neginf=0.0)
        self.z = z = torch.minimum(torch.maximum(z, x[:, :-1]), x[:, 1:])
        lo, hi = torch.empty_like(x), torch.empty_like(x)  # outer ends: placeholders (width 0)
        lo[:, 1:], lo[:, 0], hi[:, :-1], hi[:, -1] = z, z[:, 0], z, z[:, -1]
        width = hi - lo
        first = torch.arange(K, device=x.device) == 0
        outer = first | (torch.arange(K, device=x.device) == K - 1)
        # a = |g| (floored on finite segments so g = 0 is the uniform limit), anchor A = the end where
        # the line is highest, top = line(A); E = expm1(-a width) (-1 on the infinite segments).
        a = torch.where(outer, g.abs(), torch.maximum(g.abs(), 1e-20 / width.clamp_min(1e-30)))
        a = a.clamp_min(torch.finfo(x.dtype).tiny)
        anchor = torch.where(g >= 0, hi, lo)
        top = ref.unsqueeze(-1) + h + g * (anchor - x)
        E = torch.full_like(x, -1.0)
        E[:, 1:-1] = torch.expm1(-a[:, 1:-1] * width[:, 1:-1])
        log_seg = top + torch.log(-E) - torch.log(a)  # log of the mass under line k on its segment
        proper = torch.where(first, g > 0, g < 0) | ~outer
        self.log_seg = torch.where(proper, log_seg, torch.full_like(log_seg, math.inf))
        # Sampler: with u in segment k (cum_lo <= u < cum_lo + P), v = (u - cum_lo)/P ~ U(0,1) and
        # l = log1p(v E): f = A + S l (S = +-1/a) has density ~ exp(g f) on the segment and
        # log envelope(f) = top + l.
        prob = torch.exp(self.log_seg - self.log_seg.logsumexp(-1, keepdim=True))
        self.cum_lo = prob.cumsum(-1) - prob
        r = E / prob.clamp_min(1e-30)
        self.r, self.r0, self.anchor, self.top = r, -self.cum_lo * r, anchor, top
        self.scale = torch.where(g >= 0, 1.0 / a, -1.0 / a)

    def log_mass(self):
        return torch.logsumexp(self.log_seg, -1)

    def log_env(self, f):
        k = torch.searchsorted(self.z.contiguous(), f.contiguous())
        take = lambda t: torch.gather(t, 1, k)  # noqa: E731
        return take(self.h) + take(self.g) * (f - take(self.x)) + self.ref.unsqueeze(-1)

    def sample(self, num, gen):
        rows, K = self.x.shape
        u = torch.rand((rows, num), generator=gen, dtype=self.x.dtype, device=self.x.device)
        k = (u >= self.cum_lo[:, 1:2]).to(torch.uint8)  # the segment, chosen by its mass
        for j in range(2, K):
            k += u >= self.cum_lo[:, j : j + 1]
        k = (K * torch.arange(rows, device=u.device, dtype=torch.int32)).unsqueeze(-1) + k  # flat index
        table = torch.stack([self.r, self.r0, self.anchor, self.scale, self.top]).view(5, rows * K)
        r, r0, anchor, scale, top = table.index_select(1, k.view(-1)).view(5, rows, num).unbind(0)
        ell = torch.log1p(torch.addcmul(r0, u, r))
        return torch.addcmul(anchor, scale, ell), top + ell


def _log_target(lik, y, mu, var, f):
    """T(f) = log N(f|mu,var) + log p(y|f) for f of shape (rows, G)."""
    mu, var = mu.unsqueeze(-1), var.unsqueeze(-1)
    d = f - mu
    log_q = torch.addcmul(-_LOG_SQRT_2PI - 0.5 * torch.log(var), d, d / (-2 * var))
    return log_q + lik.log_prob(y.unsqueeze(-1), f)


def _dlog_target(lik, y, mu, var, f):
    return -(f - mu.unsqueeze(-1)) / var.unsqueeze(-1) + lik.dlog_prob(y.unsqueeze(-1), f)


def paper_envelope(lik, y, mu, var, max_width: int) -> GaussianEnvelope:
    """App. A: the largest n <= max_width with m1/m2 <= l_max, h = N(mu, n var), K = l_max."""
    n = torch.arange(1, max_width + 1, dtype=mu.dtype, device=mu.device)
    ratio = torch.where(n > 1, torch.log(n) / (1 - 1 / n), torch.ones_like(n))  # r/sd -> 1 as n -> 1
    r = var.sqrt().unsqueeze(-1) * ratio.sqrt()
    m1 = lik.max_log_prob(y.unsqueeze(-1), mu.unsqueeze(-1) - r, mu.unsqueeze(-1) + r)
    l_max = lik.sup_log_prob(y)
    ok = (m1 + 0.5 * torch.log(n) <= l_max.unsqueeze(-1)) | (n == 1)
    width = torch.where(ok, n, torch.ones_like(n)).amax(-1)
    return GaussianEnvelope(mu, width * var, l_max, width)


def exact_k_envelope(lik, y, mu, var, max_width: int, start, iters: int = 8) -> GaussianEnvelope:
    """h = N(mu, n var) with K(n) = max_f q p / h (Newton + strong-concavity bound), n maximising C/K."""
    l_max = lik.sup_log_prob(y)  # n = 1: h = q, K = sup p
    if max_width == 1:
        return GaussianEnvelope(mu, var, l_max, torch.ones_like(mu))
    n = torch.arange(2, max_width + 1, dtype=mu.dtype, device=mu.device)
    m, v, yy = mu.unsqueeze(-1), var.unsqueeze(-1), y.unsqueeze(-1)
    kappa = (1 - 1 / n) / v  # R(f) = log n / 2 - kappa (f - mu)^2 / 2 + log p(y|f), R'' <= -kappa
    f = start.unsqueeze(-1).expand(-1, n.shape[0]).clone()
    max_step = 1.0 + 3.0 * (v / (1 - 1 / n)).sqrt()
    for _ in range(iters):
        grad = -kappa * (f - m) + lik.dlog_prob(yy, f)
        hess = -kappa + lik.d2log_prob(yy, f)
        f = f + torch.nan_to_num(torch.clamp(-grad / hess, -max_step, max_step))
    grad = -kappa * (f - m) + lik.dlog_prob(yy, f)
    log_k = 0.5 * torch.log(n) - 0.5 * kappa * (f - m) ** 2 + lik.log_prob(yy, f) + grad**2 / (2 * kappa)
    log_k = torch.nan_to_num(log_k, nan=math.inf)
    log_k = torch.cat([l_max.unsqueeze(-1), log_k], -1)
    best = log_k.argmin(-1, keepdim=True)
    width = (best + 1).squeeze(-1).to(mu.dtype)
    return GaussianEnvelope(mu, width * var, torch.gather(log_k, 1, best).squeeze(-1), width)


def tangent_envelope(lik, y, mu, var, c, s2, num_tangents: int = 5, max_moves: int = 60) -> TangentEnvelope:
    """Tangents of log q + log p at c + s {0, +-0.82, +-1.88} (5) or c + s {0, +-1.41} (3), s = sqrt(s2);
    the outer ones are moved outwards until their slopes point inwards, in the rare case the Laplace
    mode is off."""
    t = torch.tensor(_TANGENTS[num_tangents], dtype=mu.dtype, device=mu.device)
    s = s2.sqrt().unsqueeze(-1)
    x = c.unsqueeze(-1) + s * t
    g = _dlog_target(lik, y, mu, var, x)
    step = s.squeeze(-1).clone()
    for _ in range(max_moves):
        bad_lo, bad_hi = ~(g[:, 0] > 0), ~(g[:, -1] < 0)
        if not bool((bad_lo | bad_hi).any()):
            break
        x[:, 0] -= torch.where(bad_lo, step, torch.zeros_like(step))
        x[:, -1] += torch.where(bad_hi, step, torch.zeros_like(step))
        step = step * 2
        g = _dlog_target(lik, y, mu, var, x)
    T = _log_target(lik, y, mu, var, x)
    ref = T[:, num_tangents // 2]
    return TangentEnvelope(x, T - ref.unsqueeze(-1), g, ref)


# ----- exact samplers ---------------------------------------------------------------------------
def _truncated_normal_below(t0, u):
    """T ~ N(0,1) conditioned on T <= t0 by inverse CDF in log space (float64, any t0)."""
    log_p = torch.log(u) + torch.special.log_ndtr(t0)
    upper = log_p > math.log(0.5)
    mid = torch.where(upper, -torch.special.ndtri(-torch.expm1(log_p)), torch.special.ndtri(log_p.exp()))
    # far lower tail (Phi < 1e-260): asymptotic start, then Newton on log Phi(T) = log_p
    deep = log_p < -600
    T = -torch.sqrt(-2 * log_p)
    for _ in range(3):
        T = -torch.sqrt((-2 * (log_p + _LOG_SQRT_2PI + torch.log(-T))).clamp_min(1.0))
    for _ in range(3):
        mills = torch.exp(-0.5 * T**2 - _LOG_SQRT_2PI - torch.special.log_ndtr(T))
        T = T - (torch.special.log_ndtr(T) - log_p) / mills
    return torch.minimum(torch.where(deep, T, mid), t0)


def exact_tilted_samples(lik, y, mu, var, num: int, gen: torch.Generator) -> torch.Tensor:
    """num exact samples of q~ per point for Gaussian or probit likelihoods, shape (rows, num)."""
    opts = dict(generator=gen, dtype=torch.float64, device=mu.device)
    y64, mu64, var64 = y.double().unsqueeze(-1), mu.double().unsqueeze(-1), var.double().unsqueeze(-1)
    if isinstance(lik, GaussianLikelihood):
        s2 = lik.noise.detach().double()
        mean = (mu64 * s2 + var64 * y64) / (var64 + s2)
        sd = torch.sqrt(var64 * s2 / (var64 + s2))
        f = mean + sd * torch.randn((mu.shape[0], num), **opts)
    elif isinstance(lik, ProbitLikelihood):
        sign, sd, scale = 2 * y64 - 1, var64.sqrt(), torch.sqrt(1 + var64)
        u = torch.rand((mu.shape[0], num), **opts).clamp_min(1e-300)
        T = _truncated_normal_below((sign * mu64 / scale).expand(-1, num), u)
        z = (-sign * sd / scale) * T + torch.randn((mu.shape[0], num), **opts) / scale
        f = mu64 + sd * z
    else:
        raise UnsupportedCombination(_exact_message(lik))
    return f.to(mu.dtype)


def _exact_message(lik) -> str:
    return (
        f"estimator=ups with sampler=exact needs likelihood=gaussian or probit (a closed-form tilted "
        f"density); got likelihood={lik.name}: use sampler=rejection"
    )


# ----- the estimator --------------------------------------------------------------------------------
class UPSEstimator(Estimator):
    """uPS gradient of log E_q[p(y|f)] with ``num_samples`` samples of q~ per point (see module doc)."""

    name = "ups"
    stochastic = True
    log_marginal_only = True

    def __init__(
        self,
        num_samples: int = 10,
        sampler: str = "rejection",
        envelope: str = "tight",
        max_width: int = 10,
        num_nodes: int = 20,
        max_rounds: int = 32,
        max_proposals: int = 2**20,
        newton_iters: int = 8,
    ):
        self.num_samples = int(num_samples)
        self.sampler, self.envelope_kind = sampler, envelope
        self.max_width, self.num_nodes = max_width, num_nodes
        self.max_rounds, self.max_proposals, self.newton_iters = max_rounds, max_proposals, newton_iters
        self.num_tangents = 5 if num_samples >= _FIVE_TANGENTS_FROM else 3
        self.auto = AutoEstimator(num_nodes=num_nodes)
        self.random = RandomStream()
        self._nodes: dict[tuple[torch.dtype, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}
        self.reset_statistics()

    # ----- interface ----------------------------------------------------------------------------
    def check(self, lik, quantity):
        if (
            quantity == "log_marginal"
            and self.sampler == "exact"
            and not isinstance(lik, (GaussianLikelihood, ProbitLikelihood))
        ):
            raise UnsupportedCombination(_exact_message(lik))

    def seed(self, seed, device):
        self.random.seed(seed, device)
        self.reset_statistics()

    def reset_statistics(self):
        self._stats = {"drawn": 0, "accepted": 0, "kept": 0, "rows": 0, "fallback": 0, "width": 0.0, "unconverged": 0}
        self.auto.quadrature.reset_statistics()  # the value's tail rule counts its own mode finder

    def statistics(self):
        s = self._stats
        if s["rows"] == 0:
            return {}
        out = {
            "ups_proposals_per_sample": s["drawn"] / max(s["accepted"], 1),
            "ups_acceptance_rate": s["accepted"] / max(s["drawn"], 1),
            "ups_draws_per_sample": s["drawn"] / max(s["kept"], 1),
            "ups_fallback_fraction": s["fallback"] / s["rows"],
            "quadrature_unconverged": int(s["unconverged"]) + int(self.auto.quadrature._unconverged),
        }
        if self.sampler == "rejection" and self.envelope_kind != "tight":
            out["ups_mean_width"] = s["width"] / s["rows"]
        return out

    def expected_log_prob(self, lik, y, mu, var):
        return self.auto.expected_log_prob(lik, y, mu, var)

    def log_marginal(self, lik, y, mu, var):
        y, mu, var = torch.broadcast_tensors(y, mu, var)
        shape = mu.shape
        y, mu, var = y.reshape(-1), mu.reshape(-1), var.reshape(-1)
        mu_d, var_d = mu.detach(), var.detach()
        laplace = None
        closed = lik.log_marginal_closed(y, mu_d, var_d)
        if closed is None or (self.sampler == "rejection" and self.envelope_kind == "tight"):
            laplace = self.laplace(lik, y, mu_d, var_d)
        if closed is None:
            needs_grad = torch.is_grad_enabled() and any(p.requires_grad for p in lik.parameters())
            with torch.set_grad_enabled(needs_grad):
                value = self.auto.quadrature.log_marginal(lik, y, mu_d, var_d, laplace=laplace)
        else:
            value = closed
        with torch.no_grad():
            f, count = self.sample(lik, y, mu_d, var_d, log_c=value.detach(), laplace=laplace)
            g_mu, g_var = self._score(f, count, mu_d, var_d)
            fallback = count == 0
            if bool(fallback.any()):
                g_mu, g_var = self._fallback(lik, y, mu_d, var_d, laplace, fallback, g_mu, g_var)
        out = value + g_mu * (mu - mu_d) + g_var * (var - var_d)
        return out.reshape(shape)

    # ----- sampling -----------------------------------------------------------------------------
    def laplace(self, lik, y, mu, var) -> tuple[torch.Tensor, torch.Tensor]:
        """(c, s2): mode and Laplace variance of q~ (``tilted_mode``), counted in the statistics."""
        c, s2, unconverged = tilted_laplace(lik, y, mu, var, self.newton_iters)
        self._stats["unconverged"] = self._stats["unconverged"] + unconverged
        return c, s2

    def envelope(self, lik, y, mu, var, laplace: tuple[torch.Tensor, torch.Tensor] | None = None) -> _Envelope:
        """The rejection envelope of q~ for each point (``envelope`` kwarg); no gradients. ``laplace``:
        the points' (c, s2) (``laplace``) when the caller has them."""
        with torch.no_grad():
            if self.envelope_kind == "paper":
                return paper_envelope(lik, y, mu, var, self.max_width)
            if laplace is None:
                laplace = self.laplace(lik, y, mu, var)
            if self.envelope_kind == "exact_k":
                return exact_k_envelope(lik, y, mu, var, self.max_width, start=laplace[0])
            return tangent_envelope(lik, y, mu, var, *laplace, num_tangents=self.num_tangents)

    def sample(self, lik, y, mu, var, log_c=None, laplace=None):
        """L samples of q~ per point: (f, count), f of shape (rows, L) of which the first count[i]
        entries of row i are valid (count < L only where the rejection sampler gave up)."""
        with torch.no_grad():
            mu, var, y = mu.detach(), var.detach(), y.detach()
            gen = self.random.generator(mu.device)
            L, N = self.num_samples, mu.shape[0]
            self._stats["rows"] += N
            if self.sampler == "exact":
                self._stats["drawn"] += N * L
                self._stats["accepted"] += N * L
                self._stats["kept"] += N * L
                return exact_tilted_samples(lik, y, mu, var, L, gen), torch.full_like(mu, L, dtype=torch.long)
            env = self.envelope(lik, y, mu, var, laplace)
            if isinstance(env, GaussianEnvelope):
                self._stats["width"] += float(env.width.sum())
            if log_c is None:
                log_c = self.auto.log_marginal(lik, y, mu, var)
            return self._rejection(lik, y, mu, var, env, log_c, gen)

    def _rejection(self, lik, y, mu, var, env, log_c, gen):
        L, N = self.num_samples, mu.shape[0]
        out = torch.zeros((N, L + 1), dtype=mu.dtype, device=mu.device)  # column L collects surplus
        count = torch.zeros(N, dtype=torch.long, device=mu.device)
        log_mass = env.log_mass()
        alpha = torch.exp(log_c - log_mass).nan_to_num(nan=1e-12).clamp(1e-12, 1.0)
        usable = torch.isfinite(log_mass) & torch.isfinite(log_c)
        idx = None if bool(usable.all()) else torch.nonzero(usable).squeeze(-1)  # None: all rows
        if idx is not None:
            env, y_a, mu_a, var_a, alpha_a = env[idx], y[idx], mu[idx], var[idx], alpha[idx]
        else:
            y_a, mu_a, var_a, alpha_a = y, mu, var, alpha
        drawn, accepted, per_row = 0, 0, 0
        for _ in range(self.max_rounds):
            m = mu_a.shape[0]
            if m == 0 or per_row >= self.max_proposals:
                break
            count_a = count if idx is None else count[idx]
            need = L - count_a
            # enough proposals that Binomial(B, alpha) >= need for most rows; stragglers get another round
            need_f = need.to(mu.dtype)
            req = (need_f + torch.sqrt(need_f * (1 - alpha_a)) + 1) / alpha_a
            target = torch.quantile(req, 0.9) if m > 64 else req.max()
            B = max(min(math.ceil(float(target)), _MAX_BATCH_ELEMENTS // m, self.max_proposals - per_row), 1)
            per_row += B
            f, log_env = env.sample(B, gen)
            log_u = torch.log(torch.rand((m, B), generator=gen, dtype=mu.dtype, device=mu.device))
            acc = log_u <= _log_target(lik, y_a, mu_a, var_a, f) - log_env
            rank = acc.cumsum(1)
            col = torch.where(acc & (rank <= need.unsqueeze(-1)), count_a.unsqueeze(-1) + rank - 1, L)
            n_acc = rank[:, -1]
            count_a = count_a + torch.minimum(n_acc, need)
            drawn += m * B
            accepted += int(n_acc.sum())
            if idx is None:
                out.scatter_(1, col, f)
                count = count_a
            else:
                out[idx] = out[idx].scatter_(1, col, f)
                count[idx] = count_a
            active = count_a < L
            if not bool(active.any()):
                break
            pos = torch.nonzero(active).squeeze(-1)
            idx = pos if idx is None else idx[pos]
            env, y_a, mu_a, var_a, alpha_a = env[pos], y_a[pos], mu_a[pos], var_a[pos], alpha_a[pos]
        self._stats["drawn"] += drawn
        self._stats["accepted"] += accepted
        self._stats["kept"] += int(count.sum())
        return out[:, :L], count

    # ----- gradients ----------------------------------------------------------------------------
    @staticmethod
    def _score(f, count, mu, var):
        valid = torch.arange(f.shape[1], device=f.device) < count.unsqueeze(-1)
        d = torch.where(valid, f - mu.unsqueeze(-1), torch.zeros_like(f))
        n = count.clamp_min(1).to(f.dtype)
        g_mu = d.sum(-1) / n / var
        g_var = 0.5 * ((d**2).sum(-1) / n / var**2 - 1 / var)
        return g_mu, g_var

    def _quadrature_terms(self, lik, y, mu, var, c, s2):
        """Adaptive Gauss-Hermite nodes f_k and log terms of C (as in QuadratureEstimator)."""
        key = (mu.dtype, mu.device)
        if key not in self._nodes:
            self._nodes[key] = gauss_hermite(self.num_nodes, mu)
        x, logw = self._nodes[key]
        f = c.unsqueeze(-1) + torch.sqrt(2 * s2).unsqueeze(-1) * x
        log_proposal = -_LOG_SQRT_2PI - 0.5 * torch.log(s2).unsqueeze(-1) - x**2
        return f, _log_target(lik, y, mu, var, f) - log_proposal + logw

    def _fallback(self, lik, y, mu, var, laplace, rows, g_mu, g_var):
        """Quadrature gradient (tilted moments) where no sample was accepted."""
        idx = torch.nonzero(rows).squeeze(-1)
        self._stats["fallback"] += int(idx.shape[0])
        if laplace is None:
            c, s2 = self.laplace(lik, y[idx], mu[idx], var[idx])
        else:
            c, s2 = laplace[0][idx], laplace[1][idx]
        f, terms = self._quadrature_terms(lik, y[idx], mu[idx], var[idx], c, s2)
        w = torch.softmax(terms, -1)
        d = f - mu[idx].unsqueeze(-1)
        v = var[idx]
        g_mu, g_var = g_mu.clone(), g_var.clone()
        g_mu[idx] = (w * d).sum(-1) / v
        g_var[idx] = 0.5 * ((w * d**2).sum(-1) / v**2 - 1 / v)
        return g_mu, g_var
