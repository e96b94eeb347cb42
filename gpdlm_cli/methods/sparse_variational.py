"""The sparse variational family: SVGP / beta-ELBO, log-loss DLM and square-loss DLM (DLM paper,
Sec. 2 and 6), each with a ``joint`` variant and (DLM, sq-DLM) a ``fixed`` variant.

All three share one model, q(u) = N(m, V) over M inducing values (``models.SparseVariationalGP``);
only the objective differs. The fixed variant is the paper's two-stage protocol (App. D): train SVGP
(beta = 1), freeze its kernel, likelihood and inducing inputs, reset q(u) and learn it anew
(``model.fixed_learns_inducing=true``: the other reading of App. D, Z re-learned with q(u)).

* The (beta-)ELBO of SVGP and of the fixed variants' SVGP stage is the collapsed one (q(u)
  optimal in closed form, ``objectives.CollapsedELBO``) for a Gaussian likelihood on the full batch
  with a deterministic estimator, as the paper implements its regression baseline (App. D), and the
  uncollapsed one otherwise (``model.elbo`` forces either). The run tag ``gpdlm.elbo_form`` says which.
* Baselines (SVGP, the SVGP stage) use a deterministic estimator of E_q[log p] -- the closed form or
  quadrature -- even when ``estimator`` names a sampling estimator for the DLM term
  (``model.baseline_estimator=configured`` trains them with the configured estimator).
* Square-loss DLM determines only the mean; its predictive is completed by a maximum-likelihood
  variance fitted on the training residuals (``model.predictive``, see
  ``objectives.fit_square_loss_predictive``). The joint variant has no finite optimum in the
  outputscale (substituting m' = c m~ shows the objective decreases as the outputscale c grows, to a
  limit that does not depend on beta): ``model.fix_outputscale=true`` holds the outputscale at its
  SVGP value, which makes beta meaningful again.

Parameter groups (``trainer.lr_scale.<group>``): ``variational`` (m~, the Cholesky factor of S),
``inducing`` (Z), ``kernel`` (kernel and mean-function hyperparameters), ``likelihood``, and
``features`` (the network of ``features=nn``: the GP then sees g(x), inducing points in feature space).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from dataclasses import dataclass

import torch

from ..exceptions import UnsupportedCombination
from ..schema import InducingModelSpec, RunSpec, as_run_spec
from ..schema.keys import choice, flag
from . import components as C
from . import feature_maps as FM
from .base import Method, Stage

MODELS = ("svgp", "dlm", "sq_dlm")
SELECTION_METRIC = {"sq_dlm": "val_mse"}  # square loss: selected by validation MSE; the others by val_nll
REFERENCE_BETA = {"svgp": 1.0}  # `gpdlm select` also reports the plain ELBO (beta=1)
VARIANTS = {"dlm": ("joint", "fixed"), "sq_dlm": ("joint", "fixed")}  # svgp: joint only
TAKES_FEATURES = True

#: what each model's data term needs from the estimator
_QUANTITY = {"svgp": "expected_log_prob", "dlm": "log_marginal", "sq_dlm": None}


@dataclass(frozen=True)
class Spec(InducingModelSpec):
    """``model=svgp|dlm|sq_dlm``'s keys (conf/model/{svgp,dlm,sq_dlm}.yaml)."""

    variant: str = choice(
        "joint",
        ("joint", "fixed"),
        allowed="'joint' or 'fixed'",
        help="joint | fixed: train SVGP, freeze its hyperparameters, learn q(u) anew",
    )
    elbo: str = choice(
        "auto",
        ("auto", "collapsed", "uncollapsed"),
        allowed="'auto', 'collapsed' or 'uncollapsed'",
        help="the SVGP (stage) ELBO: auto = collapsed for a Gaussian likelihood on the full batch",
    )
    baseline_estimator: str = choice(
        "deterministic",
        ("deterministic", "configured"),
        allowed="'deterministic' or 'configured'",
        help="E_q[log p] of SVGP and the SVGP stage",
    )
    fixed_learns_inducing: bool = flag(False, help="variant=fixed: true = Z re-learned with q(u)")
    predictive: str = choice(
        "auto",
        ("auto", "residual", "scaled"),
        allowed="'auto', 'residual' or 'scaled'",
        help="sq_dlm: the predictive completion N(mu, c k + s2)",
    )
    fix_outputscale: bool = flag(False, help="sq_dlm, joint: hold the outputscale at its SVGP value")


