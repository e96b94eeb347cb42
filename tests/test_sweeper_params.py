"""Bad keys under ``hydra.sweeper.params`` (a preset's, or the command line's): one line, exit 2, before the
multirun's sweep folder and MLflow parent run exist (Hydra used to stop with "Could not override
'trainer.max_iter'" after both existed). ``config_check._swept_params``."""

from __future__ import annotations

import pytest

from .conftest import assert_no_mlflow_run, run_cli

TINY = ["progress=false", "trainer.max_iters=2", "model.num_inducing=5", "dataset.split.train_size=50"]


@pytest.fixture
def preset():
    """``preset(name, params)``: a user's preset ``+experiment=<name>`` (as myconf/experiment/<name>.yaml would
    be) whose ``hydra.sweeper.params`` are ``params``; registered in Hydra's ConfigStore for the test only (the
    config check's caches forget it before and after)."""
    from hydra.core.config_store import ConfigStore

    from gpdlm_cli import config_check

    def forget():
        config_check._OPTIONS.clear()
        config_check._composed.cache_clear()

    store, names = ConfigStore.instance(), []

    def make(name: str, params: dict) -> str:
        store.store(group="experiment", name=name, package="_global_", node={"hydra": {"sweeper": {"params": params}}})
        names.append(name)
        forget()
        return f"+experiment={name}"

    yield make
    for name in names:
        store.repo["experiment"].pop(f"{name}.yaml", None)
    forget()


NEW_KEY = "(a new key needs a leading '+': +{key}=...)"
CASES = [
    (
        {"trainer.max_iter": "1,2"},
        "unknown config key 'trainer.max_iter' under hydra.sweeper.params; did you mean 'trainer.max_iters' or "
        "'trainer.fast_max_iters'? " + NEW_KEY.format(key="trainer.max_iter"),
    ),
    (
        {"model": "svgp,pic", "model.nosuch": "1,2"},
        "unknown config key 'model.nosuch' under hydra.sweeper.params " + NEW_KEY.format(key="model.nosuch"),
    ),
    (
        {"model": "svgp,svgpp"},
        "unknown model 'svgpp' under hydra.sweeper.params; did you mean 'svgp' or 'svbssgp' or 'ssgp'? (choose "
        "from: bsgd, dlm, dlm_fixed, exact, fitc, gp_gru, gp_lstm, gp_narx, gp_rnn, gru, lstm, minimax, "
        "minimax_paper, narx, pic, rnn, scgd, scgd_paper, sgpr, sq_dlm, sq_dlm_fixed, ssgp, svbssgp, svgp, vssgp)",
    ),
    (
        {"trainer": {"max_iter": "1,2"}},  # nested, as +hydra.sweeper.params.trainer.max_iter=... makes it
        "unknown config key 'trainer.max_iter' under hydra.sweeper.params; did you mean 'trainer.max_iters' or "
        "'trainer.fast_max_iters'? " + NEW_KEY.format(key="trainer.max_iter"),
    ),
]


@pytest.mark.parametrize("params,message", CASES, ids=["typo", "no-model-has-it", "group-option", "nested"])
def test_an_unknown_swept_key_in_a_preset_is_one_line_before_the_sweep(tmp_path, capsys, preset, params, message):
    rc, err = run_cli(["train", "-m", preset("user_bad_sweep", params), *TINY], tmp_path, capsys)
    assert (rc, err) == (2, [f"gpdlm: error: {message}"])
    assert list(tmp_path.iterdir()) == []  # no sweep folder, no MLflow store
    assert_no_mlflow_run(tmp_path / "mlflow.db")


def test_an_unknown_key_in_the_command_lines_sweeper_params_is_one_line(tmp_path, capsys):
    rc, err = run_cli(["train", "-m", 'hydra.sweeper.params={model.nosuch:"1,2"}', *TINY], tmp_path, capsys)
    assert (rc, err) == (
        2,
        [
            "gpdlm: error: unknown config key 'model.nosuch' under hydra.sweeper.params "
            + NEW_KEY.format(key="model.nosuch")
        ],
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "params,cmd",
    [
        ({"model": "svgp,pic", "model.partitions": "10,20"}, []),  # a key of pic's config only: pic's jobs use it
        ({"model.partitions": "10,20"}, ["model=svgp,pic"]),  # the command line sweeps the group
        ({"+model.my_note": "a,b"}, []),  # an added key
        ({"seed": "0,1", "objective.beta": "0.5,1"}, []),
    ],
    ids=["only-some-models", "cmd-sweeps-the-group", "added", "plain"],
)
def test_swept_keys_that_some_job_has_pass_the_check(preset, params, cmd):
    from gpdlm_cli.config_check import check_overrides

    assert check_overrides(["-m", preset("user_good_sweep", params), *cmd]) is None
