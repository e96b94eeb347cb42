"""The DLM paper's presets follow its protocol (issue 23, part 3): the paper's M per dataset (App. D,
Table 2) in every DLM preset, joint sq-DLM with its outputscale held, the exact-gradient arm of
sampling_methods, the real 2008 airline data in airline_curves and sampling_methods (issue 39; the
offline stand-in stays by name), and the
presets of App. D Figs. 13-16. Each preset is composed exactly as `gpdlm train -m +experiment=NAME`
would compose it, and every job of its sweep passes the builder's config validation."""

from __future__ import annotations

import itertools

import pytest

from gpdlm_cli import build
from gpdlm_cli.data import all_datasets

from ..conftest import compose, exhaustive, sweep_grid

# the DLM paper's Table 2 (App. D), typed in from the paper: dataset -> M
PAPER_TABLE2_M = {
    "pol": 100,
    "cadata": 206,
    "sarcos": 100,
    "song": 100,
    "banana": 53,
    "thyroid": 37,
    "twonorm": 74,
    "ringnorm": 74,
    "airline": 200,
    "abalone": 41,
    "peds1_dir0": 40,
    "peds1_dir1": 40,
    "peds1_dir2": 40,
}

# every DLM study preset (not the smoke variants, which shrink M on purpose) and the paper's datasets
# of its task that `dataset=` may swap in
DLM_PRESETS = {
    "regression_logloss": ["sarcos", "pol", "cadata", "song"],
    "regression_logloss_pol": ["pol"],
    "regression_sqloss": ["sarcos", "pol", "cadata", "song"],
    "regression_sqloss_pol": ["pol"],
    "regression_baselines": ["sarcos", "pol", "cadata", "song"],
    "regression_baselines_pol": ["pol"],
    "regression_bmc": ["pol", "sarcos", "cadata", "song"],
    "regression_bmc_exact": ["pol", "sarcos", "cadata", "song"],
    "beta_curve": ["cadata"],
    "classification": ["ringnorm", "twonorm", "banana", "thyroid"],
    "classification_thyroid": ["thyroid"],
    "count": ["abalone", "peds1_dir0", "peds1_dir1", "peds1_dir2"],
    "count_curves": ["abalone", "peds1_dir0"],
    "airline_curves": ["airline"],
    "sampling_methods": ["airline"],
    "sampling_methods_exact": ["airline"],
    "sampling_methods_smooth": ["airline"],
}


def compose_sweep(preset: str, overrides=()):
    """(config, {key: [values]}) of `gpdlm train -m +experiment=preset` (the sweeper's grid)."""
    overrides = [f"+experiment={preset}", *overrides]
    return compose(overrides, hydra=True), sweep_grid(overrides)


def jobs(preset: str, overrides=()):
    """Every job of the preset's sweep, composed (the grid's product)."""
    _, grid = compose_sweep(preset, overrides)
    fixed = {o.split("=", 1)[0] for o in overrides}
    keys = [k for k in grid if k not in fixed]
    for values in itertools.product(*(grid[k] for k in keys)):
        yield compose([f"+experiment={preset}", *overrides, *(f"{k}={v}" for k, v in zip(keys, values))])


def test_the_registry_records_table2():
    recorded = {name: info.num_inducing for name, info in all_datasets().items() if info.num_inducing is not None}
    assert {k: recorded[k] for k in PAPER_TABLE2_M} == PAPER_TABLE2_M
    assert recorded["airline_nyc"] == 200  # the stand-in of airline, at airline's M