def validate(spec: RunSpec) -> None:
    """Checks of the model keys that need no data (their ranges: ``Spec``)."""
    spec = as_run_spec(spec, Spec)
    m = spec.model
    if m.name == "svgp" and m.variant == "fixed":
        raise UnsupportedCombination(
            "model.variant=fixed applies to dlm and sq_dlm (it is defined by a prior SVGP fit)"
        )
    if m.name == "sq_dlm":
        C.gaussian_only(spec, "model=sq_dlm (square loss) is a regression method: use likelihood=gaussian")
    if m.elbo == "collapsed" and (spec.likelihood.name != "gaussian" or spec.trainer.batch_size is not None):
        raise UnsupportedCombination(
            "model.elbo=collapsed needs likelihood=gaussian and the full batch (trainer.batch_size=null): "
            "the optimal q(u) is a function of all targets"
        )
    if m.fix_outputscale and not (m.name == "sq_dlm" and m.variant == "joint"):
        raise UnsupportedCombination(
            "model.fix_outputscale=true applies to model=sq_dlm with model.variant=joint "
            "(the fixed variant freezes every hyperparameter already)"
        )


def batched_scope(spec: RunSpec) -> str | None:
    """``sweep.batched`` (``sweep.batched``, ``sweep.batched_model``): why this config has no batched form,
    or None. Batched: svgp (the collapsed ELBO) and dlm (closed form; the fixed variant's DLM stage,
    after its SVGP stage trained per member), Gaussian likelihood, rbf kernel, zero mean, no input
    features, a closed-form estimator."""
    spec = as_run_spec(spec, Spec)
    m = spec.model
    if m.name not in ("svgp", "dlm"):
        return f"model={m.name} has no batched form (svgp and dlm do)"
    if m.name == "svgp" and m.variant != "joint":
        return "model=svgp has only the joint variant"
    if batched_trainer(spec) == "stacked":
        return _stacked_scope(spec)
    if FM.uses_features(spec):
        return "input features (features=nn) are not batched"
    if spec.likelihood.name != "gaussian":
        return f"likelihood={spec.likelihood.name} is not batched (Gaussian only)"
    if spec.kernel.name != "rbf":
        return f"kernel={spec.kernel.name} is not batched (rbf only)"
    if m.name == "dlm" and spec.estimator.name not in ("auto", "exact"):
        return f"estimator={spec.estimator.name} samples: not batched (closed form only)"
    if m.mean not in ("auto", "zero"):
        return f"model.mean={m.mean} is not batched (zero mean only)"
    if m.name == "svgp" and m.elbo == "uncollapsed":
        return "model.elbo=uncollapsed is not batched (the collapsed ELBO is)"
    return None


#: ``sweep.batched=true`` with the stacked trainer (``batched_trainer``): a batch's members may also differ in
#: their learning rate and split mask (``sweep.batched.shape_key``)
STACKED_FREE_KEYS = ("trainer.lr", "dataset.split.mask")


def batched_trainer(spec: RunSpec) -> str:
    """Which batched trainer ``sweep.batched`` uses for this config: ``stacked`` (``sweep.batched_rkhs``: the
    members' own minibatch loops in lockstep, AdaDelta per member) for minibatch SVGP on input features with
    AdaDelta -- the RKHS study's SVGP arm -- else ``adam`` (``sweep.batched_model``: the full-batch Adam model)."""
    spec = as_run_spec(spec, Spec)
    t = spec.trainer
    stacked = spec.model.name == "svgp" and t.batch_size is not None and t.optimizer == "adadelta"
    return "stacked" if stacked and FM.uses_features(spec) else "adam"


