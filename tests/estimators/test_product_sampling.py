"""uPS: its samplers draw from the tilted density q~(f) ~ N(f|mu,var) p(y|f) (KS tests against a
scipy.integrate.quad CDF, or a dense trapezoid CDF where tens of thousands of samples are needed),
its envelopes are valid, also at wide latent variance, the tight envelope beats the paper's, and the
gradient is unbiased (float64, fixed seeds)."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from gpdlm_cli.estimators import AutoEstimator, QuadratureEstimator, UPSEstimator
from gpdlm_cli.estimators.quadrature import tilted_laplace
from gpdlm_cli.exceptions import UnsupportedCombination
from gpdlm_cli.likelihoods import LIKELIHOODS, GaussianLikelihood

from ._tilted import dense_log_marginal, dense_mode, dense_tilted_cdf, exact_gradient, tilted_cdf

D = torch.float64


def make_lik(name, noise=None):
    lik = LIKELIHOODS[name]() if noise is None else GaussianLikelihood(noise_init=noise)
    return lik.to(D)


# (likelihood, gaussian noise, y, mu, var): the first four are badly misaligned
CASES = {
    "probit_far": ("probit", None, 1.0, -4.0, 0.25),
    "poisson_200": ("poisson_exp", None, 200.0, 0.0, 1.0),
    "gaussian_far": ("gaussian", 0.01, 3.0, 0.0, 1.0),
    "poisson_zero": ("poisson_exp", None, 0.0, 3.0, 1.0),
    "logit": ("logit", None, 0.0, 5.0, 4.0),
    "softplus": ("poisson_softplus", None, 30.0, -2.0, 2.0),
    "probit_aligned": ("probit", None, 0.0, 0.5, 3.0),
    "probit_extreme": ("probit", None, 1.0, -40.0, 1.0),
}


def draw(case, n_rows, L, seed, **kw):
    """n_rows copies of the case with L samples each: (samples, estimator)."""
    name, noise, y, mu, var = CASES[case]
    lik = make_lik(name, noise)
    est = UPSEstimator(num_samples=L, **kw)
    est.seed(seed, "cpu")
    full = lambda v: torch.full((n_rows,), v, dtype=D)  # noqa: E731
    f, count = est.sample(lik, full(y), full(mu), full(var))
    assert torch.all(count == L)
    return f.reshape(-1).numpy(), est


def ks_pvalue(case, samples):
    name, noise, y, mu, var = CASES[case]
    xs, cdf = tilted_cdf(name, y, mu, var, samples, noise=noise or 1.0)
    return stats.kstest(xs, lambda x: np.interp(x, xs, cdf)).pvalue


TIGHT = [
    "probit_far",
    "poisson_200",
    "gaussian_far",
    "poisson_zero",
    "logit",
    "softplus",
    "probit_aligned",
    "probit_extreme",
]
EXACT_K = ["probit_far", "poisson_200", "gaussian_far", "poisson_zero", "logit", "softplus"]
PAPER = ["probit_far", "gaussian_far", "poisson_zero", "logit", "probit_aligned"]  # acceptance >= 1.7e-4
EXACT = ["probit_far", "gaussian_far", "probit_aligned", "probit_extreme"]


# The tight envelope holds only 1.13x (3 tangents) / 1.05x (5) the target's mass, so its own CDF is
# within 0.018 / 0.008 of the target's (measured): KS needs tens of thousands of samples to tell a
# sampler with the accept/reject step deleted from a correct one. With these sizes it does (every
# case fails under that mutation, checked), and the dense CDF makes them cheap.
KS_SAMPLES = {3: 40_000, 25: 200_000}


@pytest.mark.parametrize("L", [3, 25])  # three and five tangents
@pytest.mark.parametrize("case", TIGHT)
def test_ks_tight_envelope(case, L):
    name, noise, y, mu, var = CASES[case]
    samples, _ = draw(case, KS_SAMPLES[L] // L, L, seed=0, envelope="tight")
    assert stats.kstest(samples, dense_tilted_cdf(name, y, mu, var, noise or 1.0)).pvalue > 0.01


@pytest.mark.parametrize("case", EXACT_K)
def test_ks_exact_k_envelope(case):
    samples, _ = draw(case, 150, 10, seed=1, envelope="exact_k")
    assert ks_pvalue(case, samples) > 0.01


@pytest.mark.parametrize("case", PAPER)
def test_ks_paper_envelope(case):
    samples, _ = draw(case, 50, 10, seed=2, envelope="paper")
    assert ks_pvalue(case, samples) > 0.01


@pytest.mark.parametrize("case", EXACT)
def test_ks_exact_sampler(case):
    samples, _ = draw(case, 150, 10, seed=3, sampler="exact")
    assert ks_pvalue(case, samples) > 0.01


@pytest.mark.parametrize("L", [3, 25])
@pytest.mark.parametrize("case", ["probit_far", "poisson_200", "logit", "softplus"])
def test_tight_sampler_tails_and_acceptance_rate(case, L):
    """KS cannot tell the tight envelope from the target (~90% acceptance), so the rejection step is
    checked where they differ: 30000 samples put the target's mass beyond mode -+ 2.5 Laplace sds
    (quad CDF) there within 4 binomial standard errors (the envelope alone puts ~2x as much), and
    the measured acceptance rate is C / envelope mass within 4 standard errors."""
    name, noise, y, mu, var = CASES[case]
    lik = make_lik(name, noise)
    samples, est = draw(case, 30000 // L, L, seed=7, envelope="tight")
    t1 = lambda v: torch.tensor([v], dtype=D)  # noqa: E731
    mode, s2, _ = tilted_laplace(lik, t1(y), t1(mu), t1(var))
    edges = np.array([mode.item() - 2.5 * s2.sqrt().item(), mode.item() + 2.5 * s2.sqrt().item()])
    _, cdf = tilted_cdf(name, y, mu, var, edges, noise=noise or 1.0)
    n = samples.size
    for p, k in ((cdf[0], (samples < edges[0]).sum()), (1 - cdf[1], (samples > edges[1]).sum())):
        assert abs(k - n * p) < 4 * math.sqrt(n * p * (1 - p)) + 1
    stats_ = est.statistics()
    env = est.envelope(lik, t1(y), t1(mu), t1(var))
    alpha = math.exp(
        QuadratureEstimator(num_nodes=100).log_marginal(lik, t1(y), t1(mu), t1(var)).item() - env.log_mass().item()
    )
    drawn = n * stats_["ups_draws_per_sample"]  # proposals drawn = kept samples x draws per sample
    assert abs(stats_["ups_acceptance_rate"] - alpha) < 4 * math.sqrt(alpha * (1 - alpha) / drawn)


# ----- envelopes ------------------------------------------------------------------------------------
def random_points(name, n, gen):
    mu = -6 + 12 * torch.rand(n, generator=gen, dtype=D)
    var = torch.exp(math.log(1e-3) + math.log(1e4) * torch.rand(n, generator=gen, dtype=D))
    if name == "gaussian":
        y = mu + 16 * torch.rand(n, generator=gen, dtype=D) - 8
    elif name in ("probit", "logit"):
        y = (torch.rand(n, generator=gen, dtype=D) < 0.5).to(D)
    else:
        y = torch.floor(torch.exp(6 * torch.rand(n, generator=gen, dtype=D))) - 1
    return y, mu, var


@pytest.mark.parametrize("name", ["gaussian", "probit", "logit", "poisson_exp", "poisson_softplus"])
def test_envelopes_dominate_the_tilted_density(name):
    """K h(f) >= q(f) p(y|f) on a dense grid (2000 points spanning q and q~) for 200 random
    (mu, var, y) per likelihood, for every envelope (and a width-1 / width-3 paper variant)."""
    gen = torch.Generator().manual_seed(5)
    y, mu, var = random_points(name, 200, gen)
    for noise in [0.01, 1.0] if name == "gaussian" else [None]:
        lik = make_lik(name, noise)
        u = torch.linspace(-12, 12, 1000, dtype=D)
        mode, s2, _ = tilted_laplace(lik, y, mu, var)
        f = torch.cat([mu[:, None] + var.sqrt()[:, None] * u, mode[:, None] + s2.sqrt()[:, None] * u], 1)
        target = -0.5 * math.log(2 * math.pi) - 0.5 * var.log()[:, None] - 0.5 * (f - mu[:, None]) ** 2 / var[:, None]
        target = target + lik.log_prob(y[:, None], f)
        for kw in (
            dict(envelope="tight", num_samples=1),
            dict(envelope="tight", num_samples=50),
            dict(envelope="exact_k"),
            dict(envelope="paper"),
            dict(envelope="paper", max_width=3),
            dict(envelope="exact_k", max_width=1),
        ):
            env = UPSEstimator(**kw).envelope(lik, y, mu, var)
            gap = env.log_env(f) - target
            assert torch.isfinite(env.log_mass()).all(), kw
            assert (gap >= -1e-9 * (1 + target.abs())).all(), (kw, gap.min().item())


def wide_points(name, n, gen):
    """var log-uniform in [10, 1e4] (the regime joint DLM on counts passes through); for
    poisson_softplus half the rows have mu in [-120, -60], where a floored rate made log p
    non-concave (DLM review, F7)."""
    y, mu, var = random_points(name, n, gen)
    var = torch.exp(math.log(10.0) + math.log(1e3) * torch.rand(n, generator=gen, dtype=D))
    if name == "poisson_softplus":
        mu[: n // 2] = -120 + 60 * torch.rand(n // 2, generator=gen, dtype=D)
        var[: n // 2] = torch.exp(math.log(1e-2) + math.log(1e3) * torch.rand(n // 2, generator=gen, dtype=D))
        y[: n // 2] = torch.randint(0, 6, (n // 2,), generator=gen).to(D)
    return y, mu, var


@pytest.mark.parametrize("name", ["probit", "logit", "poisson_exp", "poisson_softplus"])
def test_envelopes_dominate_the_tilted_density_at_wide_variance(name):
    """As above for 100 rows per likelihood with var in [10, 1e4], on a grid around q and around the
    tilted mode found by the independent numpy bisection (``dense_mode``). The 12-step Newton of
    old left such rows far from their mode, and the tangent envelope built there was up to 427 nats
    below the target (DLM review, F1)."""
    gen = torch.Generator().manual_seed(8)
    y, mu, var = wide_points(name, 100, gen)
    lik = make_lik(name)
    c_ref, s2_ref = dense_mode(name, y.numpy(), mu.numpy(), var.numpy())
    u = torch.linspace(-12, 12, 1000, dtype=D)
    c_ref, s_ref = torch.as_tensor(c_ref), torch.as_tensor(s2_ref).sqrt()
    f = torch.cat([mu[:, None] + var.sqrt()[:, None] * u, c_ref[:, None] + s_ref[:, None] * u], 1)
    target = -0.5 * math.log(2 * math.pi) - 0.5 * var.log()[:, None] - 0.5 * (f - mu[:, None]) ** 2 / var[:, None]
    target = target + lik.log_prob(y[:, None], f)
    for kw in (
        dict(envelope="tight", num_samples=1),
        dict(envelope="tight", num_samples=50),
        dict(envelope="exact_k"),
        dict(envelope="paper"),
    ):
        env = UPSEstimator(**kw).envelope(lik, y, mu, var)
        gap = env.log_env(f) - target
        assert torch.isfinite(env.log_mass()).all(), kw
        assert (gap >= -1e-9 * (1 + target.abs())).all(), (kw, gap.min().item())


def acceptance(case, n_rows=40, L=10, seed=4, **kw):
    _, est = draw(case, n_rows, L, seed, **kw)
    return est.statistics()


@pytest.mark.parametrize("case", ["probit_far", "gaussian_far", "poisson_zero", "logit"])
def test_tight_envelope_needs_far_fewer_proposals_than_the_papers(case):
    """Misaligned points: the paper's proposals per accepted sample are 31 to 5800 here, the tight
    envelope's about 1.1 (it accepts ~89% of proposals with three tangents)."""
    tight = acceptance(case, envelope="tight")["ups_proposals_per_sample"]
    paper = acceptance(case, n_rows=10, envelope="paper")["ups_proposals_per_sample"]
    assert tight < 1.3
    assert paper > 10 * tight


