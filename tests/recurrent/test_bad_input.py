"""Bad input for the recurrent family: one line, a GpdlmError (non-zero exit), and no run."""

from __future__ import annotations

import pytest

from gpdlm_cli.exceptions import GpdlmError
from gpdlm_cli.run.train import run_train

from ..conftest import NoRunTracker, compose, exhaustive

BASE = ["model=gp_lstm", "trainer.max_iters=2", "progress=false", "tracking.enabled=false"]
ACTUATOR = ["dataset=sysid_actuator", "dataset.n=200"]
BAD = [
    (
        ["dataset.mode=teleport"],
        "the 'mode' parameter of dataset=sysid_actuator must be one of regression, autoregression, free_simulation; got 'teleport'",
    ),
    (["dataset=concrete"], "model=gp_lstm maps windows of a time series: it needs a sequence dataset"),
    (["model=lstm", "dataset=concrete"], "model=lstm maps windows of a time series"),
    (["dataset.lag=0"], "the 'lag' parameter of dataset=sysid_actuator must be an integer >= 1; got 0"),
    (
        ["model.gp.inference=kiss", "model.network.embed_dim=4"],
        "model.gp.inference=kiss interpolates on a grid of grid_size^embed_dim points: it needs model.network.embed_dim <= 3",
    ),
    (
        ["model.training.algorithm=delayed", "model.training.kernel_refresh_every=0"],
        "the 'kernel_refresh_every' parameter of model=gp_lstm (training) must be an integer >= 1 or null (one epoch); got 0",
    ),
    (
        ["model.network.dropout=1.0"],
        "the 'dropout' parameter of model=gp_lstm (network) must be a float in [0, 1); got 1.0",
    ),
    (
        ["model=lstm", "model.network.rec_dropout=-0.1"],
        "the 'rec_dropout' parameter of model=lstm (network) must be a float in [0, 1); got -0.1",
    ),
    (
        ["model.training.algorithm=sgd"],
        "the 'algorithm' parameter of model=gp_lstm (training) must be one of full, alternating, delayed",
    ),
    (  # an old name added to the config (a preset's trainer block, +trainer.<key>): refused, never ignored
        ["+trainer.theta_steps=3"],
        "'trainer.theta_steps' is now 'model.training.theta_steps': the recurrent GP models' protocol keys "
        "moved from trainer to the model's config (see CHANGELOG.md); write model.training.theta_steps=3",
    ),
    (
        ["model.training.algorithm=alternating", "model.training.kernel_refresh_every=4"],
        "model.training.algorithm=alternating (Algorithm 1)",
    ),
    (["model.gp.max_exact=50"], "model=gp_lstm with model.gp.inference=exact refuses n_train="),
    (
        ["model.gp.kiss_dense_below=-1"],
        "the 'kiss_dense_below' parameter of model=gp_lstm (gp) must be an integer >= 0; got -1",
    ),
    (
        [
            "dataset=driving",
            "dataset.task=lanes",
            "dataset.mode=free_simulation",
            "dataset.stride=1",
            "dataset.train_minutes=0.2",
            "dataset.test_minutes=0.2",
            "dataset.lag=16",
            "dataset.lag_step=4",
        ],
        "dataset.mode=free_simulation feeds back only the predicted outputs (lane_left_y3), but the windows of "
        "dataset=driving also hold past values of 13 other series (lane_left_y0, lane_left_y1, lane_left_y2, ...) "
        "that would stay ground truth during the rollout (teacher forcing)",
    ),
    (
        [
            "model=exact",
            "dataset=driving",
            "dataset.task=lead",
            "dataset.output=all",
            "dataset.train_minutes=0.2",
            "dataset.test_minutes=0.2",
            "dataset.lag=16",
            "dataset.lag_step=8",
            "dataset.stride=50",
        ],
        "dataset=driving has 2 outputs but model=exact predicts one; use one of gp_lstm",
    ),
]


# the fast lane: the table's first 3 cases; make test, all
@pytest.mark.parametrize("overrides,message", exhaustive(BAD, fast=3, ids=lambda c: " ".join(c[0])))
def test_bad_input_fails_in_one_line_before_any_run(tmp_path, overrides, message):
    ds = [] if any(o.startswith("dataset=") for o in overrides) else ACTUATOR
    cfg = compose(BASE + ds + overrides)
    with pytest.raises(GpdlmError) as e:
        run_train(cfg, tmp_path, tracker=NoRunTracker())
    line = str(e.value)
    assert "\n" not in line and message in line, line
    assert not (tmp_path / "metrics.json").exists()