def _stacked_scope(spec) -> str | None:
    """Minibatch SVGP with AdaDelta (``batched_trainer`` = stacked): why not batched, or None. Batched: the
    uncollapsed ELBO in closed form (Gaussian likelihood), kernel=linear on the network's features, zero mean,
    float64, the paper protocol with a constant learning rate per member."""
    t = spec.trainer
    if spec.likelihood.name != "gaussian":
        return f"likelihood={spec.likelihood.name} is not batched (Gaussian only)"
    if spec.kernel.name != "linear":
        return f"kernel={spec.kernel.name} is not batched for minibatch SVGP on features (linear only)"
    if spec.model.mean not in ("auto", "zero"):
        return f"model.mean={spec.model.mean} is not batched (zero mean only)"
    if str(spec.keys.dtype) != "float64":
        return f"dtype={spec.keys.dtype} is not batched for minibatch SVGP (float64 only)"
    if spec.model.baseline_estimator == "configured" and spec.estimator.name not in ("auto", "exact"):
        return f"estimator={spec.estimator.name} samples: not batched (closed form only)"
    if t.protocol != "paper":
        return f"trainer.protocol={t.protocol} is not batched (paper only)"
    if t.schedule != "constant":
        return f"trainer.schedule={t.schedule} is not batched (constant only)"
    return None


def check_sizes(spec: RunSpec, n_train: int) -> None:
    C.check_inducing(as_run_spec(spec, Spec).model, n_train)


def parameter_groups(model, likelihood) -> dict[str, list]:
    """The named groups of a ``SparseVariationalGP`` and its likelihood."""
    variational = model.variational_parameters()
    inducing = [model.variational_strategy.inducing_points]
    taken = {id(p) for p in variational + inducing}
    kernel = [p for p in model.parameters() if id(p) not in taken]
    return {
        "variational": variational,
        "inducing": inducing,
        "kernel": kernel,
        "likelihood": list(likelihood.parameters()),
    }


@dataclass
class _Parts:
    """What every model of the family is built from: the shared SparseVariationalGP, its likelihood
    and parameter groups, the estimators, and the choices the stages depend on."""

    spec: RunSpec
    data: object  # build.Tensors
    model: object  # SparseVariationalGP (in a FeatureInputGP with input features)
    likelihood: object
    groups: dict  # parameter groups: variational, inducing, kernel, likelihood (, features)
    estimator: object  # the configured estimator (the DLM term)
    base_est: object  # the baselines' estimator of E_q[log p]
    collapsed: bool  # the SVGP (stage) ELBO is the collapsed one
    smooth: bool  # trainer=fast may run L-BFGS on the stages (no network)
    tags: dict  # run tags (gpdlm.elbo_form, gpdlm.baseline_estimator)

    @property
    def n(self) -> int:
        return self.data.x_train.shape[0]

    @property
    def beta(self) -> float:
        return float(self.spec.objective.beta)


def _components(spec: RunSpec, x, y, task: str):
    """``(kernel, mean, likelihood, features, x_in)``: the GP's components and its inputs x_in = x, or
    g(x) with input features (``features``: the network g, else None)."""
    m = spec.model
    device, dtype = x.device, x.dtype
    likelihood = C.build_likelihood(spec.likelihood, y)
    features = (
        FM.build_input_map(spec.features, x.shape[1], spec.seed).to(device, dtype) if FM.uses_features(spec) else None
    )
    with torch.no_grad():  # the GP's inputs: g(x), so the inducing points start in feature space
        x_in = x if features is None else features(x)
    kernel = C.build_kernel(spec.kernel, x_in.shape[1], spec.seed, inputs=None if features is None else x_in)
    if m.num_inducing > getattr(kernel, "num_features", m.num_inducing):
        raise UnsupportedCombination(
            f"kernel={spec.kernel.name} has rank d={kernel.num_features}: model.num_inducing must be <= d"
        )
    mean = C.build_mean(m.mean, task)
    return kernel, mean, likelihood, features, x_in