@pytest.mark.parametrize("case", ["probit_far", "gaussian_far", "poisson_zero", "logit"])
def test_width_multiplier_raises_acceptance_with_an_exact_constant(case):
    """exact_k chooses n in 1..10 with the exact K(n); against n = 1 (K = sup p, the paper's constant)
    the acceptance rate rises by 4x or more on these misaligned points (measured, 400 samples)."""
    wide = acceptance(case, envelope="exact_k", max_width=10)
    narrow = acceptance(case, envelope="exact_k", max_width=1)
    assert wide["ups_mean_width"] > 1 and narrow["ups_mean_width"] == 1
    assert wide["ups_acceptance_rate"] > 4 * narrow["ups_acceptance_rate"]


@pytest.mark.parametrize("max_width", [1, 10])
def test_paper_envelope_accepts_c_over_sup_p_whatever_the_width(max_width):
    """App. A's constant K = sup_f p(y|f) with a normalised proposal h makes the acceptance rate
    C / sup p for every width n (why exact_k exists). Measured on a misaligned Gaussian point, where
    both are closed form: C = N(y | mu, var + s2), sup p = (2 pi s2)^(-1/2); within 4 binomial
    standard errors, at width 1 and at the width 10 the envelope chooses there."""
    name, noise, y, mu, var = CASES["gaussian_far"]
    s2 = float(make_lik(name, noise).noise.detach())
    alpha = math.sqrt(s2 / (var + s2)) * math.exp(-((y - mu) ** 2) / (2 * (var + s2)))
    _, est = draw("gaussian_far", 40, 10, seed=12, envelope="paper", max_width=max_width)
    s = est.statistics()
    drawn = 400 * s["ups_draws_per_sample"]  # proposals drawn = kept samples x draws per kept sample
    assert s["ups_mean_width"] == max_width
    assert abs(s["ups_acceptance_rate"] - alpha) < 4 * math.sqrt(alpha * (1 - alpha) / drawn)


