"""Every gplstm preset composes to the paper's settings, and every smoke variant runs through
`gpdlm train`'s real path into an MLflow store with the metrics the issue asks for (the runs are those of
tests/run/test_sweeps.py::test_smoke_presets_run, which calls ``check_smoke_runs``)."""

from __future__ import annotations

import itertools

import pytest

from ..conftest import compose, sweep_grid

PRESETS = (
    "gplstm_sysid",
    "gplstm_driving",
    "gplstm_convergence",
    "gplstm_delay",
    "gplstm_scaling",
    "gplstm_gef_power",
    "gplstm_gef_wind",
)
ONE_STEP = {"test_rmse", "test_nll", "val_rmse", "train_seconds", "epoch_seconds", "test_ms_per_point"}
GP = {"train_nlml", "noise", "outputscale"}
EXPECTED = {  # metrics beyond ONE_STEP, by preset and model
    "gplstm_sysid": {
        "lstm": {"test_sim_rmse", "test_sim_rmse_h10", "test_sim_nll"},
        "gp_lstm": GP
        | {
            "test_sim_rmse",
            "test_sim_rmse_h1",
            "test_sim_nll",
            "embedding_drift",
            "embedding_drift_mean",
            "refreshes",
            "lr_halvings",
        },
    },
    "gplstm_driving": {"lstm": set(), "gp_lstm": GP | {"embedding_drift_mean", "refreshes"}},
    "gplstm_convergence": {"gp_lstm": GP},
    "gplstm_delay": {"gp_lstm": GP | {"refreshes", "embedding_drift_mean", "lr_halvings"}},
    "gplstm_scaling": {"gp_lstm": GP | {"refreshes"}},
    "gplstm_gef_power": {"lstm": set(), "gp_lstm": GP | {"embedding_drift_mean", "refreshes"}},
    "gplstm_gef_wind": {"lstm": set(), "gp_lstm": GP | {"embedding_drift_mean", "refreshes"}},
}


def sweep_jobs(preset: str):
    params = sweep_grid([f"+experiment={preset}"])
    return [[f"{k}={v}" for k, v in zip(params, combo)] for combo in itertools.product(*params.values())]


@pytest.mark.slow
def test_presets_set_the_papers_protocol():
    s = compose(["+experiment=gplstm_sysid", "dataset=sysid_drives", "dataset.mode=regression", "model=narx"])
    assert (s.dataset.lag, s.model.network.units, s.model.network.dropout) == (16, 128, 0.5)  # Table 4, Drives
    s = compose(["+experiment=gplstm_sysid", "dataset.mode=free_simulation", "model=gp_lstm"])
    assert (s.dataset.lag, s.model.network.units, s.model.network.rec_dropout, s.model.training.algorithm) == (
        10,
        256,
        0.05,
        "delayed",
    )
    d = compose(["+experiment=gplstm_driving", "dataset.task=lanes", "model=gp_lstm"])
    assert (d.dataset.output, d.dataset.lag, d.model.network.layers, d.model.gp.inference, d.model.init) == (
        "all",
        128,
        2,
        "kiss",
        "pretrained",
    )
    assert compose(["+experiment=gplstm_driving", "dataset.task=speed"]).dataset.output is None
    assert len(sweep_jobs("gplstm_sysid")) == 2 * 3 * 8 * 5 and len(sweep_jobs("gplstm_convergence")) == 2 * 5 * 5
    assert len(sweep_jobs("gplstm_scaling")) == 4 * 3
    assert compose(["+experiment=gplstm_convergence"]).trainer.keep_best is None  # curves: the last epoch
    # Figure 4 (right): Algorithm 2 alone, batch (tau) x lr x 5 seeds, the paper's fixed lr_W, no lr halving
    dl = compose(["+experiment=gplstm_delay"])
    assert (
        dl.model.training.algorithm,
        dl.model.training.lr_over_tau,
        dl.model.training.refresh_check,
        dl.model.network.units,
    ) == (
        "delayed",
        False,
        False,
        16,
    )
    jobs = sweep_jobs("gplstm_delay")
    assert len(jobs) == 4 * 3 * 5 and all("model.training.algorithm=delayed" in j for j in jobs)


@pytest.mark.slow
def test_table_2_and_3_presets_run_on_the_real_sets_and_the_stand_ins_stay_by_name():
    """Issue 39: gplstm_sysid sweeps the real actuator/drives (Table 4's lags and units by name, the
    generated sysid_* still composing to the same), Fig. 4 runs on the real Actuator, and the GEF
    columns of Table 3 have presets with Table 4's GEF architectures writing one experiment."""
    assert sweep_grid(["+experiment=gplstm_sysid"])["dataset"] == ["actuator", "drives"]
    assert compose(["+experiment=gplstm_sysid"]).dataset.name == "actuator"
    for real, standin in (("actuator", "sysid_actuator"), ("drives", "sysid_drives")):
        for mode, lag in (("regression", {"actuator": 32, "drives": 16}[real]), ("free_simulation", 10)):
            a = compose(["+experiment=gplstm_sysid", f"dataset={real}", f"dataset.mode={mode}", "model=gp_lstm"])
            b = compose(["+experiment=gplstm_sysid", f"dataset={standin}", f"dataset.mode={mode}", "model=gp_lstm"])
            assert a.dataset.lag == b.dataset.lag == lag and a.model.network.units == b.model.network.units
    assert compose(["+experiment=gplstm_convergence"]).dataset.name == "actuator"
    assert sweep_grid(["+experiment=gplstm_sysid_smoke"])["dataset"] == ["actuator", "drives"]
    p = compose(["+experiment=gplstm_gef_power", "model=lstm"])
    w = compose(["+experiment=gplstm_gef_wind", "model=lstm"])
    assert (p.dataset.name, p.dataset.lag, p.model.network.layers, p.model.network.units) == ("gef_power", 48, 2, 256)
    assert (w.dataset.name, w.dataset.lag, w.model.network.layers, w.model.network.units) == ("gef_wind", 48, 1, 64)
    assert compose(["+experiment=gplstm_gef_wind", "model=narx"]).model.network.units == 16
    assert compose(["+experiment=gplstm_gef_power", "model=rnn"]).model.network.units == 16
    assert p.tracking.experiment == w.tracking.experiment == "gplstm_gef"
    assert (p.model.gp.inference, p.model.init, p.dataset.mode) == ("kiss", "pretrained", "autoregression")
    assert len(sweep_jobs("gplstm_gef_power")) == len(sweep_jobs("gplstm_gef_wind")) == 6 * 5


def check_smoke_runs(preset: str, smoke) -> None:
    """The runs of `gpdlm train -m +experiment=<preset>_smoke` (tests/run/test_sweeps.py::test_smoke_presets_run,
    which runs each smoke preset once, ``smoke`` a conftest.SmokeRuns) carry the metrics EXPECTED of
    their preset and model."""
    assert smoke.preset == f"{preset}_smoke"
    assert len(smoke.children) == len(sweep_jobs(smoke.preset))
    for r in smoke.children:
        model = r.data.params["model.name"]
        missing = (ONE_STEP | EXPECTED[preset][model]) - set(r.data.metrics)
        assert not missing, (model, sorted(missing))
        assert r.data.metrics["test_rmse"] > 0 and r.data.metrics["epoch_seconds"] > 0
        if "test_sim_rmse_h10" in EXPECTED[preset][model]:
            assert r.data.metrics["test_sim_rmse"] > 0
