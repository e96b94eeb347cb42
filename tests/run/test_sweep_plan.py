"""The sweep plan (issue 21, item 6): `--dry-run` lists the jobs Hydra would launch and estimates
their wall time without running them; every multirun announces its plan in one line."""

from __future__ import annotations

import pytest

from gpdlm_cli import cli
from gpdlm_cli.sweep.plan import job_overrides, plan


def test_the_job_list_is_the_product_of_preset_params_and_command_line_sweeps():
    jobs, _ = job_overrides(["+experiment=regression_logloss_pol_smoke", "seed=0,1"])
    assert len(jobs) == 3 * 2  # the smoke preset's 3 models x two seeds
    assert all(any(o.startswith("seed=") for o in j) for j in jobs)
    assert {o for j in jobs for o in j if o.startswith("model=")} == {"model=dlm", "model=sq_dlm_fixed", "model=fitc"}


@pytest.mark.slow
def test_dry_run_prints_the_plan_and_runs_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = cli.main(
        [
            "train",
            "-m",
            "model=dlm,svgp",
            "dataset.split.train_size=100",
            "model.num_inducing=10",
            "trainer.max_iters=50",
            "trainer=fast",
            "threads=1",
            "--dry-run",
        ]
    )
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert out[0].startswith("gpdlm: sweep of 2 jobs, trainer.protocol=fast, shared beta-free stages")
    assert "estimated wall time" in out[0]
    assert any("dlm_joint on concrete (train_size 100" in ln and "(L-BFGS)" in ln for ln in out[1:])
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "mlflow.db").exists()


def test_the_estimate_counts_a_shared_stage_once_per_key():
    p = plan(
        [
            "model=dlm_fixed",
            "objective.beta=0.5,1,2",
            "dataset.split.train_size=100",
            "model.num_inducing=10",
            "trainer.max_iters=40",
            "threads=1",
        ],
        estimate=True,
        sample_iterations=3,
    )
    (stages,) = p.per_shape.values()
    by_name = {name: (cap, ms) for name, _, cap, ms, _, _ in stages}
    expected = (by_name["svgp"][0] * by_name["svgp"][1] + 3 * by_name["dlm"][0] * by_name["dlm"][1]) / 1000
    assert p.estimate_s == pytest.approx(expected)
    p_off = plan(["model=dlm_fixed", "objective.beta=0.5,1,2", "sweep.share_stages=false"])
    assert not p_off.share_stages and len(p_off.jobs) == 3


@pytest.mark.slow
def test_the_fast_estimate_adds_the_first_order_start_of_each_lbfgs_stage():
    common = [
        "model=svgp",
        "objective.beta=0.5,1",
        "dataset.split.train_size=100",
        "model.num_inducing=10",
        "trainer=fast",
        "threads=1",
    ]
    for adam in (0, 50):
        p = plan(common + [f"trainer.fast_adam_iters={adam}"], estimate=True, sample_iterations=3)
        ((name, _, cap, ms, lbfgs, seconds),) = next(iter(p.per_shape.values()))
        assert name == "svgp" and lbfgs and cap == 1000
        if adam == 0:
            assert seconds == pytest.approx(cap * ms / 1000)
        else:
            assert seconds > cap * ms / 1000  # plus 50 Adam iterations at their own measured speed
        assert p.estimate_s == pytest.approx(2 * seconds)


def test_dry_run_needs_a_multirun(capsys):
    assert cli.main(["train", "model=dlm", "--dry-run"]) == 2
    assert capsys.readouterr().err.strip().startswith("gpdlm: error: --dry-run describes a multirun")


def test_the_start_of_multirun_line_names_the_launcher_of_the_hydra_overrides(capsys):
    """hydra/launcher=joblib and hydra.launcher.n_jobs are Hydra overrides, not task ones: the line at
    the start of a multirun says `launcher joblib x2` (it said `launcher basic` until 2026-11-27)."""
    from omegaconf import OmegaConf

    from gpdlm_cli.sweep import callback as sweep

    config = OmegaConf.create(
        {
            "hydra": {
                "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"},
                "overrides": {
                    "task": ["model=svgp", "objective.beta=0.5,1", "dataset.split.train_size=100", "trainer=fast"],
                    "hydra": ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "hydra.mode=MULTIRUN"],
                },
            }
        }
    )
    sweep._announce(config)
    line = capsys.readouterr().err.strip()
    assert line.startswith("gpdlm: sweep of 2 jobs, trainer.protocol=fast") and "launcher joblib x2" in line, line


def test_a_sweep_dry_run_with_a_bad_option_is_one_line(capsys):
    # checked before `gpdlm sweep beta` composes anything (it used to end in Hydra's traceback)
    assert cli.main(["sweep", "beta", "dataset.split.train_size=200,400", "model=nonexistent", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpdlm: error: unknown model 'nonexistent' (choose from: bsgd, dlm,")