# ----- gradients ------------------------------------------------------------------------------------
GRAD_CASES = {
    "probit_far": ["tight", "exact_k", "paper", "exact"],
    "probit_aligned": ["tight", "exact_k", "exact"],
    "poisson_200": ["tight", "exact_k"],
    "poisson_small": ["tight", "paper"],
    "logit": ["tight"],
}
CASES["poisson_small"] = ("poisson_exp", None, 3.0, 1.0, 0.5)


def _exact_gradient(case):
    name, noise, y, mu, var = CASES[case]
    if name == "probit":  # closed form: autograd of log Phi((2y - 1) mu / sqrt(1 + var))
        m = torch.tensor(mu, dtype=D, requires_grad=True)
        v = torch.tensor(var, dtype=D, requires_grad=True)
        g = torch.autograd.grad(torch.special.log_ndtr((2 * y - 1) * m / torch.sqrt(1 + v)), (m, v))
        return g[0].item(), g[1].item()
    return exact_gradient(name, y, mu, var, noise or 1.0)


@pytest.mark.parametrize("case,how", [(c, h) for c, hs in GRAD_CASES.items() for h in hs])
def test_ups_gradient_is_unbiased(case, how):
    """The mean of 3000 single-sample uPS gradients is within 4 standard errors of the exact
    gradient, for mu and var (probit: closed form; Poisson and logit: scipy quadrature)."""
    name, noise, y, mu, var = CASES[case]
    lik, n = make_lik(name, noise), 3000 if how != "paper" else 600
    kw = dict(sampler="exact") if how == "exact" else dict(envelope=how)
    est = UPSEstimator(num_samples=1, **kw)
    est.seed(6, "cpu")
    m = torch.full((n,), mu, dtype=D, requires_grad=True)
    v = torch.full((n,), var, dtype=D, requires_grad=True)
    est.log_marginal(lik, torch.full((n,), y, dtype=D), m, v).sum().backward()
    assert est.statistics()["ups_fallback_fraction"] == 0
    for g, target in zip((m.grad, v.grad), _exact_gradient(case)):
        assert abs(g.mean().item() - target) < 4 * g.std().item() / math.sqrt(n)