def _parts(spec: RunSpec, data, task: str) -> _Parts:
    """Build the family's shared parts for ``spec`` on ``data`` (the order of construction is the
    order of the seeded draws: likelihood, features, kernel, mean, estimator, inducing points)."""
    from ..estimators import AutoEstimator
    from ..models import SparseVariationalGP
    from ..models.feature_input import FeatureInputGP

    m = spec.model
    x, y = data.x_train, data.y_train
    n = x.shape[0]
    device, dtype = x.device, x.dtype
    check_sizes(spec, n)
    kernel, mean, likelihood, features, x_in = _components(spec, x, y, task)
    estimator = C.build_estimator(spec.estimator)
    Z = C.initial_inducing_points(x_in, m.num_inducing, m.inducing_init, spec.seed)
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
    full_batch = spec.trainer.batch_size is None or spec.trainer.batch_size >= n

    # the estimator of the baselines' E_q[log p]: deterministic unless asked otherwise
    base_est = estimator
    if not C.supports(estimator, likelihood, "expected_log_prob") or (
        estimator.stochastic and m.baseline_estimator == "deterministic"
    ):
        base_est = AutoEstimator()
    collapsed = m.elbo == "collapsed" or (
        m.elbo == "auto" and likelihood.name == "gaussian" and full_batch and base_est.name in ("auto", "exact")
    )
    smooth = features is None  # trainer=fast: L-BFGS on GP parameters only, never on a network
    tags = {"gpdlm.elbo_form": "collapsed" if collapsed else "uncollapsed", "gpdlm.baseline_estimator": base_est.name}
    return _Parts(spec, data, model, likelihood, groups, estimator, base_est, collapsed, smooth, tags)


def _svgp_stage(parts: _Parts, stage_beta: float) -> Stage:
    """The (beta-)ELBO stage of SVGP and of the fixed variants: collapsed (q(u) optimal in closed
    form, only hyperparameters trained) or uncollapsed with the baselines' estimator."""
    from .. import objectives as O

    model, likelihood, groups, n = parts.model, parts.likelihood, parts.groups, parts.n
    if parts.collapsed:  # q(u) is optimal in closed form: only hyperparameters are trained
        from ..objectives.collapsed_elbo import RefreshOptimalQ

        obj = O.CollapsedELBO(model, likelihood, n, stage_beta)
        return Stage(
            "svgp",
            obj,
            {k: v for k, v in groups.items() if k != "variational"},
            hooks=[RefreshOptimalQ(obj, parts.data.x_train, parts.data.y_train)],
            lbfgs_ok=parts.smooth,
        )
    return Stage(
        "svgp",
        O.ELBO(model, likelihood, parts.base_est, n, stage_beta),
        groups,
        stochastic=bool(parts.base_est.stochastic),
        lbfgs_ok=parts.smooth,
    )


def _freeze_and_reset(parts: _Parts, learn_z: bool) -> None:
    """Fixed variant (DLM paper, Sec. 6 / App. D): keep SVGP's kernel and likelihood (and, unless
    ``learn_z``, its inducing inputs) fixed and learn q(u) from scratch."""
    model = parts.model
    for p in model.hyperparameters() + list(parts.likelihood.parameters()):
        p.requires_grad_(False)
    if learn_z and parts.spec.model.learn_inducing:
        model.variational_strategy.inducing_points.requires_grad_(True)
    model.reset_variational()


