"""gpdlm's default sweeper (``hydra/sweeper=gpdlm``, hydra_plugins/gpdlm_sweeper): Hydra's basic
sweeper whose check before the launch composes one job per config structure instead of every job."""

from __future__ import annotations

import sqlite3

import pytest

from gpdlm_cli import cli
from gpdlm_cli.sweep.callback import jobs_to_compose, sweeper_name

GROUPS = {"model", "dataset", "trainer", "kernel"}


def is_group(key):
    return key.lstrip("+~") in GROUPS


def test_jobs_that_differ_only_in_plain_values_compose_once():
    batch = [
        [f"model={m}", f"objective.beta={b}", f"seed={s}"]
        for m in ("dlm", "svgp")
        for s in (0, 1)
        for b in (500.0, 0.5, 0.01)
    ]
    # one composition per model: beta and seed are plain values of the same keys and types
    assert jobs_to_compose(batch, is_group) == [0, 6]


@pytest.mark.parametrize(
    "other, composed",
    [
        ("objective.beta=abc", True),  # another type of value
        ("objective.beta=null", True),
        ("+objective.extra=1", True),  # an added key
        ("hydra.launcher.n_jobs=2", True),  # a hydra key (typed by Hydra's structured config)
        ("trainer=fast", True),  # a config group
        ("objective.beta=3", True),  # an int where the first job has a float
        ("objective.beta=[1,2]", True),  # a list
        ("objective.beta=0.25", False),  # the same structure: not composed again
    ],
)
def test_a_job_with_another_structure_is_composed(other, composed):
    first = ["model=dlm", "objective.beta=0.5"]
    second = ["model=dlm", other]
    assert (jobs_to_compose([first, second], is_group) == [0, 1]) is composed


def test_an_unparsable_job_is_composed_so_that_hydra_reports_it():
    assert jobs_to_compose([["objective.beta=1"], ["objective.beta=(("], ["objective.beta=2"]], is_group) == [0, 1]


class FakeLoader:
    def __init__(self, bad=None):
        self.composed, self.bad = [], bad

    def get_group_options(self, key):
        return ["a", "b"] if key in GROUPS else []

    def load_sweep_config(self, config, overrides):
        self.composed.append(overrides)
        if self.bad in overrides:
            raise ValueError(f"cannot compose {self.bad}")


def sweeper_with(loader):
    from types import SimpleNamespace

    from hydra_plugins.gpdlm_sweeper.gpdlm_sweeper import GpdlmSweeper

    s = GpdlmSweeper(max_batch_size=None, params=None)
    s.hydra_context, s.config = SimpleNamespace(config_loader=loader), None
    return s


def test_the_sweeper_composes_the_picked_jobs_and_fails_on_a_bad_one():
    batch = [["model=a", f"objective.beta={b}"] for b in (1.0, 2.0, 3.0)] + [["model=b", "objective.beta=1.0"]]
    loader = FakeLoader()
    sweeper_with(loader).validate_batch_is_legal(batch)
    assert loader.composed == [batch[0], batch[3]]
    with pytest.raises(ValueError, match="model=b"):
        sweeper_with(FakeLoader(bad="model=b")).validate_batch_is_legal(batch)


@pytest.mark.slow  # a real multirun: ~7 s
def test_it_is_the_default_sweeper_and_runs_every_job(tmp_path, monkeypatch):
    from gpdlm_cli.sweep.plan import job_overrides

    _, cfg = job_overrides(["objective.beta=1,2"])
    assert cfg.hydra.sweeper._target_ == "hydra_plugins.gpdlm_sweeper.gpdlm_sweeper.GpdlmSweeper"
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "mlflow.db"
    code = cli.main(
        [
            "train",
            "-m",
            "objective.beta=1,2",
            "seed=0,1",
            "trainer.max_iters=2",
            "progress=false",
            "threads=1",
            "model.num_inducing=5",
            "dataset.split.train_size=50",
            f"tracking.uri=sqlite:///{db}",
        ]
    )
    assert code == 0
    with sqlite3.connect(db) as c:
        runs = c.execute("select status, count(*) from runs group by status").fetchall()
        sweeper = c.execute("select value from tags where key = 'gpdlm.sweeper'").fetchall()
    assert runs == [("FINISHED", 5)]  # the parent and its four jobs
    assert sweeper == [("basic",)]


def test_sweeper_names():
    from omegaconf import OmegaConf

    def named(target):
        return sweeper_name(OmegaConf.create({"hydra": {"sweeper": {"_target_": target}}}))

    assert named("hydra_plugins.gpdlm_sweeper.gpdlm_sweeper.GpdlmSweeper") == "basic"
    assert named("hydra._internal.core_plugins.basic_sweeper.BasicSweeper") == "basic"
    assert named("hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper") == "optuna"


@pytest.mark.slow  # a real multirun of two jobs: ~6 s
def test_a_config_the_check_composed_is_launched_not_composed_again(tmp_path, monkeypatch):
    """With the basic launcher, the configs the pre-launch check composed (one per structure: here each job,
    ``model=`` is a group) are the ones its jobs run: two job composes, not four; each job still runs its own
    config (its model in the store, and the config hash a fresh compose of its overrides gives)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    from gpdlm_cli.hydra_apps import compose_config
    from gpdlm_cli.tracking.identity import config_hash

    composed = []
    original = ConfigLoaderImpl.load_sweep_config

    def counted(self, master_config, sweep_overrides):
        composed.append(list(sweep_overrides))
        return original(self, master_config, sweep_overrides)

    monkeypatch.setattr(ConfigLoaderImpl, "load_sweep_config", counted)
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "mlflow.db"
    common = ["trainer.max_iters=2", "threads=1", "model.num_inducing=5", "dataset.split.train_size=50"]
    args = ["train", "-m", "model=svgp,dlm", *common, "progress=false", f"tracking.uri=sqlite:///{db}"]
    assert cli.main(args) == 0
    assert [job[0] for job in composed] == ["model=svgp", "model=dlm"]  # by the check only: two, not four
    with sqlite3.connect(db) as c:
        got = dict(
            c.execute(
                "select p.value, t.value from params p join tags t on p.run_uuid = t.run_uuid "
                "where p.key = 'model.name' and t.key = 'gpdlm.config_hash'"
            ).fetchall()
        )
    want = {job[0].split("=")[1]: config_hash(compose_config(job)) for job in composed}
    assert got == want