WIDE_CASES = [
    ("poisson_exp", 100.0, 0.0, 36.0),
    ("poisson_exp", 30.0, 0.0, 25.0),
    ("poisson_softplus", 30.0, -2.0, 300.0),
    ("logit", 1.0, -3.0, 300.0),
]


@pytest.mark.parametrize("name,y,mu,var", WIDE_CASES)
def test_ups_at_wide_variance_is_unbiased_with_tight_acceptance(name, y, mu, var):
    """The review's failing points (F1): the mean of 3000 single-sample uPS gradients is within 4
    standard errors of the dense reference's gradient (before: d/dvar +0.010 against -0.0057 at
    (100, 0, 36)), no point falls back, the tight envelope still accepts ~89% of proposals (before:
    ~0, then the fallback), and the value is the dense log E_q[p] (before: -36.3 against -6.16 at
    (30, 0, 25); 20-node quadrature: 1e-11 nats for poisson_exp, 1e-8 for softplus, 0.01 for the logit)."""
    lik, n = make_lik(name), 3000
    log_z, d_mu, d_var = dense_log_marginal(name, y, mu, var)
    est = UPSEstimator(num_samples=1)
    est.seed(9, "cpu")
    m = torch.full((n,), mu, dtype=D, requires_grad=True)
    v = torch.full((n,), var, dtype=D, requires_grad=True)
    value = est.log_marginal(lik, torch.full((n,), y, dtype=D), m, v)
    value.sum().backward()
    stats_ = est.statistics()
    assert stats_["ups_fallback_fraction"] == 0 and stats_["quadrature_unconverged"] == 0
    assert stats_["ups_proposals_per_sample"] < 1.3
    for g, target in ((m.grad, d_mu), (v.grad, d_var)):
        assert abs(g.mean().item() - target) < 4 * g.std().item() / math.sqrt(n)
    assert value[0].item() == pytest.approx(log_z, abs={"poisson_exp": 1e-9, "poisson_softplus": 1e-7}.get(name, 0.02))