def _dlm_stage(parts: _Parts, fixed: bool, fixed_groups: dict, freeze) -> Stage:
    """The log-loss DLM stage: all groups (joint), or q(u) (and Z) after ``freeze`` (fixed)."""
    from .. import objectives as O

    obj = O.DLM(parts.model, parts.likelihood, parts.estimator, parts.n, parts.beta)
    return Stage(
        "dlm",
        obj,
        fixed_groups if fixed else parts.groups,
        prepare=freeze if fixed else None,
        stochastic=bool(parts.estimator.stochastic),
        lbfgs_ok=parts.smooth,
    )


def _fixed_sq_dlm_stage(parts: _Parts, completion, freeze) -> Stage:
    """Fixed square-loss DLM: after ``freeze``, q(u)'s mean is solved in closed form."""
    from .. import objectives as O

    model, beta = parts.model, parts.beta

    def solve(xt, yt):
        model.q_u.variational_mean.data.copy_(O.optimal_whitened_mean(model, xt, yt, beta))

    def prepare():
        freeze()
        completion.activate()

    return Stage("sq_dlm", prepare=prepare, solve=solve)


def _joint_sq_dlm_stage(parts: _Parts, completion, fix_scale: bool, beta_swept: bool) -> Stage:
    """Joint square-loss DLM: q(u)'s mean, Z, the kernel (less the outputscale when ``fix_scale``) and
    the features; warns when beta is swept over it with a free outputscale (no finite optimum)."""
    from .. import objectives as O

    model, groups = parts.model, parts.groups
    scale = [_outputscale_parameter(model.covar_module)] if fix_scale else []
    kernel_params = [p for p in groups["kernel"] if not (fix_scale and any(p is q for q in scale))]

    def prepare():
        if fix_scale:
            scale[0].requires_grad_(False)
        completion.activate()

    obj = O.SquareLossDLM(model, parts.likelihood, parts.estimator, parts.n, parts.beta)
    stage_groups = {
        "variational": [model.q_u.variational_mean],
        "inducing": groups["inducing"],
        "kernel": kernel_params,
        **({"features": groups["features"]} if "features" in groups else {}),
    }
    stage = Stage("sq_dlm", obj, stage_groups, prepare=prepare, lbfgs_ok=parts.smooth)
    if beta_swept and not fix_scale:
        print(
            "gpdlm: warning: joint sq_dlm has no finite optimum in the outputscale, so beta only changes the "
            "optimisation path; sweep beta with model.fix_outputscale=true or model.variant=fixed",
            file=sys.stderr,
        )
    return stage


def _sq_dlm_method(parts: _Parts, pre: list, fixed: bool, freeze) -> Method:
    """Square-loss DLM: its stage after ``pre`` (the SVGP stage: fixed variant or fixed outputscale),
    completed by the predictive of ``_SquareLossCompletion``."""
    m, model, tags = parts.spec.model, parts.model, parts.tags
    completion = _SquareLossCompletion(model, parts.likelihood, parts.data, m.predictive)
    fix_scale = bool(m.fix_outputscale)
    if fix_scale:
        pre = [dataclasses.replace(_svgp_stage(parts, 1.0), shareable=True)]
        tags["gpdlm.elbo_form"] = "collapsed" if parts.collapsed else "uncollapsed"
    if fixed:
        stage = _fixed_sq_dlm_stage(parts, completion, freeze)
    else:
        stage = _joint_sq_dlm_stage(parts, completion, fix_scale, beta_is_swept(parts.spec))

    def diagnostics():
        scale = getattr(model.covar_module, "outputscale", None)
        return {**({"outputscale": float(scale.detach())} if scale is not None else {}), **completion.diagnostics()}

    return Method(
        "sq_dlm",
        model,
        parts.likelihood,
        pre + [stage],
        parts.estimator,
        finalize=completion.finalize,
        evaluate=completion.evaluate,
        diagnostics=diagnostics,
        tags=tags,
    )


