"""Sweeps: parent/child runs, joblib and submitit launchers, resume, failures, beta grid, presets."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from gpdlm_cli.commands.sweep import beta_grid
from gpdlm_cli.exceptions import ConfigError

from ..conftest import SmokeRuns, compose, copy_store, exhaustive, gpdlm_subprocess, run_cli, sweep_grid
from ..recurrent import test_presets as recurrent_presets
from ..rkhs import test_preset as rkhs_preset

TINY = ["trainer.max_iters=15", "model.num_inducing=10", "dataset.split.train_size=80", "progress=false"]
# presets (files starting with "_" are fragments the presets include, not studies)
PRESETS = sorted(
    p.stem
    for p in (Path(__file__).resolve().parents[2] / "conf" / "experiment").glob("*.yaml")
    if not p.name.startswith("_")
)
FIRST_OF_FAMILY = {}
for _p in PRESETS:
    FIRST_OF_FAMILY.setdefault(_p.split("_")[0], _p)


def runs(db, experiment):
    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id]) if exp else []


def split_runs(all_runs):
    parents = [r for r in all_runs if r.data.tags.get("gpdlm.sweep") == "parent"]
    children = [r for r in all_runs if "mlflow.parentRunId" in r.data.tags]
    return parents, children


def test_beta_grid_follows_the_paper():
    assert beta_grid(100) == [100 / 2**k for k in range(14)] + [0.01]
    assert beta_grid(8, grid_min=1, factor=2) == [8, 4, 2, 1]
    assert beta_grid(10, grid_min=0.5, factor=4) == [10, 2.5, 0.625, 0.5]


@pytest.mark.parametrize(
    "kwargs,msg",
    [
        ({"grid_min": 0}, "'grid_min' parameter of sweep must be a float in (0, inf)"),
        ({"grid_min": -1}, "'grid_min'"),
        ({"factor": 1}, "'factor' parameter of sweep must be a float in (1, inf)"),
        ({"grid_min": 1000}, "the beta grid is empty"),
    ],
)
def test_beta_grid_bad_input(kwargs, msg):
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        beta_grid(100, **kwargs)


@pytest.mark.slow
def test_joblib_sweep_gives_children_under_one_parent_and_resumes(tmp_path, template_db):
    db = tmp_path / "mlflow.db"
    copy_store(template_db, tmp_path)  # the sweep, not the store's creation, is checked here
    args = [
        "train",
        "-m",
        "objective.beta=0.1,1,10",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        f"tracking.uri=sqlite:///{db}",
        "tracking.experiment=jl",
        *TINY,
    ]
    proc = gpdlm_subprocess(args, tmp_path)
    assert proc.returncode == 0, proc.stderr
    parents, children = split_runs(runs(db, "jl"))
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(children) == 3 and all(r.info.status == "FINISHED" for r in children)
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}
    assert sorted(float(r.data.params["objective.beta"]) for r in children) == [0.1, 1.0, 10.0]
    assert len({r.data.tags["gpdlm.config_hash"] for r in children}) == 3
    assert parents[0].data.metrics["jobs_finished"] == 3

    proc = gpdlm_subprocess(args + ["sweep.skip_finished=true"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "0 finished, 3 skipped, 0 failed" in proc.stderr
    parents, children = split_runs(runs(db, "jl"))
    assert len(children) == 3  # nothing was trained again
    assert len(parents) == 2


@pytest.mark.slow
def test_failing_job_does_not_stop_the_others(tmp_path, template_db, capsys):
    """A job that fails on its data (a training size larger than the set) is reported and the
    others go on; the parent run ends FAILED with a failure_reason that names the job and why
    (in this process: the exit code and stderr are cli.main's, as the console script's)."""
    db = tmp_path / "mlflow.db"
    copy_store(template_db, tmp_path)  # the sweep, not the store's creation, is checked here
    tiny = [a for a in TINY if not a.startswith("dataset.split.train_size")]
    rc, lines = run_cli(
        [
            "train",
            "-m",
            "dataset.split.train_size=80,5000,60",
            f"tracking.uri=sqlite:///{db}",
            "tracking.experiment=f",
            *tiny,
        ],
        tmp_path,
        capsys,
    )
    stderr = "\n".join(lines)
    assert rc == 1
    assert "2 finished, 0 skipped, 1 failed" in stderr
    assert "gpdlm: failed job 1 [dataset.split.train_size=5000" in stderr and "has only 690 rows" in stderr
    # the next command in the same process has its own exit code: the failed job is not carried over
    assert run_cli(["train", "--cfg", "job", *tiny], tmp_path, capsys)[0] == 0
    parents, children = split_runs(runs(db, "f"))
    assert parents[0].info.status == "FAILED"
    reason = parents[0].data.tags["failure_reason"]
    assert (
        reason.startswith("1 of 3 jobs failed: job 1 [dataset.split.train_size=5000") and "has only 690 rows" in reason
    )
    assert sorted(int(r.data.params["dataset.split.train_size"]) for r in children) == [60, 80]
    assert all(r.info.status == "FINISHED" for r in children)


def test_a_bad_value_in_a_sweep_is_rejected_before_any_job(tmp_path, capsys):
    rc, lines = run_cli(
        ["train", "-m", "objective.beta=0.5,-1,2", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", *TINY],
        tmp_path,
        capsys,
    )
    assert rc == 2
    assert lines == [
        "gpdlm: error: the 'beta' parameter of objective must be a finite float in (0, inf); got -1 instead"
    ]
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "mlflow.db").exists()


@pytest.mark.slow
def test_submitit_local_launcher(tmp_path, template_db):
    db = tmp_path / "mlflow.db"
    copy_store(template_db, tmp_path)  # the sweep, not the store's creation, is checked here
    proc = gpdlm_subprocess(
        [
            "train",
            "-m",
            "seed=0,1",
            "hydra/launcher=submitit_local",
            "hydra.launcher.timeout_min=5",
            f"tracking.uri=sqlite:///{db}",
            "tracking.experiment=sub",
            *TINY,
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    parents, children = split_runs(runs(db, "sub"))
    assert len(children) == 2 and all(r.info.status == "FINISHED" for r in children)
    assert sorted(r.data.params["seed"] for r in children) == ["0", "1"]


def test_a_warm_started_beta_path_runs_upwards():
    """With sweep.warm_start=true `gpdlm sweep beta` lists the grid from small beta up (each beta
    starts where the smaller one ended); cold sweeps keep the paper's order, n down to grid_min."""
    from gpdlm_cli.commands.sweep import sweep_overrides

    (cold,) = sweep_overrides("beta", ["sweep.grid_min=10", *TINY])
    (warm,) = sweep_overrides("beta", ["sweep.grid_min=10", "sweep.warm_start=true", *TINY])
    assert cold[1] == "objective.beta=80.0,40.0,20.0,10.0"
    assert warm[1] == "objective.beta=10.0,20.0,40.0,80.0"