def test_value_is_the_deterministic_log_marginal():
    y, mu, var = torch.tensor([1.0, 0.0]), torch.tensor([-4.0, 0.3]), torch.tensor([0.25, 2.0])
    y, mu, var = y.to(D), mu.to(D), var.to(D)
    probit = make_lik("probit")
    est = UPSEstimator(num_samples=4)
    est.seed(0, "cpu")
    torch.testing.assert_close(est.log_marginal(probit, y, mu, var), probit.log_marginal_closed(y, mu, var))
    pois = make_lik("poisson_exp")
    yc = torch.tensor([200.0, 3.0], dtype=D)
    torch.testing.assert_close(
        est.log_marginal(pois, yc, mu, var), QuadratureEstimator(num_nodes=20).log_marginal(pois, yc, mu, var)
    )


def test_likelihood_parameter_gradient_comes_from_the_deterministic_value():
    """Gaussian noise: d/d(raw noise) of the uPS surrogate equals that of the closed form exactly;
    mu and var get the (random) uPS gradient."""
    lik = make_lik("gaussian", 0.3)
    y = torch.tensor([0.5, 2.0, -1.0], dtype=D)
    mu0, var0 = torch.tensor([0.0, 0.0, 1.0], dtype=D), torch.tensor([1.0, 0.1, 2.0], dtype=D)
    est = UPSEstimator(num_samples=5)
    est.seed(0, "cpu")
    raw = lik.gp.raw_noise
    mu, var = mu0.clone().requires_grad_(), var0.clone().requires_grad_()
    g_ups = torch.autograd.grad(est.log_marginal(lik, y, mu, var).sum(), (raw, mu))
    mu2 = mu0.clone().requires_grad_()
    g_ref = torch.autograd.grad(lik.log_marginal_closed(y, mu2, var0).sum(), (raw, mu2))
    assert torch.equal(g_ups[0], g_ref[0])
    assert not torch.allclose(g_ups[1], g_ref[1])


