"""A researcher's own presets and group options, in their own folder (docs/configuration.md, "Your own
presets"): ``-cd DIR`` / ``--config-dir DIR``, ``hydra.searchpath=[file://DIR]`` and ``GPDLM_CONFIG_PATH``
put the folder on Hydra's search path; gpdlm's pre-launch check looks there too, and the run composes
and runs the user's preset. A name found nowhere is still one line, exit 2, no MLflow run."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpdlm_cli import config_check
from gpdlm_cli.config_check import check_overrides

from .conftest import assert_no_mlflow_run, gpdlm_subprocess, run_cli

PRESET = """# @package _global_
# a user's preset: the packaged CI-sized beta curve, smaller still
defaults:
  - /experiment/beta_curve_smoke
  - _self_
tracking:
  experiment: mine
model:
  num_inducing: 7
trainer:
  max_iters: 5
"""
MODEL = """# a user's model option: gpdlm's dlm with random inducing inputs
defaults:
  - dlm
  - _self_
inducing_init: random
"""


@pytest.fixture
def myconf(tmp_path, monkeypatch) -> Path:
    """``tmp_path/myconf`` with ``experiment/mine.yaml`` and ``model/mydlm.yaml``; the check's caches
    forget every search path before and after; the working directory is ``tmp_path``."""
    folder = tmp_path / "myconf"
    (folder / "experiment").mkdir(parents=True)
    (folder / "model").mkdir()
    (folder / "experiment" / "mine.yaml").write_text(PRESET)
    (folder / "model" / "mydlm.yaml").write_text(MODEL)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GPDLM_CONFIG_PATH", raising=False)
    config_check._OPTIONS.clear()
    yield folder
    config_check._OPTIONS.clear()


FORMS = {
    "searchpath": ["hydra.searchpath=[file://myconf]"],
    "cd": ["-cd", "myconf"],
    "config-dir": ["--config-dir=myconf"],
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_check_accepts_a_user_preset_and_group_option_on_the_search_path(myconf, form):
    assert check_overrides(["+experiment=mine", "model=mydlm", "model.num_inducing=3", *FORMS[form]]) is None
    # the user's preset's keys are checked as gpdlm's are
    bad = check_overrides(["+experiment=mine", "trainer.max_iters=-1", *FORMS[form]])
    assert bad == "the 'max_iters' parameter of trainer must be an integer >= 1; got -1 instead"


def test_the_check_finds_the_folders_of_gpdlm_config_path(myconf, monkeypatch):
    assert check_overrides(["+experiment=mine"]).startswith("unknown experiment 'mine'")
    monkeypatch.setenv("GPDLM_CONFIG_PATH", f"/nonexistent{':'}{myconf}")
    assert check_overrides(["+experiment=mine", "model=mydlm"]) is None


def test_a_name_found_nowhere_says_where_it_looked(myconf):
    message = check_overrides(["+experiment=mien", "hydra.searchpath=[file://myconf]"])
    assert message.startswith("unknown experiment 'mien'; did you mean 'mine'? (")
    assert message.endswith("; looked in gpdlm's packaged configs and myconf")
    message = check_overrides(["model=mydlmm", "-cd", "myconf"])
    assert message.startswith("unknown model 'mydlmm'; did you mean 'mydlm'")
    assert message.endswith(f"; looked in gpdlm's packaged configs and {myconf}")
    # without the folder, the packaged presets only (and no list of places)
    assert (
        check_overrides(["+experiment=mine"]) == "unknown experiment 'mine'; did you mean '_dlm_airline'? (76 options)"
    )


def test_a_missing_config_folder_is_one_line(myconf):
    for form, shown in ((["-cd", "nope"], myconf.parent / "nope"), (["hydra.searchpath=[file://nope]"], "nope")):
        assert check_overrides(["+experiment=mine", *form]) == (
            f"config folder '{shown}' (on the config search path: -cd / hydra.searchpath) does not exist"
        )


def _runs(db: Path) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    return [(e.name, r) for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]


def _assert_the_users_run(db: Path, model: str = "kmeans") -> None:
    runs = _runs(db)
    assert len(runs) == 1
    experiment, run = runs[0]
    assert (experiment, run.info.status) == ("mine", "FINISHED")
    params = run.data.params
    assert (params["trainer.max_iters"], params["dataset.name"], params["model.name"]) == ("5", "concrete", "dlm")
    assert (params["model.num_inducing"], params["model.inducing_init"]) == ("7", model)


@pytest.mark.slow
@pytest.mark.parametrize("form", ["searchpath", "cd"])  # --config-dir: -cd's (the check above)
def test_gpdlm_train_runs_the_users_preset(myconf, form, tmp_path, capsys):
    """A FINISHED MLflow run with the preset's values (and, with -cd, the user's model option's); Hydra's
    flags come before the overrides (its argument parser refuses overrides after a flag)."""
    model = ["model=mydlm"] if form == "cd" else []
    db = tmp_path / "mlflow.db"
    rc, lines = run_cli(
        [
            "train",
            *FORMS[form],
            "+experiment=mine",
            *model,
            "threads=1",
            "progress=false",
            f"tracking.uri=sqlite:///{db}",
        ],
        tmp_path,
        capsys,
    )
    assert rc == 0, lines
    _assert_the_users_run(db, "random" if model else "kmeans")


@pytest.mark.slow
def test_gpdlm_config_path_in_a_fresh_process(myconf, tmp_path):
    """``GPDLM_CONFIG_PATH=myconf gpdlm train +experiment=mine`` as a shell runs it: Hydra discovers gpdlm's
    search-path plugin in a fresh interpreter."""
    import os

    db = tmp_path / "mlflow.db"
    env = {**os.environ, "GPDLM_CONFIG_PATH": "myconf", "OMP_NUM_THREADS": "1"}
    done = gpdlm_subprocess(
        ["train", "+experiment=mine", "threads=1", "progress=false", f"tracking.uri=sqlite:///{db}"], tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    _assert_the_users_run(db)


@pytest.mark.slow
def test_a_misspelled_user_preset_is_one_line_exit_2_and_no_run(myconf, tmp_path, capsys):
    db = tmp_path / "mlflow.db"
    rc, lines = run_cli(
        ["train", "-cd", "myconf", "+experiment=mien", f"tracking.uri=sqlite:///{db}"],
        tmp_path,
        capsys,
    )
    assert rc == 2
    assert lines == [
        "gpdlm: error: unknown experiment 'mien'; did you mean 'mine'? (77 options); "
        f"looked in gpdlm's packaged configs and {myconf}"
    ]
    assert_no_mlflow_run(db)
    assert not (tmp_path / "outputs").exists()


def test_a_multiruns_configs_compose_the_users_preset(myconf, capsys):
    """``gpdlm train -m -cd DIR +experiment=mine --cfg job``: gpdlm composes every job itself (no Hydra
    app runs), from the command's own folder too; the folder ends with the command."""
    from gpdlm_cli import cli
    from gpdlm_cli.sweep import compose

    assert cli.main(["train", "-m", "-cd", "myconf", "+experiment=mine", "--cfg", "job"]) == 0
    out = capsys.readouterr().out
    assert out.count("# job ") == 3 and "# job 1 of 3: model=dlm seed=0 objective.beta=0.1 +experiment=mine" in out
    assert out.count("num_inducing: 7") == 3 and out.count("experiment: mine") == 3
    assert compose.user_searchpath() == ()