# the fast lane: one preset per task (regression, classification, counts, airline); make test, all 17
@pytest.mark.parametrize(
    "preset",
    exhaustive(
        sorted(DLM_PRESETS), fast=lambda p: p in {"regression_logloss", "classification", "count", "airline_curves"}
    ),
)
def test_every_dlm_preset_trains_with_the_papers_m(preset):
    default = compose([f"+experiment={preset}"])
    paper_name = {"airline_nyc": "airline"}.get(default.dataset.name, default.dataset.name)
    assert default.model.num_inducing == PAPER_TABLE2_M[paper_name], (preset, default.dataset.name)
    for dataset in DLM_PRESETS[preset]:
        cfg = compose([f"+experiment={preset}", f"dataset={dataset}"])
        assert cfg.dataset.name == dataset
        assert cfg.model.num_inducing == PAPER_TABLE2_M[dataset], (preset, dataset)
    # a dataset the paper did not use keeps gpdlm's default M, and the command line still wins
    task_default = {"classification": "breast_cancer", "count": "doctor_visits", "count_curves": "doctor_visits"}
    other = task_default.get(preset, "airline_reg" if "airline" in preset or "sampling" in preset else "concrete")
    if other != "airline_reg":
        assert compose([f"+experiment={preset}", f"dataset={other}"]).model.num_inducing == 100
    assert compose([f"+experiment={preset}", "model.num_inducing=7"]).model.num_inducing == 7


def test_the_paper_airline_data_gets_m_200_too():
    for preset in ("airline_curves", "sampling_methods", "sampling_methods_exact"):
        cfg = compose([f"+experiment={preset}", "dataset=airline"])
        assert cfg.dataset.name == "airline" and cfg.model.num_inducing == 200


def test_joint_sq_dlm_holds_its_outputscale_and_only_it():
    cfg, grid = compose_sweep("regression_sqloss")
    assert grid["model"] == ["sq_dlm", "sq_dlm_fixed", "dlm", "svgp"]
    seen = {}
    for job in jobs("regression_sqloss", ["dataset=concrete", "dataset.split.train_size=500", "seed=0"]):
        build.validate_config(job)  # fix_outputscale on any other model would be rejected here
        seen[(job.model.name, job.model.variant)] = job.model.fix_outputscale
    assert seen == {
        ("sq_dlm", "joint"): True,
        ("sq_dlm", "fixed"): False,
        ("dlm", "joint"): False,
        ("svgp", "joint"): False,
    }
    assert compose(["+experiment=regression_sqloss_pol", "model=sq_dlm"]).model.fix_outputscale is True
    assert compose(["+experiment=regression_sqloss_smoke", "model=sq_dlm"]).model.fix_outputscale is True


def test_sampling_methods_has_an_exact_gradient_arm_in_its_experiment():
    base, grid = compose_sweep("sampling_methods")
    assert grid == {
        "estimator": ["bmc", "ups"],
        "estimator.num_samples": ["1", "10", "100"],
        "seed": ["0", "1", "2", "3", "4"],
    }
    exact, egrid = compose_sweep("sampling_methods_exact")
    assert exact.estimator.name == "exact" and egrid == {"seed": ["0", "1", "2", "3", "4"]}
    smooth, sgrid = compose_sweep("sampling_methods_smooth")
    assert smooth.estimator.name == "smooth_bmc" and sgrid["estimator.num_samples"] == ["1", "10", "100"]
    for cfg in (base, exact, smooth):  # one experiment, one protocol: only the gradient differs
        assert cfg.tracking.experiment == "sampling_methods"
        assert cfg.model.name == "dlm" and cfg.model.variant == "joint" and cfg.objective.beta == 0.1
        assert (cfg.dataset.name, cfg.dataset.target, cfg.likelihood.name) == ("airline", "delayed", "probit")
        assert cfg.model.num_inducing == 200 and cfg.kernel.ard is True
        assert (cfg.trainer.batch_size, cfg.trainer.lr, cfg.trainer.max_epochs, cfg.trainer.eval_every_epochs) == (
            1000,
            1e-3,
            20,
            1,
        )
    build.validate_config(compose(["+experiment=sampling_methods_exact"]))
    for preset in ("sampling_methods_smoke", "sampling_methods_exact_smoke", "sampling_methods_smooth_smoke"):
        assert compose([f"+experiment={preset}"]).tracking.experiment == "sampling_methods_smoke"


