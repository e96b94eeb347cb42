"""The method-family registry and the trainer through `gpdlm train`'s real path (issue 8): every
model belongs to one family, a new family plugs in with one registry line, its parameter groups
and monitors reach the trainer, L-BFGS trains collapsed models, and bad trainer input fails before
any run."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from gpdlm_cli import build, methods
from gpdlm_cli.exceptions import GpdlmError
from gpdlm_cli.prepare import prepare
from gpdlm_cli.run.train import run_train
from gpdlm_cli.tracking import NullTracker

from ..conftest import NoRunTracker, compose, exhaustive, fast

CONF = Path(build.__file__).resolve().parent / "conf" / "model"


def test_every_model_option_belongs_to_exactly_one_family():
    names = [f.stem.removesuffix("_fixed").removesuffix("_paper") for f in CONF.glob("*.yaml")]  # variant options
    assert set(names) <= set(methods.REGISTRY), set(names) - set(methods.REGISTRY)
    owners = {}
    for family in methods.FAMILIES:
        assert callable(family.validate) and callable(family.build)
        for name in family.MODELS:
            assert name not in owners, f"{name} is served by two families"
            owners[name] = family
    assert owners == methods.REGISTRY
    with pytest.raises(GpdlmError, match="the 'name' parameter of model must be one of"):
        methods.family_of("nosuch")


# (module, string): the same word, but not a model name
NOT_A_MODEL = {
    ("estimators/exact.py", "exact"),
    ("estimators/product_sampling.py", "exact"),  # the exact sampler/estimator
    ("objectives/dlm.py", "dlm"),
    ("objectives/sq_dlm.py", "sq_dlm"),
    ("objectives/marginal_likelihood.py", "exact"),
    ("objectives/pic.py", "pic"),
    ("objectives/rkhs.py", "scgd"),
    ("objectives/rkhs.py", "minimax"),
    ("objectives/rkhs.py", "bsgd"),
    ("objectives/sparse_spectrum.py", "ssgp"),
    ("objectives/sparse_spectrum.py", "svbssgp"),  # objectives' own names
    ("features/recurrent.py", "lstm"),
    ("features/recurrent.py", "gru"),
    ("features/recurrent.py", "rnn"),
    ("features/recurrent.py", "narx"),  # the recurrent cells
    ("schema/options.py", "exact"),  # estimator=exact and the ups sampler's choices
}
# the one study defined on one family: `gpdlm bias` (DLM paper Fig. 1(g,h)) compares the DLM stage's
# gradient estimators with the exact one, after the SVGP stage that dlm's fixed variant trains first
PENDING = {("run/bias.py", "dlm"), ("run/bias.py", "svgp"), ("run/bias.py", "exact")}


def _model_names_in(path: Path) -> set[str]:
    """The string constants of ``path`` (docstrings aside) that are a model name."""
    import ast

    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and id(node) not in docstrings
        and isinstance(node.value, str)
        and node.value in methods.MODELS
    }


def test_no_module_outside_the_families_and_models_names_a_model():
    """Only methods/ and models/ name models (issues 8, 20): build.py, the commands, analysis and
    tracking read what a family declares (``methods.declaration``, the run tags)."""
    package = Path(build.__file__).resolve().parent
    found = set()
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel.split("/")[0] not in ("methods", "models"):
            found |= {(rel, name) for name in _model_names_in(path)}
    assert found - NOT_A_MODEL - PENDING == set()
    assert PENDING <= found  # an exception that is no longer needed goes


def test_the_guard_sees_a_quoted_model_name(tmp_path):
    (tmp_path / "m.py").write_text('"""dlm in a docstring is prose."""\nX = "val_mse" if m == "sq_dlm" else "dlm_x"\n')
    assert _model_names_in(tmp_path / "m.py") == {"sq_dlm"}


# ----- a toy family registered like a real one ---------------------------------------------------------
class _Toy(torch.nn.Module):
    """q(f(x)) = N(w x_0, 1): marginals, so predictive metrics work; the objective ignores the data."""

    def __init__(self, dtype):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1, dtype=dtype))

    def marginals(self, x):
        return self.w * x[:, 0], torch.ones_like(x[:, 0])


class ToyFamily:
    """1/2 (w - 3)^2 by SGD from w = 0; its monitor |w - 1| is smallest at an intermediate step."""

    MODELS = ("toy",)

    @staticmethod
    def validate(cfg):
        pass

    @staticmethod
    def build(cfg, data, task):
        from gpdlm_cli.likelihoods import GaussianLikelihood

        model = _Toy(data.x_train.dtype).to(data.x_train.device)
        lik = GaussianLikelihood().to(data.x_train.device, data.x_train.dtype)

        def objective(xb, yb):
            return 0.5 * ((model.w - 3.0) ** 2).sum()

        return methods.Method(
            "toy",
            model,
            lik,
            [methods.Stage("toy", objective, {"w": [model.w]})],
            monitors={"gap": lambda: abs(float(model.w.detach()[0]) - 1.0)},
        )


@pytest.fixture
def toy_family(monkeypatch):
    monkeypatch.setitem(methods.REGISTRY, "toy", ToyFamily)
    return ToyFamily


def _toy_run(tmp_path, *overrides):
    cfg = compose(
        [
            "model.name=toy",
            "trainer.optimizer=sgd",
            "trainer.lr=0.05",
            "trainer.max_iters=100",
            "trainer.eval_every=1",
            "trainer.stop_window=0",
            "progress=false",
            "tracking.enabled=false",
            "dataset.split.train_size=100",
            *overrides,
        ]
    )
    tracker = NullTracker()
    return run_train(cfg, tmp_path, tracker=tracker), tracker


def test_a_family_monitor_drives_keep_best_and_lr_scale_reaches_its_group(tmp_path, toy_family):
    metrics, tracker = _toy_run(tmp_path, "trainer.keep_best=gap", "trainer.lr_scale={w:0.5}")
    rate = 1 - 0.05 * 0.5  # SGD on 1/2 (w - 3)^2 at lr 0.05 x 0.5
    trajectory = 3.0 - 3.0 * rate ** np.arange(101)
    t_best = int(np.argmin(np.abs(trajectory - 1.0)))
    assert metrics["best_iteration"] == t_best
    assert metrics["gap"] == pytest.approx(abs(trajectory[t_best] - 1.0), rel=1e-9)
    assert [s for s, _ in tracker.steps["gap"]][:3] == [1, 2, 3]  # monitors are step metrics too
    assert tracker.tags["gpdlm.stop_rule"] == "window"
    plain, _ = _toy_run(tmp_path / "plain")
    assert "best_iteration" not in plain and plain["gap"] == pytest.approx(abs(3.0 - 3.0 * 0.95**100 - 1.0), rel=1e-9)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (
            ["trainer.lr_scale={kernel:0.1}"],
            "the 'lr_scale.kernel' parameter of trainer must be a group of model=toy: one of w",
        ),
        (
            ["trainer.keep_best=nosuch"],
            "the 'keep_best' parameter of trainer must be a metric this run computes: one of val_nll",
        ),
    ],
)
def test_method_dependent_trainer_errors(tmp_path, toy_family, overrides, message):
    with pytest.raises(GpdlmError) as e:
        _toy_run(tmp_path, *overrides)
    assert message in str(e.value)


# ----- the trainer on the real families ------------------------------------------------------------------
BAD = [
    (
        ["trainer.optimizer=nosuch"],
        "the 'optimizer' parameter of trainer must be one of adam, adadelta, sgd, lbfgs; got 'nosuch'",
    ),
    (
        ["trainer.optimizer=lbfgs", "trainer.batch_size=100"],
        "trainer.optimizer=lbfgs needs a deterministic full-batch objective",
    ),
    (["trainer.optimizer=lbfgs", "estimator=bmc"], "stage 'dlm' uses the sampling estimator=bmc"),
    (
        ["trainer.schedule=robbins_monro", "trainer.rm_kappa=0.5"],
        "the 'rm_kappa' parameter of trainer (schedule=robbins_monro) must be a float in (0.5, 1]",
    ),
    (["trainer.schedule=robbins_monro", "trainer.rm_kappa=1.5"], "must be a float in (0.5, 1]; got 1.5"),
    (["trainer.max_epochs=0"], "the 'max_epochs' parameter of trainer must be an integer >= 1 or null; got 0"),
    (
        ["trainer.lr_scale={nosuch:2}"],
        "the 'lr_scale.nosuch' parameter of trainer must be a group of model=dlm: one of variational, inducing, kernel, likelihood",
    ),
    (["trainer.keep_best=val_error"], "must be a metric this run computes: one of val_nll, val_nll_norm, val_mse"),
    (["trainer.keep_best=val_nll", "trainer.eval_every=0"], "trainer.keep_best needs evaluations"),
    (["trainer.schedule=cosine"], "the 'schedule' parameter of trainer must be one of constant, step, robbins_monro"),
    (
        ["trainer.stop_rule=sometimes"],
        "the 'stop_rule' parameter of trainer must be one of auto, window, block_mean, none",
    ),
]


@pytest.mark.parametrize("overrides,message", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_trainer_input_fails_before_any_run(tmp_path, overrides, message):
    cfg = compose(fast(["tracking.enabled=false"] + overrides))
    with pytest.raises(GpdlmError) as e:
        run_train(cfg, tmp_path, tracker=NoRunTracker())
    assert message in str(e.value).splitlines()[0]
    assert not (tmp_path / "metrics.json").exists()


def _final_objective(cfg):
    from gpdlm_cli.training import run_stages

    prepared = prepare(cfg)
    data, method, settings = prepared.data, prepared.method, prepared.settings
    fit = run_stages(method.stages, data.x_train, data.y_train, settings, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        value = float(method.stages[0].objective(data.x_train, data.y_train))
    return value, fit


@pytest.mark.slow
def test_lbfgs_trains_sgpr_to_a_lower_objective_than_adam_and_converges():
    common = ["model=sgpr", "model.num_inducing=20", "progress=false", "trainer.eval_every=0"]
    adam, adam_fit = _final_objective(compose(common + ["trainer.max_iters=300"]))
    lbfgs, lbfgs_fit = _final_objective(compose(common + ["trainer.optimizer=lbfgs", "trainer.max_iters=300"]))
    assert lbfgs_fit.converged and lbfgs_fit.iterations < 300 and lbfgs_fit.stop_rules == ["window"]
    assert not adam_fit.converged
    assert lbfgs <= adam + 1e-6, (lbfgs, adam)


@pytest.mark.slow
def test_keep_best_val_nll_on_an_exact_gp_ends_on_the_best_logged_iterate(tmp_path):
    """Full-batch Adam at lr 0.3 on a 150-point exact GP overfits the validation NLL after a while:
    the run ends on the evaluation point with the lowest val_nll, whose metrics it reports."""
    cfg = compose(
        [
            "model=exact",
            "dataset.split.train_size=150",
            "trainer.max_iters=200",
            "trainer.lr=0.3",
            "trainer.eval_every=5",
            "trainer.keep_best=val_nll",
            "kernel.ard=true",
            "progress=false",
            "tracking.enabled=false",
        ]
    )
    tracker = NullTracker()
    m = run_train(cfg, tmp_path, tracker=tracker)
    logged = dict(tracker.steps["val_nll"][:-1])  # the last point is the final (restored) evaluation
    best_step = min(logged, key=logged.get)
    assert m["best_iteration"] in (best_step, m["iterations"])
    assert m["val_nll"] == pytest.approx(min(min(logged.values()), m["val_nll"]), abs=0)
    if m["best_iteration"] == best_step:
        assert m["val_nll"] == logged[best_step]
    assert math.isfinite(m["test_nll"])


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["model=sgpr", "features=nn"], "model=sgpr takes no input feature map (features=nn)"),
        (["model=exact", "features=nn"], "model=exact takes no input feature map"),
        (["model=svbssgp", "features=nn"], "model=svbssgp takes no input feature map"),
        (["model=ssgp", "kernel.name=matern52"], "model=ssgp approximates the rbf kernel"),
    ],
)
def test_families_refuse_options_they_would_ignore(overrides, message):
    with pytest.raises(GpdlmError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build.validate_config(compose(overrides))


# ----- what families declare (issue 20) -------------------------------------------------------------------
def _validates(overrides) -> bool:
    try:
        build.validate_config(compose(overrides))
    except GpdlmError:
        return False
    return True


NON_RECURRENT = [m for m in methods.MODELS if methods.family_of(m).__name__ != "gpdlm_cli.methods.recurrent"]
FIRST_OF_FAMILY = {}
for _m in NON_RECURRENT:
    FIRST_OF_FAMILY.setdefault(methods.family_of(_m).__name__, _m)


# the fast lane: the first model of each family; make test, every model
@pytest.mark.parametrize(
    "model", exhaustive(NON_RECURRENT, fast=lambda m: FIRST_OF_FAMILY[methods.family_of(m).__name__] == m)
)
def test_declared_features_and_variants_are_what_validate_accepts(model):
    """TAKES_FEATURES: features=nn is accepted exactly by the families that declare it; VARIANTS: a
    model.variant outside the declared ones is refused. (The recurrent family is left out: it needs a
    sequence dataset, and it ignores features= rather than refusing it -- reported in issue 20.)"""
    base = [f"model={model}", "trainer.batch_size=null"]
    assert _validates(base)
    assert _validates(base + ["features=nn"]) == methods.declaration(model, "TAKES_FEATURES")
    variants = methods.declaration(model, "VARIANTS")
    if "variant" in compose(base).model:
        for variant in ("joint", "fixed"):
            assert _validates(base + [f"model.variant={variant}"]) == (variant in variants), variant


def test_declarations_have_their_types():
    for family in methods.FAMILIES:
        for model in family.MODELS:
            assert methods.selection_metric(model).startswith("val_")
            beta = methods.declaration(model, "REFERENCE_BETA")
            assert beta is None or beta > 0
            assert set(methods.declaration(model, "VARIANTS")) >= {"joint"}
    assert methods.selection_metric("sq_dlm") == "val_mse" and methods.has_variants("dlm")
    assert not methods.has_variants("svgp") and methods.declaration("svgp", "REFERENCE_BETA") == 1.0