def test_the_search_path_of_a_command_line(tmp_path, monkeypatch):
    """``-cd``/``--config-dir`` (absolute, first: Hydra's order), then ``hydra.searchpath``'s entries as
    written; ``gpdlm sweep beta`` hands the -cd flags to each multirun ahead of its overrides."""
    from gpdlm_cli.sweep.compose import searchpath_of, split_config_dir

    monkeypatch.chdir(tmp_path)
    argv = ["+experiment=mine", "hydra.searchpath=[file://a,pkg://my.conf]", "-cd", "b", "x=1", "--config-dir=c"]
    assert searchpath_of(argv) == (f"file://{tmp_path}/b", f"file://{tmp_path}/c", "file://a", "pkg://my.conf")
    assert split_config_dir(argv) == (
        ["-cd", "b", "--config-dir=c"],
        ["+experiment=mine", "hydra.searchpath=[file://a,pkg://my.conf]", "x=1"],
    )
    assert searchpath_of(["hydra.searchpath=[unclosed"]) == ()


def test_inside_a_hydra_job_the_users_folders_are_hydras(myconf):
    """In a job (a batched sweep composes its members there) the folders are those Hydra searched for
    the command line's -cd and hydra.searchpath, not gpdlm's packaged ones or the plugin's."""
    from hydra import compose
    from hydra.conf import ConfigSourceInfo
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from gpdlm_cli.sweep.compose import config_module, user_searchpath

    with config_module(()):
        cfg = compose(config_name="config", return_hydra_config=True)
    sources = [
        ConfigSourceInfo(path="pkg://gpdlm_cli.conf", schema="pkg", provider="main"),
        ConfigSourceInfo(path=f"file://{myconf}", schema="file", provider="command-line"),
        ConfigSourceInfo(path="file://other", schema="file", provider="hydra.searchpath in command-line"),
        ConfigSourceInfo(path="file:///env", schema="file", provider="gpdlm (GPDLM_CONFIG_PATH)"),
    ]
    OmegaConf.update(cfg, "hydra.runtime.config_sources", sources, merge=False)
    saved = HydraConfig.instance().cfg
    HydraConfig.instance().set_config(cfg)
    try:
        assert user_searchpath() == (f"file://{myconf}", "file://other")
        with config_module():  # and a compose there finds the user's preset
            assert compose(config_name="config", overrides=["+experiment=mine"]).model.num_inducing == 7
    finally:
        HydraConfig.instance().cfg = saved


