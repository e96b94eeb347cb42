"""Saved models (issue 22): every run writes model.pt; `gpdlm predict` on a run's own test rows
reproduces its test metrics; `gpdlm eval` reproduces the training-time metrics exactly and back-fills
missing ones into the same runs; bad input is one line and changes nothing."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from gpdlm_cli import build
from gpdlm_cli.commands import evaluate
from gpdlm_cli.run.lifecycle import make_tracker
from gpdlm_cli.run.saved_model import MODEL_FILE, load_run
from gpdlm_cli.run.train import run_train

from ..conftest import compose, exhaustive
from .conftest import copy_store, one_line_error

BASE = ["dataset.split.train_size=150", "trainer.max_iters=25", "trainer.eval_every=0", "progress=false", "threads=1"]
CASES = {
    "dlm": ["model=dlm", "model.num_inducing=12"],
    "sgpr": ["model=sgpr", "model.num_inducing=12"],
    "exact": ["model=exact"],
    "probit": ["model=dlm", "dataset=breast_cancer", "model.num_inducing=12"],
    "count": ["model=dlm", "dataset=doctor_visits", "model.num_inducing=12"],
    "scgd": ["model=scgd", "features=nn", "trainer.batch_size=32"],
    "ssgp": ["model=ssgp", "model.num_frequencies=10"],  # the sparse-spectrum family (global predictive)
    "pic": [
        "model=pic",
        "model.num_inducing=12",
        "model.partitions=5",
    ],  # PIC++: the test point's block plus the global part
}


class TrainedOnDemand(dict):
    """{name: (run folder, metrics, config)}: each case is trained the first time a test asks for it,
    so the fast lane, which asks for a few, trains only those (``make test`` trains all)."""

    def __init__(self, train):
        super().__init__()
        self._train = train

    def __missing__(self, name):
        self[name] = self._train(name)
        return self[name]


@pytest.fixture(scope="module")
def trained(template_db, tmp_path_factory):
    d = tmp_path_factory.mktemp("saved")
    uri = copy_store(template_db, d)

    def train(name):
        cfg = compose(BASE + CASES[name] + [f"tracking.uri={uri}", "tracking.experiment=saved"])
        return d / name, run_train(cfg, d / name, tracker=make_tracker(cfg.tracking)), cfg

    return uri, TrainedOnDemand(train)


def _test_rows_csv(cfg, path):
    """The run's own test rows, in the table's original units, as a CSV with the feature names."""
    _, splits, _ = build.load_data(cfg)
    X = splits.X_test * splits.x_std + splits.x_mean
    pd.DataFrame(X, columns=splits.feature_names).to_csv(path, index=False)
    return splits.y_test * splits.y_std + splits.y_mean


# the fast lane: a regression and a count model (the eval test trains both); make test, every family
@pytest.mark.parametrize("name", exhaustive(sorted(CASES), fast=lambda n: n in {"dlm", "count"}))
def test_predict_on_the_test_rows_reproduces_the_test_metrics(name, trained, tmp_path, capsys):
    uri, runs = trained
    folder, metrics, cfg = runs[name]
    assert (folder / MODEL_FILE).stat().st_size > 0
    y = _test_rows_csv(cfg, tmp_path / "in.csv")
    assert (
        evaluate.predict_main([str(folder), "--input", str(tmp_path / "in.csv"), "--output", str(tmp_path / "out.csv")])
        == 0
    )
    p = pd.read_csv(tmp_path / "out.csv")
    assert len(p) == len(y)
    if "mean" in p and "variance" in p:  # regression: the Gaussian predictive in original units
        nll = -scipy.stats.norm(p["mean"], np.sqrt(p["variance"])).logpdf(y).mean()
        assert nll == pytest.approx(metrics["test_nll"], abs=1e-9)
        assert math.sqrt(((p["mean"] - y) ** 2).mean()) == pytest.approx(metrics["test_rmse"], abs=1e-9)
        assert ((p["lower"] <= y) & (y <= p["upper"])).mean() == pytest.approx(metrics["test_coverage_90"], abs=1e-12)
    elif "p1" in p:  # classification
        nll = -np.mean(np.where(y == 1, np.log(p["p1"]), np.log1p(-p["p1"])))
        assert nll == pytest.approx(metrics["test_nll"], abs=1e-9)
        assert (p["label"] != y).mean() == pytest.approx(metrics["test_error"], abs=1e-12)
    else:  # counts: E[y] gives the RMSE; the 90% interval its coverage
        assert math.sqrt(((p["mean"] - y) ** 2).mean()) == pytest.approx(metrics["test_rmse"], abs=1e-9)
        assert ((p["lower"] <= y) & (y <= p["upper"])).mean() == pytest.approx(metrics["test_coverage_90"], abs=1e-12)


@pytest.mark.slow  # evaluates every split of a saved model again (~4.5 s)
def test_eval_reproduces_every_metric_and_backfills_missing_ones(trained, capsys):
    from mlflow.tracking import MlflowClient

    uri, runs = trained
    names = ("dlm", "sgpr", "count")
    before = {}
    for n in names:  # as if these runs predated the CRPS / coverage metrics
        folder = runs[n][0]
        m = json.loads((folder / "metrics.json").read_text())
        before[n] = m
        dropped = {k: v for k, v in m.items() if "crps" not in k and "coverage" not in k}
        (folder / "metrics.json").write_text(json.dumps(dropped))
    capsys.readouterr()
    assert evaluate.eval_main([str(runs[n][0]) for n in names]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all("CHANGED" not in ln and "added" in ln for ln in lines), lines
    for n in names:
        after = json.loads((runs[n][0] / "metrics.json").read_text())
        for k, v in before[n].items():
            if k.startswith(("val_", "test_")):
                assert after[k] == v, (n, k)  # bit for bit, the back-filled ones included
    # through the store: the experiment's runs get the metrics logged again, unchanged
    assert evaluate.eval_main(["--experiment", "saved", "--tracking-uri", uri, "--metric", "test_nll"]) == 0
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("saved")
    for run in client.search_runs([exp.experiment_id]):
        hist = client.get_metric_history(run.info.run_id, "test_nll")
        assert len({h.value for h in hist}) == 1 and len(hist) >= 2


def test_predict_and_eval_take_the_short_id_gpdlm_runs_prints(trained, tmp_path, capsys):
    from mlflow.tracking import MlflowClient

    uri, runs = trained
    folder, metrics, cfg = runs["sgpr"]
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("saved")
    rid = next(
        r.info.run_id
        for r in client.search_runs([exp.experiment_id])
        if r.data.tags["gpdlm.output_dir"] == str(folder.resolve())
    )
    _test_rows_csv(cfg, tmp_path / "in.csv")
    capsys.readouterr()
    assert (
        evaluate.predict_main(
            [rid[:8], "--input", str(tmp_path / "in.csv"), "--output", str(tmp_path / "o.csv"), "--tracking-uri", uri]
        )
        == 0
    )
    assert capsys.readouterr().err.startswith(f"gpdlm: run {rid[:8]} (")
    assert evaluate.eval_main([rid[:8], "--tracking-uri", uri, "--metric", "test_nll"]) == 0
    assert capsys.readouterr().out.startswith(f"gpdlm eval: {rid}: 1 reproduced")


@pytest.mark.parametrize("name", exhaustive(["dlm", "probit", "count"], fast=lambda n: n == "dlm"))
def test_the_mlflow_model_predicts_what_gpdlm_predict_writes(name, trained, tmp_path, capsys):
    """Every run logs an MLflow Model (pyfunc): `mlflow.pyfunc.load_model("runs:/<id>/model")` takes a
    DataFrame of the training columns and returns gpdlm predict's columns, value for value; its
    signature names those columns and the parameter `level`; an input example is stored."""
    import mlflow
    from mlflow.tracking import MlflowClient
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    uri, runs = trained
    folder, metrics, cfg = runs[name]
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("saved")
    run = next(
        r for r in client.search_runs([exp.experiment_id]) if r.data.tags["gpdlm.output_dir"] == str(folder.resolve())
    )
    assert run.data.tags["gpdlm.mlflow_model"] == "model"
    _test_rows_csv(cfg, tmp_path / "in.csv")
    for level in (0.9, 0.5):
        assert (
            evaluate.predict_main(
                [
                    str(folder),
                    "--input",
                    str(tmp_path / "in.csv"),
                    "--output",
                    str(tmp_path / f"out{level}.csv"),
                    "--level",
                    str(level),
                ]
            )
            == 0
        )
    with _use_tracking_uri(uri):
        model = mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/model")
    df = pd.read_csv(tmp_path / "in.csv")
    got = model.predict(df)
    pd.testing.assert_frame_equal(got, pd.read_csv(tmp_path / "out0.9.csv"), check_exact=True)
    pd.testing.assert_frame_equal(
        model.predict(df, params={"level": 0.5}), pd.read_csv(tmp_path / "out0.5.csv"), check_exact=True
    )
    sig = model.metadata.signature
    assert sig.inputs.input_names() == list(df.columns)
    assert sig.outputs.input_names() == list(got.columns)
    assert [(p.name, p.default) for p in sig.params.params] == [("level", 0.9)]
    example = model.metadata.load_input_example(str(folder / "model"))
    assert list(example.columns) == list(df.columns) and len(example) == 2
    assert (folder / MODEL_FILE).is_file()  # model.pt stays


@pytest.mark.slow  # trains a model of every family: ~4 s
def test_reloaded_models_of_every_family_evaluate_identically(tmp_path):
    """One model per family not covered above (their own evaluate: sq_dlm, the gamma family, recurrent)."""
    from gpdlm_cli.run.train import evaluator
    from gpdlm_cli.tracking import NullTracker

    for ov in (
        ["model=sq_dlm", "model.num_inducing=12", "dataset.split.train_size=150"],
        [
            "model=svbssgp",
            "dataset=aimpeak",
            "dataset.n_segments=40",
            "model.partitions=10",
            "trainer.max_epochs=2",
            "trainer.max_iters=null",
        ],
        ["model=gp_lstm", "dataset=sysid_actuator", "model.training.final_theta_steps=2", "trainer.max_iters=15"],
    ):
        cfg = compose(
            [o for o in BASE if "train_size" not in o and "max_iters" not in o]
            + ["trainer.max_iters=25", "tracking.enabled=false"]
            + ov
        )
        folder = tmp_path / ov[0].split("=")[1]
        metrics = run_train(cfg, folder, tracker=NullTracker())
        r = load_run(folder)
        again = evaluator(r.method, r.data, r.splits.y_std)()
        same = {k: (metrics[k], v) for k, v in again.items() if k.startswith(("val_", "test_"))}
        assert same and all(a == b for a, b in same.values()), ov[0]


@pytest.mark.parametrize(
    "args, match",
    [
        (["nosuch-run", "--input", "x.csv", "--output", "y.csv"], "no run 'nosuch-run'"),
        (["{folder}", "--input", "{bad_cols}", "--output", "y.csv"], "missing"),
        (["{folder}", "--input", "{text}", "--output", "y.csv"], "not a finite number"),
        (["{empty}", "--input", "{good}", "--output", "y.csv"], "saved no model"),
        (["{corrupt}", "--input", "{good}", "--output", "y.csv"], "truncated or corrupted"),
    ],
)
def test_predict_bad_input_is_one_line(args, match, trained, tmp_path, capsys, monkeypatch):
    uri, runs = trained
    folder, _, cfg = runs["dlm"]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    _test_rows_csv(cfg, tmp_path / "good.csv")
    df = pd.read_csv(tmp_path / "good.csv")
    df.drop(columns=df.columns[0]).to_csv(tmp_path / "bad_cols.csv", index=False)
    df.assign(**{df.columns[1]: ["abc"] + list(df.iloc[1:, 1])}).to_csv(tmp_path / "text.csv", index=False)
    (tmp_path / "empty").mkdir()
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / MODEL_FILE).write_bytes((folder / MODEL_FILE).read_bytes()[:200])
    subs = {
        "folder": str(folder),
        "bad_cols": str(tmp_path / "bad_cols.csv"),
        "text": str(tmp_path / "text.csv"),
        "empty": str(tmp_path / "empty"),
        "good": str(tmp_path / "good.csv"),
        "corrupt": str(corrupt),
    }
    argv = [a.format(**subs) for a in args] + ["--tracking-uri", uri]
    capsys.readouterr()
    from gpdlm_cli.commands._cli import run_cli

    assert run_cli(evaluate.predict_main, argv) == 2
    assert match in one_line_error(capsys)
    assert not (tmp_path / "y.csv").exists()


# ----- sequence models: predict from a CSV of the series ----------------------------------------
SEQ = [
    "model=gp_lstm",
    "dataset=sysid_actuator",
    "dataset.n=200",
    "model.network.units=4",
    "trainer.max_iters=15",
    "model.training.final_theta_steps=2",
    "trainer.eval_every=0",
    "progress=false",
    "threads=1",
    "tracking.enabled=false",
]


@pytest.fixture(scope="module")
def sequence_runs(tmp_path_factory):
    from gpdlm_cli.tracking import NullTracker

    d = tmp_path_factory.mktemp("seq")

    def train(mode):
        cfg = compose(SEQ + [f"dataset.mode={mode}"])
        return d / mode, run_train(cfg, d / mode, tracker=NullTracker()), cfg

    return TrainedOnDemand(train)


def _test_series(cfg):
    """The run's own test series, made here from the generator: the test part of sysid_actuator is
    the last test_fraction of the n steps, preceded by the lag steps its first window reads."""
    from gpdlm_cli.data.sequences import actuator_like

    n, lag = int(cfg.dataset.n), int(cfg.dataset.lag)
    df = actuator_like(n, int(cfg.dataset.seed))
    cut = int(round(n * (1 - float(cfg.dataset.test_fraction))))
    return df.iloc[cut - lag :].reset_index(drop=True), lag


# the fast lane: autoregression (the mode the bad-series cases use); make test, all three
@pytest.mark.parametrize(
    "mode", exhaustive(["regression", "autoregression", "free_simulation"], fast=lambda m: m == "autoregression")
)
def test_predict_on_the_test_series_reproduces_the_sequence_test_metrics(mode, sequence_runs, tmp_path):
    folder, metrics, cfg = sequence_runs[mode]
    series, lag = _test_series(cfg)
    y = series["pressure"].to_numpy()[lag:]
    csv = series.copy()
    if mode == "regression":  # the inputs alone
        csv = csv[["valve"]]
    if mode == "free_simulation":  # only the first L outputs are read: the rest may be unknown
        csv.loc[lag:, "pressure"] = np.nan
    csv.to_csv(tmp_path / "series.csv", index=False)
    assert (
        evaluate.predict_main(
            [str(folder), "--input", str(tmp_path / "series.csv"), "--output", str(tmp_path / "out.csv")]
        )
        == 0
    )
    p = pd.read_csv(tmp_path / "out.csv")
    assert list(p["t"]) == list(range(lag, len(series)))
    nll = -scipy.stats.norm(p["mean"], np.sqrt(p["variance"])).logpdf(y).mean()
    rmse = math.sqrt(((p["mean"] - y) ** 2).mean())
    key = "test_sim_" if mode == "free_simulation" else "test_"
    assert rmse == pytest.approx(metrics[key + "rmse"], abs=1e-9)
    assert nll == pytest.approx(metrics[key + "nll"], abs=1e-9)
    z = scipy.stats.norm.ppf(0.95)
    assert np.allclose(p["upper"] - p["mean"], z * np.sqrt(p["variance"]), rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "drop, match", [("valve", "missing valve"), ("pressure", "missing pressure"), (None, "unexpected extra")]
)
def test_predict_sequence_bad_series_is_one_line(drop, match, sequence_runs, tmp_path, capsys):
    from gpdlm_cli.commands._cli import run_cli

    folder, _, cfg = sequence_runs["autoregression"]
    series, _ = _test_series(cfg)
    bad = series.drop(columns=[drop]) if drop else series.assign(extra=1.0)
    bad.to_csv(tmp_path / "bad.csv", index=False)
    capsys.readouterr()
    assert (
        run_cli(
            evaluate.predict_main,
            [str(folder), "--input", str(tmp_path / "bad.csv"), "--output", str(tmp_path / "y.csv")],
        )
        == 2
    )
    assert match in one_line_error(capsys)
    assert not (tmp_path / "y.csv").exists()


# ----- issue 45, items 2 and 3: checksums, foreign models, metrics never overwritten silently ----------
def _copy(folder, dest):
    import shutil

    shutil.copytree(folder, dest)
    return dest


def _flip(path, n=8):
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid : mid + n] = bytes(b ^ 0xFF for b in data[mid : mid + n])
    path.write_bytes(bytes(data))


def test_a_flipped_model_is_refused_by_predict_and_eval(trained, tmp_path, capsys):
    """8 flipped bytes of model.pt (which torch still loads: variances 400x off before) fail its SHA-256."""
    from gpdlm_cli.commands._cli import run_cli

    uri, runs = trained
    folder = _copy(runs["dlm"][0], tmp_path / "run")
    before = (folder / "metrics.json").read_text()
    _test_rows_csv(runs["dlm"][2], tmp_path / "in.csv")
    _flip(folder / MODEL_FILE)
    capsys.readouterr()
    assert (
        run_cli(
            evaluate.predict_main,
            [str(folder), "--input", str(tmp_path / "in.csv"), "--output", str(tmp_path / "out.csv")],
        )
        == 2
    )
    assert "does not match its recorded SHA-256" in one_line_error(capsys)
    assert run_cli(evaluate.eval_main, [str(folder)]) == 2
    assert "does not match its recorded SHA-256" in one_line_error(capsys)
    assert (folder / "metrics.json").read_text() == before and not (tmp_path / "out.csv").exists()


def test_eval_refuses_another_runs_model(trained, tmp_path, capsys):
    from gpdlm_cli.commands._cli import run_cli
    from gpdlm_cli.files import sidecar

    uri, runs = trained
    folder = _copy(runs["dlm"][0], tmp_path / "run")
    other = runs["sgpr"][0]
    for f in (other / MODEL_FILE, sidecar(other / MODEL_FILE)):  # the file and its checksum, both consistent
        (folder / f.name).write_bytes(f.read_bytes())
    before = (folder / "metrics.json").read_text()
    capsys.readouterr()
    assert run_cli(evaluate.eval_main, [str(folder)]) == 2
    assert "is not this run's model: its config hash" in one_line_error(capsys)
    assert (folder / "metrics.json").read_text() == before


def test_eval_never_overwrites_a_differing_metric_without_overwrite(trained, tmp_path, capsys):
    uri, runs = trained
    folder = _copy(runs["dlm"][0], tmp_path / "run")
    saved = json.loads((folder / "metrics.json").read_text())
    saved["test_nll"] = 1.25  # what the run recorded; the model now gives something else
    (folder / "metrics.json").write_text(json.dumps(saved))
    capsys.readouterr()
    assert evaluate.eval_main([str(folder)]) == 1
    out = capsys.readouterr().out
    assert "DIFFERS test_nll 1.25 -> " in out and "nothing written" in out
    assert json.loads((folder / "metrics.json").read_text())["test_nll"] == 1.25
    assert evaluate.eval_main([str(folder), "--overwrite"]) == 0
    assert json.loads((folder / "metrics.json").read_text())["test_nll"] == runs["dlm"][1]["test_nll"]


@pytest.mark.parametrize(
    "text, code, expected",
    [
        ("{not json", 2, "is not readable JSON"),
        ("[1, 2]", 2, "holds a JSON list, not the run's metrics"),
        ('{"test_nll": "' + "x" * 500 + '"}', 1, "DIFFERS test_nll 'xxxx"),
    ],
)
def test_eval_with_a_broken_metrics_json_is_one_line(text, code, expected, trained, tmp_path, capsys):
    from gpdlm_cli.commands._cli import run_cli

    uri, runs = trained
    folder = _copy(runs["dlm"][0], tmp_path / "run")
    (folder / "metrics.json").write_text(text)
    capsys.readouterr()
    assert run_cli(evaluate.eval_main, [str(folder)]) == code
    out, err = capsys.readouterr()
    line = (err if code == 2 else out).strip()
    assert len(line.splitlines()) == 1 and expected in line and len(line) < 400, line
    assert (folder / "metrics.json").read_text() == text