def finite_kernel_nlml(parts: _Parts):
    """The monitor ``train_nlml`` of SVGP on a finite feature map (``kernel=linear|rff``, Gaussian likelihood),
    else None: the *exact* full-data per-point NLML at the run's hyperparameters,

        (1/n) [-log N(y - m | 0, Phi Phi^T + s2 I_n)] + log s_y,   Phi = phi(g(X)) (n x d),

    by the d x d form (``models.bayesian_linear.nlml_from_statistics``: one streamed O(n d^2) pass), with m the
    GP's mean function, g the input network (identity without ``features``), phi the kernel's feature map and
    s2 the likelihood's noise; + log s_y puts it in the target's units (y was divided by s_y). It is the
    number the RKHS paper reports for every method, SVGP included (Shoham & Avron, Sec. 5, Table 2: SVGP's
    hyperparameters scored by the marginal likelihood, the best iterate by it), and what the RKHS family's
    ``train_nlml`` computes; SVGP optimises its ELBO, a lower bound, so this is how close it gets to the
    marginal likelihood's optimum."""
    import math

    import gpytorch

    from ..models.bayesian_linear import feature_statistics, nlml_from_statistics

    gp = getattr(parts.model, "gp", parts.model)
    network = getattr(parts.model, "features", None)
    feature_map = getattr(gp.covar_module, "feature_map", None)
    if feature_map is None or parts.likelihood.name != "gaussian" or parts.data.y_train.ndim != 1:
        return None
    x, y = parts.data.x_train, parts.data.y_train
    log_y_std = math.log(float(parts.data.y_std))

    def inputs(xb):
        return xb if network is None else network(xb)

    def phi(xb):
        return feature_map(inputs(xb))

    @torch.no_grad()
    def train_nlml() -> float:
        r = y
        if not isinstance(gp.mean_module, gpytorch.means.ZeroMean):  # y - m(g(x)), streamed
            r = torch.cat([y[i : i + 4096] - gp.mean_module(inputs(x[i : i + 4096])) for i in range(0, len(y), 4096)])
        ztz, zty, yy = feature_statistics(phi, x, r)
        nlml, _, _ = nlml_from_statistics(ztz, zty, yy, x.shape[0], parts.likelihood.noise.to(torch.float64))
        return float(nlml) + log_y_std

    return train_nlml


def build(spec: RunSpec, data, task: str) -> Method:
    """The method of ``model=svgp|dlm|sq_dlm``: SVGP's ELBO stage; DLM's stage (after an SVGP stage
    in the fixed variant); square-loss DLM's stage and its predictive completion. SVGP on a finite feature
    map with a Gaussian likelihood has the monitor ``train_nlml`` (``finite_kernel_nlml``)."""
    spec = as_run_spec(spec, Spec)
    m = spec.model
    parts = _parts(spec, data, task)
    if m.name == "svgp":
        nlml = finite_kernel_nlml(parts)
        return Method(
            "svgp",
            parts.model,
            parts.likelihood,
            [_svgp_stage(parts, parts.beta)],
            parts.estimator,
            monitors={} if nlml is None else {"train_nlml": nlml},
            tags=parts.tags,
        )

    fixed = m.variant == "fixed"
    learn_z = fixed and bool(m.fixed_learns_inducing)
    freeze = functools.partial(_freeze_and_reset, parts, learn_z)
    pre = [dataclasses.replace(_svgp_stage(parts, 1.0), shareable=True)] if fixed else []
    if not fixed:
        parts.tags.pop("gpdlm.elbo_form")  # no ELBO is optimised
    groups = parts.groups
    fixed_groups = {"variational": groups["variational"], **({"inducing": groups["inducing"]} if learn_z else {})}
    if m.name == "dlm":
        stage = _dlm_stage(parts, fixed, fixed_groups, freeze)
        return Method("dlm", parts.model, parts.likelihood, pre + [stage], parts.estimator, tags=parts.tags)
    return _sq_dlm_method(parts, pre, fixed, freeze)