def test_a_hydra_state_left_in_the_process_does_not_hide_the_commands_folders(monkeypatch):
    """Inside a Hydra app the folders Hydra searched come first, then the command's own (``use_searchpath``):
    a HydraConfig left initialised by an earlier in-process run (the test suite's workers) hid the command's
    ``-cd`` folder, and the check refused its preset ('unknown experiment')."""
    from types import SimpleNamespace

    from hydra.core.hydra_config import HydraConfig

    from gpdlm_cli.sweep import compose

    stale = SimpleNamespace(
        runtime=SimpleNamespace(config_sources=[SimpleNamespace(path="file:///a", provider="command-line")])
    )
    monkeypatch.setattr(HydraConfig, "initialized", staticmethod(lambda: True))
    monkeypatch.setattr(HydraConfig, "get", staticmethod(lambda: stale))
    monkeypatch.setattr(compose, "_COMMAND_SEARCHPATH", ("file:///mine", "file:///a"))
    assert compose.user_searchpath() == ("file:///a", "file:///mine")
    stale.runtime.config_sources = []
    assert compose.user_searchpath() == ("file:///mine", "file:///a")


SHADOWING = {
    "searchpath": ["hydra.searchpath=[file://myconf]"],
    "cd": ["-cd", "myconf"],
    "env": [],  # GPDLM_CONFIG_PATH=myconf
}


