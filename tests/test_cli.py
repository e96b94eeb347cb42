"""The `gpdlm` command: dispatcher, one-line errors for bad input, no MLflow run left behind."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpdlm_cli import cli

from .conftest import assert_no_mlflow_run, run_cli


def test_help_lists_subcommands_and_imports_nothing_heavy():
    code = (
        "import sys, io, contextlib\n"
        "from gpdlm_cli import cli\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf): rc = cli.main(['--help'])\n"
        "heavy = [m for m in ('torch', 'gpytorch', 'mlflow', 'hydra', 'pandas') if m in sys.modules]\n"
        "print(rc, heavy, 'train' in buf.getvalue())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "0 [] True"


def test_unknown_subcommand_is_a_one_line_error(capsys):
    assert cli.main(["trian"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["gpdlm: error: unknown subcommand 'trian'; choose from: " + ", ".join(cli.SUBCOMMANDS)]


BAD = [
    (["objective.beta=-1"], "the 'beta' parameter of objective must be a finite float in (0, inf); got -1"),
    (["objective.beta=nan"], "the 'beta' parameter of objective"),
    (["model.num_inducing=0"], "the 'num_inducing' parameter of model=dlm must be an integer >= 1; got 0"),
    (["model.num_inducing=5000"], "an integer in [1, n_train=690]; got 5000"),
    (["trainer.lr=0"], "the 'lr' parameter of trainer"),
    (["trainer.batch_size=0"], "the 'batch_size' parameter of trainer"),
    (
        ["dataset=doctor_visits", "estimator=exact"],
        "estimator=exact has no closed form of log E_q[p(y|f)] for likelihood=poisson_exp",
    ),
    (
        ["likelihood=probit"],
        "likelihood=probit is for classification targets but dataset=concrete is a regression dataset",
    ),
    (
        ["model=sgpr", "likelihood=probit", "dataset=breast_cancer"],
        "model=sgpr is defined for likelihood=gaussian only",
    ),
    (["model=exact", "model.max_train=100"], "model=exact refuses n_train=690"),
]


def assert_bad_input_left_nothing(rc, stderr_lines, message, cwd):
    """Exit code 2, the message on the last stderr line (no traceback), no run folder and no MLflow run."""
    assert rc == 2, stderr_lines
    assert stderr_lines[-1].startswith("gpdlm: error: ") and message in stderr_lines[-1], stderr_lines
    assert not any("Traceback" in ln for ln in stderr_lines), stderr_lines
    outputs = cwd / "outputs"  # a rejected command leaves no run folder behind
    assert not outputs.exists() or list(outputs.rglob("*")) == [], list(outputs.rglob("*"))
    assert_no_mlflow_run(cwd / "mlflow.db")  # nothing was started, so nothing can be left RUNNING


@pytest.mark.parametrize("overrides,message", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_input_fails_before_any_run(tmp_path, capsys, overrides, message):
    """`gpdlm train <bad>` in this process (cli.main, from tmp_path); the exit status a shell sees from
    a subprocess is checked once, in test_bad_input.test_a_non_finite_csv_cell_from_the_command_line."""
    rc, lines = run_cli(
        ["train", *overrides, f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", "progress=false"], tmp_path, capsys
    )
    assert_bad_input_left_nothing(rc, lines, message, tmp_path)


def _options(group: str) -> list[str]:
    from pathlib import Path

    return sorted(f.stem for f in (Path(cli.__file__).resolve().parent / "conf" / group).glob("*.yaml"))


def test_unknown_config_option_is_one_line_with_the_closest_names(tmp_path, capsys):
    rc, lines = run_cli(["train", "model=svgpp"], tmp_path, capsys)
    assert rc == 2
    assert len(lines) == 1 and lines[0].startswith("gpdlm: error: unknown model 'svgpp'; did you mean 'svgp'")
    assert lines[0].endswith(f"(choose from: {', '.join(_options('model'))})")
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["dataset=concret"],
            "unknown dataset 'concret'; did you mean 'concrete'? ({n_datasets} options; `gpdlm datasets list` shows them)",
        ),
        (["-m", "model=dlm,nosuch"], "unknown model 'nosuch' (choose from: {models})"),
        (["objective.betta=1"], "unknown config key 'objective.betta'; did you mean 'objective.beta'"),
        (["-m", "trainer.lrr=interval(0.001,0.1)"], "unknown config key 'trainer.lrr'; did you mean 'trainer.lr'"),
        (["hydra/launcher=jobib"], "unknown hydra/launcher 'jobib'; did you mean 'joblib'?"),
    ],
)
def test_unknown_options_and_keys_are_named_before_hydra_runs(args, message):
    from gpdlm_cli.config_check import check_overrides

    message = message.format(n_datasets=len(_options("dataset")), models=", ".join(_options("model")))
    assert check_overrides(args).startswith(message)


def test_a_batched_or_warm_sweep_with_a_parallel_launcher_is_refused_before_the_sweep(tmp_path, capsys):
    """sweep.batched / sweep.warm_start need the in-process launcher: `gpdlm train -m ... hydra/launcher=joblib` is one
    line and exit 2 before Hydra starts the sweep (before: every job failed with it, under a FAILED parent run);
    a preset's sweep.batched counts, the basic launcher and the keys off pass."""
    from gpdlm_cli.config_check import check_overrides

    batched = "sweep.batched=true trains the jobs of one shape together in one process"
    warm = "sweep.warm_start=true passes each beta's end state"
    assert check_overrides(["-m", "seed=0,1", "sweep.batched=true", "hydra/launcher=joblib"]).startswith(batched)
    assert check_overrides(["-m", "seed=0,1", "sweep.warm_start=true", "hydra/launcher=joblib"]).startswith(warm)
    for ok in (
        ["-m", "seed=0,1", "sweep.batched=true"],
        ["-m", "seed=0,1", "sweep.batched=true", "hydra/launcher=basic"],
        ["-m", "seed=0,1", "sweep.batched=false", "hydra/launcher=joblib"],
        ["seed=0", "sweep.batched=true", "hydra/launcher=joblib"],  # a single run launches nothing
    ):
        assert check_overrides(ok) is None, ok
    rc, err = run_cli(["train", "-m", "seed=0,1", "sweep.batched=true", "hydra/launcher=joblib"], tmp_path, capsys)
    assert rc == 2 and len(err) == 1 and err[0].startswith(f"gpdlm: error: {batched}")
    assert not (tmp_path / "outputs").exists()
    assert_no_mlflow_run(tmp_path / "mlflow.db")