def _outputscale_parameter(kernel):
    """The raw outputscale of a ScaleKernel (``model.fix_outputscale`` holds it)."""
    raw = getattr(kernel, "raw_outputscale", None)
    if raw is None:
        raise UnsupportedCombination(
            f"model.fix_outputscale=true needs a kernel with an outputscale (kernel=rbf or "
            f"a Matern); {type(kernel).__name__} has none"
        )
    return raw


def beta_is_swept(spec: RunSpec) -> bool:
    """Whether this run is a job of a multirun that sweeps objective.beta (its overrides set it)."""
    return "objective.beta" in spec.multirun_keys


class _SquareLossCompletion:
    """The predictive of square-loss DLM: N(y_i | mu_i, c k_i + s2) with (c, s2) fitted by maximum
    likelihood on the training residuals (``objectives.fit_square_loss_predictive``), k_i = K_ii - Q_ii.

    Before the square-loss stage starts (the SVGP stage of the fixed variant) the model is an SVGP
    and predicts as one. Once active, every evaluation refits the completion to the current mean;
    ``auto`` takes the scaled form where it has the lower validation NLL, else the residual form."""

    def __init__(self, model, likelihood, data, kind: str):
        self.model, self.likelihood, self.data, self.kind = model, likelihood, data, kind
        self.active = False
        self.c, self.s2, self.chosen = None, None, None

    def activate(self):
        self.active = True

    @torch.no_grad()
    def _point_mass_marginals(self, x):
        """(mu, k) with q(u) = delta(m): k_i = K_ii - Q_ii (+ jitter)."""
        from ..metrics import predictive_marginals

        chol = self.model.q_u.chol_variational_covar
        saved = chol.detach().clone()
        chol.zero_()
        try:
            return predictive_marginals(self.model, x)
        finally:
            chol.copy_(saved)

    @torch.no_grad()
    def fit(self):
        from ..metrics import metrics_from_marginals
        from ..objectives import fit_square_loss_predictive

        d = self.data
        mu, k = self._point_mass_marginals(d.x_train)
        lower = 1.01 * float(self.likelihood.gp.noise_covar.raw_noise_constraint.lower_bound)
        kinds = ["residual", "scaled"] if self.kind == "auto" else [self.kind]
        fits = {kind: fit_square_loss_predictive(d.y_train - mu, k, kind, lower=lower) for kind in kinds}
        choice = kinds[0]
        if len(kinds) > 1 and d.x_val.shape[0] > 0:
            mv, kv = self._point_mass_marginals(d.x_val)
            scores = {}
            for kind, (c, s2) in fits.items():
                self._set_noise(s2)
                scores[kind] = metrics_from_marginals(self.likelihood, mv, c * kv, d.y_val, prefix="")["nll"]
            choice = min(scores, key=scores.get)
        self.c, self.s2 = fits[choice]
        self.chosen = choice
        self._set_noise(self.s2)

    def _set_noise(self, s2: float):
        self.likelihood.gp.noise = s2

    def finalize(self, x, y):
        self.activate()
        self.fit()

    @torch.no_grad()
    def evaluate(self, x, y, *, prefix: str, y_std: float):
        from ..metrics import metrics_from_marginals, predictive_metrics

        if not self.active:
            return predictive_metrics(self.model, self.likelihood, x, y, y_std=y_std, prefix=prefix)
        if prefix == "val_" or self.c is None:  # refit once per evaluation (val comes first)
            self.fit()
        mu, k = self._point_mass_marginals(x)
        return metrics_from_marginals(self.likelihood, mu, self.c * k, y, y_std=y_std, prefix=prefix)

    def diagnostics(self) -> dict:
        if self.c is None:
            return {}
        return {
            "sq_predictive_scale": self.c,
            "sq_predictive_noise": self.s2,
            "sq_predictive_scaled": int(self.chosen == "scaled"),
        }