@pytest.mark.parametrize("form", sorted(SHADOWING))
def test_a_user_config_with_a_packaged_name_is_one_line_naming_both(myconf, form, tmp_path, capsys, monkeypatch):
    """``myconf/experiment/beta_curve_smoke.yaml`` (a packaged preset's name): Hydra would compose the packaged
    file and ignore the user's without a word; gpdlm says so, naming both files, exit 2, before any run."""
    from gpdlm_cli.config_check import shadowing_config

    (myconf / "experiment" / "beta_curve_smoke.yaml").write_text(PRESET)
    if form == "env":
        monkeypatch.setenv("GPDLM_CONFIG_PATH", "myconf")
    packaged = (
        (Path(config_check.__file__).resolve().parent / "conf").resolve() / "experiment" / "beta_curve_smoke.yaml"
    )
    line = (
        f"your config {myconf / 'experiment' / 'beta_curve_smoke.yaml'} has the name of gpdlm's packaged "
        f"experiment/beta_curve_smoke ({packaged}), which Hydra would use instead of yours: rename yours (e.g. "
        "experiment/my_beta_curve_smoke.yaml)"
    )
    assert shadowing_config([*SHADOWING[form], "+experiment=beta_curve_smoke"]) == line
    rc, err = run_cli(["train", *SHADOWING[form], "+experiment=mine"], tmp_path, capsys)  # also when not chosen
    assert (rc, err) == (2, [f"gpdlm: error: {line}"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["myconf"]  # no run folder, no MLflow store
    assert_no_mlflow_run(tmp_path / "mlflow.db")


def test_user_configs_with_their_own_names_are_not_shadowing(myconf, monkeypatch):
    """The fixture's mine.yaml and mydlm.yaml; the packaged folder itself on the search path; no user folder."""
    from gpdlm_cli.config_check import shadowing_config

    packaged = Path(config_check.__file__).resolve().parent / "conf"
    assert shadowing_config(["-cd", "myconf", "+experiment=mine"]) is None
    assert shadowing_config([f"hydra.searchpath=[file://{packaged}]"]) is None
    assert shadowing_config(["+experiment=beta_curve_smoke"]) is None
    # a package on the search path: gpdlm's own configs, one that does not exist (Hydra reports it)
    assert shadowing_config(["hydra.searchpath=[pkg://gpdlm_cli.conf,pkg://nosuch_gpdlm_pkg]"]) is None


@pytest.mark.parametrize(
    "args",
    [
        ["progress=false", "-cd", "myconf", "+experiment=mine"],  # -cd between two overrides
        ["progress=false", "--config-dir=myconf", "+experiment=mine"],
        ["progress=false", "+experiment=mine", "-cd", "myconf"],  # after all of them (Hydra took this before too)
    ],
    ids=["cd-in-the-middle", "config-dir-in-the-middle", "cd-last"],
)
def test_config_dir_may_stand_among_the_overrides(myconf, tmp_path, capsys, monkeypatch, args):
    """Hydra's argument parser answered ``a=1 -cd myconf b=2`` with its usage page ("unrecognized arguments")
    after gpdlm's check had passed; gpdlm hands Hydra the flag first."""
    import sys

    from hydra.core.hydra_config import HydraConfig

    from gpdlm_cli import cli
    from gpdlm_cli.sweep import compose

    argv, hydra_cfg = list(sys.argv), HydraConfig.instance().cfg
    monkeypatch.setattr(compose, "_COMMAND_SEARCHPATH", ())  # the command's -cd: put back after the test
    try:
        rc = cli.main(["train", *args, "--cfg", "job"])  # in tmp_path (the fixture's working directory)
    except SystemExit as e:  # Hydra's argument parser
        rc = e.code
    finally:
        sys.argv = argv
        HydraConfig.instance().cfg = hydra_cfg  # Hydra's state of the run must not hide later tests' folders
    out, err = capsys.readouterr()
    assert (rc, err) == (0, ""), err
    assert "  max_iters: 5\n" in out and "  num_inducing: 7\n" in out  # the user's preset


def test_hydra_flags_go_before_the_overrides():
    from gpdlm_cli.cli import _hydra_flags_first

    assert _hydra_flags_first(["a=1", "-cd", "myconf", "b=2", "-m", "c=3"]) == [
        "-cd",
        "myconf",
        "-m",
        "a=1",
        "b=2",
        "c=3",
    ]
    assert _hydra_flags_first(["a=1", "--config-dir=x", "--multirun"]) == ["--config-dir=x", "--multirun", "a=1"]
    assert _hydra_flags_first(["a=1", "--cfg", "job"]) == ["a=1", "--cfg", "job"]


def test_a_preset_in_a_sub_folder_of_its_group_is_accepted_and_a_misspelled_one_suggested():
    """``+experiment=rkhs_arm/scgd_rff`` names conf/experiment/rkhs_arm/scgd_rff.yaml, which Hydra composes
    (the Gaussian RKHS study's arms): the check lets it through; a misspelled one gets the sub-folder's options."""
    assert check_overrides(["+experiment=rkhs_arm/scgd_rff"]) is None
    assert check_overrides(["+experiment=rkhs_arm/scgd_rfx"]) == (
        "unknown experiment 'rkhs_arm/scgd_rfx'; did you mean 'rkhs_arm/scgd_rff' or 'rkhs_arm/bsgd_rff' "
        "or 'rkhs_arm/bsgd_rbf'? (choose from: rkhs_arm/bsgd_rbf, rkhs_arm/bsgd_rff, rkhs_arm/minimax_paper_rff, "
        "rkhs_arm/minimax_rff, rkhs_arm/scgd_paper_rff, rkhs_arm/scgd_rff, rkhs_arm/svgp_rbf, rkhs_arm/svgp_rff)"
    )