def test_valid_overrides_pass_the_check():
    from gpdlm_cli.config_check import check_overrides

    assert (
        check_overrides(
            [
                "-m",
                "model=dlm,svgp",
                "objective.beta=tag(log, interval(0.01, 10))",
                "seed=range(3)",
                "+experiment=beta_curve_smoke",
                "hydra/launcher=joblib",
                "hydra.launcher.n_jobs=2",
                "+new.key=1",
                "dataset.split.train_size=100",
            ]
        )
        is None
    )
    assert check_overrides(["--help"]) is None


def test_shell_completion_goes_through_the_dispatcher(monkeypatch, capsys):
    """`gpdlm -sc install=bash` prints Hydra's script for `gpdlm`; the shell's `gpdlm -sc query=bash`
    completes subcommands, then each subcommand's config options."""
    from gpdlm_cli import cli as dispatcher

    assert dispatcher.main(["-sc", "install=bash"]) == 0
    script = capsys.readouterr().out
    assert "complete" in script and script.rstrip().endswith("gpdlm")
    monkeypatch.setenv("COMP_LINE", "gpdlm tr")
    dispatcher.main(["-sc", "query=bash"])
    assert capsys.readouterr().out.split() == ["train"]
    monkeypatch.setenv("COMP_LINE", "gpdlm train model=s")
    dispatcher.main(["-sc", "query=bash"])
    options = capsys.readouterr().out.split()
    assert {"model=svgp", "model=sgpr", "model=scgd"} <= set(options) and "model=dlm" not in options


@pytest.mark.parametrize(
    "override,jobs",
    [
        ("model=glob(sv*)", ["model=svbssgp", "model=svgp"]),
        ("seed=range(0,3)", ["seed=0", "seed=1", "seed=2"]),
        ("seed=choice(4,5)", ["seed=4", "seed=5"]),
        ("seed=sort(2,1)", ["seed=1", "seed=2"]),
    ],
)
def test_hydra_sweep_grammar_is_checked_and_expanded(override, jobs):
    """Hydra's sweep functions pass the check and expand to their jobs (glob needs the config loader:
    it once ended in 'ConfigLoader is not set')."""
    from gpdlm_cli.config_check import check_overrides
    from gpdlm_cli.sweep.plan import job_overrides

    assert check_overrides(["-m", override]) is None
    assert [j[0] for j in job_overrides([override])[0]] == jobs


@pytest.mark.parametrize(
    "override,message",
    [
        ("model=glob(nosuch*)", "'model=glob(nosuch*)' matches no model option (choose from: "),
        (
            "objective.beta=interval(0,1)",
            "'objective.beta=interval(0,1)' is a sampled range, which the default sweeper",
        ),
    ],
)
def test_a_sweep_the_sweeper_cannot_run_is_one_line(tmp_path, capsys, override, message):
    rc, lines = run_cli(["train", "-m", override], tmp_path, capsys)
    assert rc == 2 and len(lines) == 1 and lines[0].startswith(f"gpdlm: error: {message}")
    rc, lines = run_cli(["train", "-m", override, "--dry-run"], tmp_path, capsys)
    assert rc == 2 and len(lines) == 1 and lines[0].startswith(f"gpdlm: error: {message}")
    assert not (tmp_path / "multirun").exists() and not (tmp_path / "outputs").exists()


@pytest.mark.slow  # ~8 s: a config composed, a dry-run's timed iterations, Hydra's help
def test_a_training_command_says_it_started_before_the_slow_imports(tmp_path, capsys, monkeypatch):
    """The first line comes at once (a run used to print nothing for its first ~25 s on a loaded
    machine: imports); help, configs and plans print only themselves."""
    import importlib

    from gpdlm_cli.sweep import plan as plan_mod

    monkeypatch.setattr(plan_mod, "ITERATION_BUDGET_S", 0.0)  # the plan's timing, not its probe runs (~13 s)
    printed = {}
    real = importlib.import_module

    def spy(name, *a, **k):
        printed[name] = capsys.readouterr().out  # what was printed before the command's module loads
        return real(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", spy)
    run_cli(["resume", str(tmp_path)], tmp_path, capsys)
    assert (
        printed["gpdlm_cli.commands.evaluate"]
        == "gpdlm resume: starting a run (loading torch, the config and the data)...\n"
    )
    monkeypatch.setattr(importlib, "import_module", real)
    rc, err = run_cli(["train", "-m", "objective.betta=1"], tmp_path, capsys)
    assert rc == 2 and err[0].startswith("gpdlm: error: unknown config key")
    for argv in (
        ["train", "--cfg", "job"],
        ["train", "-m", "seed=0,1", "--dry-run"],
        ["train", "--help"],
        ["runs", "--help"],
    ):
        try:
            cli.main(argv)
        except SystemExit:
            pass
        assert "starting" not in capsys.readouterr().out, argv
