"""The `gpdlm` command: dispatcher, one-line errors for bad input, no MLflow run left behind."""

from __future__ import annotations

import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from gpdlm_cli import cli


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


def _gpdlm(args, cwd):
    return subprocess.run([sys.executable, "-m", "gpdlm_cli.cli", *args], cwd=cwd, capture_output=True, text=True)


BAD = [
    (["objective.beta=-1"], "the 'beta' parameter of objective must be a finite float in (0, inf); got -1"),
    (["objective.beta=nan"], "the 'beta' parameter of objective"),
    (["model.num_inducing=0"], "the 'num_inducing' parameter of model=dlm must be an integer >= 1; got 0"),
    (["model.num_inducing=5000"], "an integer in [1, n_train=690]; got 5000"),
    (["trainer.lr=0"], "the 'lr' parameter of trainer"),
    (["trainer.batch_size=0"], "the 'batch_size' parameter of trainer"),
    (["dataset=doctor_visits", "estimator=exact"], "estimator=exact has no closed form of log E_q[p(y|f)] for likelihood=poisson_exp"),
    (["likelihood=probit"], "likelihood=probit is for classification targets but dataset=concrete is a regression dataset"),
    (["model=sgpr", "likelihood=probit", "dataset=breast_cancer"], "model=sgpr is defined for likelihood=gaussian only"),
    (["model=exact", "model.max_train=100"], "model=exact refuses n_train=690"),
]


@pytest.mark.parametrize("overrides,message", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_input_fails_before_any_run(tmp_path, overrides, message):
    db = tmp_path / "mlflow.db"
    proc = _gpdlm(["train", *overrides, f"tracking.uri=sqlite:///{db}", "progress=false"], tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert lines[-1].startswith("gpdlm: error: ") and message in lines[-1], proc.stderr
    assert "Traceback" not in proc.stderr
    if db.exists():  # nothing was started, so nothing can be left RUNNING
        client = MlflowClient(f"sqlite:///{db}")
        assert all(not client.search_runs([e.experiment_id]) for e in client.search_experiments())


def test_unknown_config_option_lists_choices(tmp_path):
    proc = _gpdlm(["train", "model=nonsense"], tmp_path)
    assert proc.returncode != 0
    assert "Could not find 'model/nonsense'" in proc.stderr and "dlm" in proc.stderr