def test_each_training_size_gets_its_own_grid():
    """A sweep over dataset.split.train_size -- a preset's (regression_logloss_pol: 500 to 4,000) or the
    command line's -- is one multirun per size, each with the paper's grid of its own n."""
    from gpdlm_cli.commands.sweep import data_combinations, sweep_overrides

    assert data_combinations(["+experiment=regression_logloss_pol"]) == [
        [f"dataset.split.train_size={n}"] for n in (500, 1000, 2000, 4000)
    ]
    assert data_combinations(["+experiment=regression_logloss_pol", "dataset.split.train_size=1000"]) == [[]]
    assert data_combinations(["dataset=concrete,pol", "dataset.split.train_size=40,60"]) == [
        ["dataset=concrete", "dataset.split.train_size=40"],
        ["dataset=concrete", "dataset.split.train_size=60"],
        ["dataset=pol", "dataset.split.train_size=40"],
        ["dataset=pol", "dataset.split.train_size=60"],
    ]
    tiny = [o for o in TINY if not o.startswith("dataset.split.train_size")]
    runs = sweep_overrides("beta", ["dataset.split.train_size=40,60", "seed=0,1", "sweep.grid_min=10", *tiny])
    assert [(r[1], r[-1]) for r in runs] == [
        ("objective.beta=40.0,20.0,10.0", "dataset.split.train_size=40"),
        ("objective.beta=60.0,30.0,15.0,10.0", "dataset.split.train_size=60"),
    ]
    assert all("seed=0,1" in r for r in runs)  # every other key still swept


