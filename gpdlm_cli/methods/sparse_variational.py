"""The sparse variational family: SVGP / beta-ELBO, log-loss DLM and square-loss DLM (DLM paper,
Sec. 2 and 6), each with a ``joint`` variant and (DLM, sq-DLM) a ``fixed`` variant.

All three share one model, q(u) = N(m, V) over M inducing values (``models.SparseVariationalGP``);
only the objective differs. The fixed variant is the paper's two-stage protocol (App. D): train SVGP
(beta = 1), freeze its kernel, likelihood and inducing inputs, reset q(u) and learn it anew.

Parameter groups (``trainer.lr_scale.<group>``): ``variational`` (m~, the Cholesky factor of S),
``inducing`` (Z), ``kernel`` (kernel and mean-function hyperparameters), ``likelihood``, and
``features`` (the network of ``features=nn``: the GP then sees g(x), inducing points in feature space).
"""

from __future__ import annotations

import torch

from ..exceptions import UnsupportedCombination, param_error
from . import components as C
from . import feature_maps as FM
from .base import Method, Stage

MODELS = ("svgp", "dlm", "sq_dlm")

#: what each model's data term needs from the estimator
_QUANTITY = {"svgp": "expected_log_prob", "dlm": "log_marginal", "sq_dlm": None}


def validate(cfg) -> None:
    """Checks of the model keys that need no data."""
    m = cfg.model
    C.check_inducing(m)
    FM.check_features(cfg.features)
    if m.variant not in ("joint", "fixed"):
        raise param_error("variant", f"model={m.name}", "'joint' or 'fixed'", m.variant)
    if m.name == "svgp" and m.variant == "fixed":
        raise UnsupportedCombination("model.variant=fixed applies to dlm and sq_dlm (it is defined by a prior SVGP fit)")
    if m.name == "sq_dlm":
        C.gaussian_only(cfg, "model=sq_dlm (square loss) is a regression method: use likelihood=gaussian")


def check_sizes(cfg, n_train: int) -> None:
    C.check_inducing(cfg.model, n_train)


def parameter_groups(model, likelihood) -> dict[str, list]:
    """The named groups of a ``SparseVariationalGP`` and its likelihood."""
    variational = model.variational_parameters()
    inducing = [model.variational_strategy.inducing_points]
    taken = {id(p) for p in variational + inducing}
    kernel = [p for p in model.parameters() if id(p) not in taken]
    return {"variational": variational, "inducing": inducing, "kernel": kernel, "likelihood": list(likelihood.parameters())}


def build(cfg, data, task: str) -> Method:
    from .. import objectives as O
    from ..estimators import AutoEstimator
    from ..models import SparseVariationalGP
    from ..models.feature_input import FeatureInputGP

    m = cfg.model
    x, y = data.x_train, data.y_train
    n, D = x.shape
    device, dtype = x.device, x.dtype
    check_sizes(cfg, n)
    likelihood = C.build_likelihood(cfg.likelihood)
    likelihood.validate_targets(y)
    features = FM.build_input_map(cfg.features, D, cfg.seed).to(device, dtype) if FM.uses_features(cfg) else None
    with torch.no_grad():  # the GP's inputs: g(x), so the inducing points start in feature space
        x_in = x if features is None else features(x)
    kernel = C.build_kernel(cfg.kernel, x_in.shape[1], cfg.seed)
    if m.num_inducing > getattr(kernel, "num_features", m.num_inducing):
        raise UnsupportedCombination(f"kernel={cfg.kernel.name} has rank d={kernel.num_features}: model.num_inducing must be <= d")
    mean = C.build_mean(m.mean, task)
    beta = float(cfg.objective.beta)
    estimator = C.build_estimator(cfg.estimator)

    Z = C.initial_inducing_points(x_in, m.num_inducing, m.inducing_init, cfg.seed)
    model = SparseVariationalGP(Z, kernel, mean, learn_inducing=m.learn_inducing, jitter=m.jitter)
    model = model.to(device=device, dtype=dtype)
    likelihood = likelihood.to(device=device, dtype=dtype)
    groups = parameter_groups(model, likelihood)
    if features is not None:  # SVGP on g(x): the network is its own group, trained jointly
        model = FeatureInputGP(model, features)
        groups["features"] = list(features.parameters())
    quantity = _QUANTITY[m.name]
    if quantity:
        estimator.check(likelihood, quantity)
    stochastic = bool(estimator.stochastic)

    if m.name == "svgp":
        stage = Stage("svgp", O.ELBO(model, likelihood, estimator, n, beta), groups, stochastic=stochastic)
        return Method("svgp", model, likelihood, [stage], estimator)

    def freeze_and_reset():
        """Fixed variant (DLM paper, Sec. 6 / App. D): keep SVGP's kernel, likelihood and inducing
        inputs fixed and learn q(u) from scratch."""
        for p in model.hyperparameters() + list(likelihood.parameters()):
            p.requires_grad_(False)
        model.reset_variational()

    fixed = m.variant == "fixed"
    # The SVGP stage of a fixed variant is standard SVGP with beta=1; it uses the configured
    # estimator when that estimator can compute E_q[log p], else the closed form/quadrature.
    pre = []
    if fixed:
        pre_est = estimator if C.supports(estimator, likelihood, "expected_log_prob") else AutoEstimator()
        pre = [Stage("svgp", O.ELBO(model, likelihood, pre_est, n, 1.0), groups, stochastic=bool(pre_est.stochastic))]

    if m.name == "dlm":
        obj = O.DLM(model, likelihood, estimator, n, beta)
        stage_groups = {"variational": groups["variational"]} if fixed else groups
        stage = Stage("dlm", obj, stage_groups, prepare=freeze_and_reset if fixed else None, stochastic=stochastic)
        return Method("dlm", model, likelihood, pre + [stage], estimator)

    # square-loss DLM
    def finalize(xt, yt):
        """Complete sq-DLM into a predictive distribution: q(u) = N(m, K_uu), ML noise."""
        model.q_u.chol_variational_covar.data.copy_(torch.eye(Z.shape[0], dtype=dtype, device=device))
        with torch.no_grad():
            mu, var = model.marginals(xt)
        lower = 1.01 * float(likelihood.gp.noise_covar.raw_noise_constraint.lower_bound)
        likelihood.gp.noise = O.fit_predictive_noise(mu, var, yt, lower=lower)

    if fixed:
        def solve(xt, yt):
            model.q_u.variational_mean.data.copy_(O.optimal_whitened_mean(model, xt, yt, beta))

        stage = Stage("sq_dlm", prepare=freeze_and_reset, solve=solve)
    else:
        obj = O.SquareLossDLM(model, likelihood, estimator, n, beta)
        stage_groups = {"variational": [model.q_u.variational_mean], "inducing": groups["inducing"], "kernel": groups["kernel"]}
        stage = Stage("sq_dlm", obj, stage_groups)
    return Method("sq_dlm", model, likelihood, pre + [stage], estimator, finalize=finalize)