@pytest.mark.parametrize(
    "override,new",
    [
        ("trainer.algorithm=delayed", "model.training.algorithm=delayed"),
        ("trainer.lr_over_tau=false", "model.training.lr_over_tau=false"),
        ("+trainer.final_theta_steps=0", "model.training.final_theta_steps=0"),
    ],
)
def test_an_old_protocol_key_names_its_new_name_in_one_line(tmp_path, capsys, override, new):
    """The keys config-hash version 3 moved from trainer to model.training: one line naming the new key,
    exit 2, before Hydra makes a run folder."""
    from ..conftest import run_cli

    rc, err = run_cli(["train", "model=gp_lstm", "dataset=sysid_actuator", override], tmp_path, capsys)
    old = override.lstrip("+").split("=")[0]
    assert rc == 2 and err == [
        f"gpdlm: error: '{old}' is now '{new.split('=')[0]}': the recurrent GP models' protocol keys moved from "
        f"trainer to the model's config (see CHANGELOG.md); write {new}"
    ], err
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def user_preset():
    """A user's preset ``experiment=user_old_sweep`` (as a conf/experiment/user_old_sweep.yaml would be) that
    sweeps an old protocol key under ``hydra.sweeper.params``; registered in Hydra's ConfigStore for the
    test only (the config check's caches forget it before and after)."""
    from hydra.core.config_store import ConfigStore

    from gpdlm_cli import config_check

    def forget():
        config_check._OPTIONS.clear()
        config_check._composed.cache_clear()

    store = ConfigStore.instance()
    store.store(
        group="experiment",
        name="user_old_sweep",
        package="_global_",
        node={"hydra": {"sweeper": {"params": {"trainer.algorithm": "full,delayed"}}}},
    )
    forget()
    yield "+experiment=user_old_sweep"
    store.repo["experiment"].pop("user_old_sweep.yaml", None)
    forget()


@pytest.mark.parametrize(
    "sweep,old,new",
    [
        (["trainer.algorithm=full,delayed"], "trainer.algorithm", "model.training.algorithm=..."),
        (["+trainer.theta_steps=1,2"], "trainer.theta_steps", "model.training.theta_steps=..."),
        (
            ["hydra.sweeper.params.trainer.algorithm=full,delayed"],
            "trainer.algorithm",
            "model.training.algorithm=full,delayed",
        ),
        (
            ['hydra.sweeper.params={++trainer.theta_steps:"1,2"}'],
            "trainer.theta_steps",
            "model.training.theta_steps=1,2",
        ),
        (
            ['+hydra.sweeper.params.trainer.lr_over_tau="false"'],
            "trainer.lr_over_tau",
            'model.training.lr_over_tau="false"',
        ),
        ("preset", "trainer.algorithm", "model.training.algorithm=full,delayed"),
    ],
    ids=[
        "cli-sweep",
        "cli-added-sweep",
        "cli-sweeper-param",
        "cli-sweeper-params-dict",
        "cli-sweeper-param-added",
        "preset",
    ],
)
def test_an_old_protocol_key_swept_names_its_new_name_in_one_line(tmp_path, capsys, request, sweep, old, new):
    """A multirun that sweeps an old key -- on the command line, or under hydra.sweeper.params (a preset's or
    the command line's) -- gets the same one line, exit 2, before Hydra makes a sweep folder or MLflow run
    (Hydra used to stop with "Could not override 'trainer.algorithm'" after both existed)."""
    from ..conftest import run_cli

    if sweep == "preset":
        sweep = [request.getfixturevalue("user_preset")]
    rc, err = run_cli(["train", "-m", "model=gp_lstm", "dataset=sysid_actuator", *sweep], tmp_path, capsys)
    assert rc == 2 and err == [
        f"gpdlm: error: '{old}' is now '{new.split('=')[0]}': the recurrent GP models' protocol keys moved from "
        f"trainer to the model's config (see CHANGELOG.md); write {new}"
    ], err
    assert list(tmp_path.iterdir()) == []  # no sweep folder, no MLflow store (so no run)


@pytest.mark.parametrize(
    "args",
    [
        ["+experiment=gplstm_gef_power_smoke"],  # sweeps model: lstm,gp_lstm and seed
        ["model=gp_lstm", 'hydra.sweeper.params={model.training.theta_steps:"1,2"}'],
        ["model=gp_lstm", "hydra.run.dir=elsewhere"],  # Hydra's config with no sweeper params (null)
    ],
)
def test_sweeper_params_in_the_new_names_pass_the_check(args):
    from gpdlm_cli.config_check import check_overrides

    assert check_overrides(["-m", "dataset=sysid_actuator", *args]) is None