@pytest.mark.slow
def test_sweep_beta_over_two_sizes_runs_each_grid(tmp_path, template_db):
    """`gpdlm sweep beta` as a user runs it: one multirun per training size, each with the factor-2 grid of its
    own n down to grid_min (a single size is the same path with one multirun: test_a_warm_started_beta_path...)."""
    db = tmp_path / "mlflow.db"
    copy_store(template_db, tmp_path)  # the sweep, not the store's creation, is checked here
    tiny = [o for o in TINY if not o.startswith("dataset.split.train_size")]
    proc = gpdlm_subprocess(
        [
            "sweep",
            "beta",
            "dataset.split.train_size=40,60",
            "sweep.grid_min=10",
            f"tracking.uri=sqlite:///{db}",
            "tracking.experiment=sb2",
            *tiny,
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "(dataset.split.train_size=60; multirun 2 of 2)" in proc.stderr
    parents, children = split_runs(runs(db, "sb2"))
    assert len(parents) == 2
    got = sorted(
        (int(r.data.params["dataset.split.train_size"]), float(r.data.params["objective.beta"])) for r in children
    )
    assert got == [(40, 10.0), (40, 20.0), (40, 40.0), (60, 10.0), (60, 15.0), (60, 30.0), (60, 60.0)]


def test_sweep_beta_bad_input(tmp_path, capsys):
    rc, lines = run_cli(["sweep", "beta", "sweep.grid_min=0", *TINY], tmp_path, capsys)
    assert rc == 2
    assert lines[-1] == ("gpdlm: error: the 'grid_min' parameter of sweep must be a float in (0, inf); got 0 instead")


# the fast lane composes the first preset of each study family (the name up to its first "_"); make test, all 71
@pytest.mark.parametrize("preset", exhaustive(PRESETS, fast=lambda p: p == FIRST_OF_FAMILY[p.split("_")[0]]))
def test_preset_composes(preset):
    cfg = compose([f"+experiment={preset}"])
    # <study>_smoke and <study>_reduced (reproduce's scales) write to <experiment>_smoke / _reduced
    study = preset.removesuffix("_smoke").removesuffix("_reduced")
    experiment = cfg.tracking.experiment.removesuffix("_smoke").removesuffix("_reduced")
    # an arm <experiment>_<arm> (sampling_methods_exact, regression_bmc_exact) adds runs to <experiment>
    assert experiment.startswith(study.replace("regression_baselines", "regression_logloss")) or study.startswith(
        experiment + "_"
    )


# what a family checks in the runs of its smoke presets (beyond the count and status checked here);
# each smoke preset runs once in the suite, in test_smoke_preset_runs below
FAMILY_CHECKS = {
    **{f"{p}_smoke": functools.partial(recurrent_presets.check_smoke_runs, p) for p in recurrent_presets.PRESETS},
    "rkhs_batch_study_smoke": rkhs_preset.check_batch_smoke_runs,
    "rkhs_gaussian_study_smoke": rkhs_preset.check_gaussian_smoke_runs,
    "bias_study_smoke": lambda smoke: _check_bias_smoke_runs(smoke),  # defined below
}


def _check_bias_smoke_runs(smoke):
    """The bias preset's runs are `gpdlm bias` runs with the statistic the DLM report's Fig. 9 table reads,
    one per (estimator, L), at the preset's R."""
    assert {r.data.tags.get("gpdlm.command") for r in smoke.children} == {"bias"}
    got = {(r.data.params["estimator.name"], r.data.params["estimator.num_samples"]) for r in smoke.children}
    assert got == {("bmc", "1"), ("bmc", "10"), ("ups", "1"), ("ups", "10")}
    for r in smoke.children:
        assert r.data.metrics["repetitions"] == 10 and r.data.metrics["mean_block_bias_debiased_rel"] >= 0.0


SMOKE_PRESETS = [p for p in PRESETS if p.endswith("_smoke")]
#: the smoke presets run in batches, each batch in one fresh interpreter (tests/run/smoke_batch.py): torch,
#: gpytorch, Hydra and MLflow are imported once per batch, and each preset's store is a copy of one empty
#: MLflow store (its schema costs seconds to create); round-robin, so each batch mixes families
SMOKE_BATCHES = [SMOKE_PRESETS[i::6] for i in range(6)]


@pytest.fixture(scope="module")
def empty_store(template_db):
    """An empty MLflow SQLite store with its schema (the session's template), copied for each preset."""
    return template_db


def check_smoke_preset(preset: str, folder: Path) -> None:
    """What one smoke preset's `gpdlm train -m +experiment=<preset>` (`gpdlm bias` for the bias_* presets)
    left in ``folder``: exit code 0, one FINISHED child run per job of the preset's grid, and the family's own
    checks of those runs (FAMILY_CHECKS)."""
    stderr = (folder / "stderr.txt").read_text()
    assert (folder / "exit_code.txt").read_text() == "0", stderr[-3000:]
    cfg = compose([f"+experiment={preset}"])
    expected = 1
    for values in sweep_grid([f"+experiment={preset}"]).values():
        expected *= len(values)
    db = folder / "mlflow.db"
    _, children = split_runs(runs(db, cfg.tracking.experiment))
    assert len(children) == expected and all(r.info.status == "FINISHED" for r in children)
    if preset in FAMILY_CHECKS:
        FAMILY_CHECKS[preset](SmokeRuns(preset, f"sqlite:///{db}", cfg.tracking.experiment, children, stderr, folder))


@pytest.mark.slow
@pytest.mark.parametrize("batch", SMOKE_BATCHES, ids=["+".join(b) for b in SMOKE_BATCHES])
def test_smoke_presets_run(tmp_path, batch, empty_store):
    """Every smoke preset as a user runs it, `gpdlm train -m +experiment=<preset>` (``cli.main``, in a
    fresh interpreter that runs the batch's presets one after another), checked by ``check_smoke_preset``;
    every preset of the batch is checked, and the failures are named together."""
    import json
    import os
    import shutil
    import subprocess
    import sys

    specs = []
    for preset in batch:
        folder = tmp_path / preset
        folder.mkdir()
        shutil.copyfile(empty_store, folder / "mlflow.db")
        command = "bias" if preset.startswith("bias_") else "train"
        specs.append({"preset": preset, "command": command, "cwd": str(folder), "db": str(folder / "mlflow.db")})
    (tmp_path / "spec.json").write_text(json.dumps(specs))
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(repo), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("smoke_batch.py")), str(tmp_path / "spec.json")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    failures = []
    for preset in batch:
        try:
            check_smoke_preset(preset, tmp_path / preset)
        except Exception as e:  # noqa: BLE001 -- every preset is checked; all failures are reported
            failures.append(f"{preset}: {type(e).__name__}: {e}")
    assert not failures, "\n".join(failures)


def test_every_family_check_names_a_smoke_preset():
    assert set(FAMILY_CHECKS) <= set(SMOKE_PRESETS)
    assert sorted(p for batch in SMOKE_BATCHES for p in batch) == SMOKE_PRESETS  # each runs once


@pytest.mark.parametrize(
    "launcher,cores,expected",
    [
        ({}, 4, 1),  # the basic launcher runs one job at a time
        ({"n_jobs": 1}, 4, 1),
        ({"n_jobs": 2}, 4, 2),
        ({"n_jobs": -1}, 4, 4),  # joblib: all cores
    ],
)
def test_parallel_jobs_reads_the_launchers_n_jobs(monkeypatch, launcher, cores, expected):
    from omegaconf import OmegaConf

    from gpdlm_cli.hydra_apps import parallel_jobs

    monkeypatch.setattr("os.cpu_count", lambda: cores)
    assert parallel_jobs(OmegaConf.create({"launcher": launcher})) == expected