@pytest.mark.slow  # ~1.5-2.5 s: the fast lane stays under 2 minutes
def test_airline_curves_runs_on_the_real_2008_data():
    cfg, grid = compose_sweep("airline_curves")
    assert (cfg.dataset.name, cfg.dataset.target, cfg.dataset.split.test_size) == ("airline", "delayed", 100000)
    standin = compose(["+experiment=airline_curves", "dataset=airline_nyc_class"])
    assert (standin.dataset.name, standin.dataset.target, standin.model.num_inducing) == ("airline_nyc", "delayed", 200)
    assert grid == {
        "model": ["dlm", "dlm_fixed", "svgp"],
        "objective.beta": ["0.1", "1", "10"],
        "seed": ["0", "1", "2", "3", "4"],
    }
    assert (cfg.trainer.max_epochs, cfg.trainer.max_iters, cfg.trainer.stop_rule) == (20, None, "none")
    for job in jobs("airline_curves", ["seed=0"]):
        build.validate_config(job)


@pytest.mark.parametrize(
    "preset,experiment,estimators,samples",
    [
        ("count_curves", "count_curves", ["bmc", "ups", "smooth_bmc"], ["1", "10", "100"]),  # Figs. 14-15
        pytest.param(
            "regression_bmc", "regression_bmc", None, ["1", "10", "100"], marks=pytest.mark.slow
        ),  # Fig. 16 (make test)
    ],
)
def test_the_appendix_learning_curve_presets(preset, experiment, estimators, samples):
    cfg, grid = compose_sweep(preset)
    assert cfg.tracking.experiment == experiment and cfg.trainer.stop_rule == "none" and cfg.trainer.eval_every == 50
    assert grid["estimator.num_samples"] == samples and grid["seed"] == ["0", "1", "2", "3", "4"]
    assert grid.get("estimator", [cfg.estimator.name]) == (estimators or ["bmc"])
    if preset == "count_curves":
        assert (cfg.dataset.name, cfg.likelihood.name, cfg.trainer.lr, cfg.model.num_inducing) == (
            "abalone",
            "poisson_exp",
            0.01,
            41,
        )
    else:
        assert (cfg.dataset.name, cfg.objective.beta, cfg.model.num_inducing) == ("pol", 0.1, 100)
        exact, egrid = compose_sweep("regression_bmc_exact")
        assert exact.estimator.name == "exact" and exact.tracking.experiment == "regression_bmc"
        assert "estimator.num_samples" not in egrid and exact.objective.beta == 0.1
        build.validate_config(compose(["+experiment=regression_bmc_exact"]))
    for job in jobs(preset, ["seed=0", "dataset=concrete" if preset != "count_curves" else "dataset=doctor_visits"]):
        build.validate_config(job)


@pytest.mark.slow  # ~1.5-2.5 s: the fast lane stays under 2 minutes
def test_the_studies_run_on_the_real_sets_and_their_smoke_variants_too():
    """Issue 39: the count, bias, thyroid, airline and BLOG studies and their CI-sized variants read the
    mirrored real sets (abalone, thyroid, airline with target delayed / delay, blog)."""
    expect = {
        "count": "abalone",
        "count_smoke": "abalone",
        "count_curves_smoke": "abalone",
        "bias_study": "abalone",
        "bias_study_smoke": "abalone",
        "classification_thyroid": "thyroid",
        "classification_thyroid_smoke": "thyroid",
        "airline_curves_smoke": "airline",
        "sampling_methods_smoke": "airline",
        "svbssgp_airline": "airline",
        "svbssgp_airline_smoke": "airline",
        "svbssgp_samples": "blog",
        "svbssgp_samples_smoke": "blog",
    }
    for preset, name in expect.items():
        assert compose([f"+experiment={preset}"]).dataset.name == name, preset
    sv = compose(["+experiment=svbssgp_airline"])
    assert (sv.dataset.target, sv.dataset.split.test_fraction, sv.model.partitions) == ("delay", 0.05, 2000)
    assert compose(["+experiment=airline_curves_smoke"]).dataset.target == "delayed"
    assert compose(["+experiment=classification_thyroid"]).tracking.experiment == "classification"
    assert compose(["+experiment=classification_thyroid"]).model.num_inducing == 37
    # the stand-ins stay available by name
    assert compose(["+experiment=count_smoke", "dataset=doctor_visits"]).dataset.name == "doctor_visits"
    assert compose(["+experiment=svbssgp_airline", "dataset=airline_nyc"]).dataset.name == "airline_nyc"