def test_fallback_when_the_sampler_gives_up():
    """The paper's envelope for y=200 under N(0,1) accepts 6e-8 of its proposals: with a cap of 1000
    proposals per point every point falls back to the quadrature gradient, and says so."""
    name, _, y, mu, var = CASES["poisson_200"]
    lik = make_lik(name)
    est = UPSEstimator(num_samples=5, envelope="paper", max_proposals=1000)
    est.seed(0, "cpu")
    m = torch.full((3,), mu, dtype=D, requires_grad=True)
    v = torch.full((3,), var, dtype=D, requires_grad=True)
    est.log_marginal(lik, torch.full((3,), y, dtype=D), m, v).sum().backward()
    assert est.statistics()["ups_fallback_fraction"] == 1.0
    gm, gv = exact_gradient(name, y, mu, var)
    torch.testing.assert_close(m.grad, torch.full((3,), gm, dtype=D), rtol=1e-6, atol=0)
    torch.testing.assert_close(v.grad, torch.full((3,), gv, dtype=D), rtol=1e-6, atol=0)


def test_minibatch_with_mixed_difficulty_is_served_without_fallback():
    """One vectorised call over points of very different acceptance rates (paper envelope:
    1 to 2e-4) fills every point with L samples, and statistics() reports the averages."""
    lik = make_lik("probit")
    mu = torch.cat([torch.full((200,), 2.0), torch.full((5,), -4.0)]).to(D)
    var = torch.full((205,), 0.25, dtype=D)
    est = UPSEstimator(num_samples=10, envelope="paper")
    est.seed(0, "cpu")
    f, count = est.sample(lik, torch.ones(205, dtype=D), mu, var)
    assert torch.all(count == 10) and torch.isfinite(f).all()
    s = est.statistics()
    assert s["ups_fallback_fraction"] == 0 and 0 < s["ups_acceptance_rate"] < 1
    assert s["ups_proposals_per_sample"] == pytest.approx(1 / s["ups_acceptance_rate"])
    est.reset_statistics()
    assert est.statistics() == {}


def test_expected_log_prob_is_delegated_and_flagged():
    lik = make_lik("poisson_exp")
    y, mu, var = torch.tensor([3.0], dtype=D), torch.tensor([0.2], dtype=D), torch.tensor([0.7], dtype=D)
    assert UPSEstimator.log_marginal_only is True and UPSEstimator.stochastic is True
    assert torch.equal(
        UPSEstimator().expected_log_prob(lik, y, mu, var), AutoEstimator().expected_log_prob(lik, y, mu, var)
    )


def test_exact_sampler_needs_a_closed_form_tilted_density():
    est = UPSEstimator(sampler="exact")
    for ok in ("gaussian", "probit"):
        est.check(make_lik(ok), "log_marginal")
    for bad in ("logit", "poisson_exp", "poisson_softplus"):
        with pytest.raises(UnsupportedCombination, match="sampler=rejection") as err:
            est.check(make_lik(bad), "log_marginal")
        assert "\n" not in str(err.value)
    UPSEstimator().check(make_lik("poisson_exp"), "log_marginal")  # rejection serves every likelihood


@pytest.mark.parametrize("envelope", ["tight", "exact_k", "paper"])
def test_float32_gradients_are_finite(envelope):
    lik = LIKELIHOODS["poisson_exp"]()
    gen = torch.Generator().manual_seed(0)
    mu = torch.randn(500, generator=gen).requires_grad_()
    var = (0.05 + torch.rand(500, generator=gen)).requires_grad_()
    y = torch.poisson(torch.exp(torch.randn(500, generator=gen)), generator=gen)
    est = UPSEstimator(num_samples=10, envelope=envelope)
    est.seed(0, "cpu")
    out = est.log_marginal(lik, y, mu, var)
    out.sum().backward()
    assert out.dtype == torch.float32 and torch.isfinite(mu.grad).all() and torch.isfinite(var.grad).all()
    assert est.statistics()["ups_fallback_fraction"] == 0
