"""The dry-run estimate's arithmetic (issue 42: estimates within 2x of measured slices): what drives a job's
cost keys its shape (a GP-LSTM job's mode and lag), a shape left untimed is scaled from the nearest timed
shape of its model -- not given the slowest timed shape -- and the total adds every job's stages and fixed
cost. Fake timing tables only: nothing here times a real step."""

from __future__ import annotations

import types

import pytest

from gpdlm_cli.sweep import plan as plan_mod
from gpdlm_cli.sweep.plan import JOB_OVERHEAD_S, Shape, _extrapolate, _probe_order, _total


def _gplstm(model: str, mode: str, lag: int, units: int = 256, dataset: str = "actuator") -> Shape:
    return Shape(model, dataset, None, 64, None, "auto", mode, lag, units, "rbf", None, None, True)


#: a fake probe table: (stage, shareable, cap, ms per step, L-BFGS, seconds)
TIMED = {
    _gplstm("gp_lstm", "regression", 32): [
        ("delayed", False, 500, 100.0, False, 50.0),
        ("theta", False, 100, 8.0, False, 0.8),
    ],
    _gplstm("lstm", "regression", 32): [("mse", False, 500, 400.0, False, 200.0)],  # the slowest timed shape
    _gplstm("narx", "regression", 32): [("mse", False, 500, 2.0, False, 1.0)],
}


def test_an_untimed_shape_is_scaled_from_its_models_timed_shape_not_the_slowest_shape():
    rows = _extrapolate(_gplstm("gp_lstm", "autoregression", 10), TIMED)
    # lag 32 -> 10: every step 10/32 as long, the same 500 + 100 iterations (epochs x batches of the same data)
    assert rows == [
        ("delayed", False, 500, pytest.approx(31.25), False, pytest.approx(15.625)),
        ("theta", False, 100, pytest.approx(2.5), False, pytest.approx(0.25)),
    ]
    # the old rule gave a shape without timing the slowest timed shape of its model, or of all (lstm: 200 s a job)
    narrower = _extrapolate(_gplstm("gp_lstm", "regression", 32, units=64), TIMED)
    assert [r[3] for r in narrower] == [pytest.approx(25.0), pytest.approx(2.0)]  # units 256 -> 64


def test_the_nearest_timed_shape_is_the_one_on_the_same_data_with_the_most_equal_fields():
    timed = {
        **TIMED,
        _gplstm("gp_lstm", "autoregression", 10): [("delayed", False, 500, 40.0, False, 20.0)],
        _gplstm("gp_lstm", "autoregression", 10, units=128, dataset="drives"): [
            ("delayed", False, 200, 30.0, False, 6.0)
        ],
    }
    # free simulation at lag 10 on actuator: the autoregression shape (mode differs only), unscaled
    assert _extrapolate(_gplstm("gp_lstm", "free_simulation", 10), timed) == [
        ("delayed", False, 500, 40.0, False, 20.0)
    ]
    # drives at lag 16: the drives shape first (its cap of 200 is that data set's), its step x 16/10
    ((_, _, cap, ms, _, seconds),) = _extrapolate(
        _gplstm("gp_lstm", "regression", 16, units=128, dataset="drives"), timed
    )
    assert (cap, ms, seconds) == (200, pytest.approx(48.0), pytest.approx(9.6))


def test_epoch_caps_scale_with_batches_per_epoch_and_steps_with_rows():
    ref = Shape("svgp", "pol", 1000, 100, 100, "auto", None, None, None, "rbf", None, None, True)
    timed = {ref: [("svgp", False, 1000, 10.0, False, 10.0)]}  # 100 epochs x 10 batches
    bigger = ref._replace(train_size=4000, batch_size=200)  # 20 batches an epoch of twice the rows
    assert _extrapolate(bigger, timed) == [("svgp", False, 2000, pytest.approx(20.0), False, pytest.approx(40.0))]
    # fewer rows a step: as many more steps, each as long (a minibatch step's fixed cost dominates it)
    smaller = ref._replace(batch_size=25)
    assert _extrapolate(smaller, timed) == [("svgp", False, 4000, pytest.approx(10.0), False, pytest.approx(40.0))]
    fixed = ref._replace(epochs=False, train_size=4000, num_inducing=200)  # max_iters: the same cap; M x 2
    assert _extrapolate(fixed, {fixed._replace(num_inducing=100): [("svgp", False, 300, 10.0, False, 3.0)]}) == [
        ("svgp", False, 300, pytest.approx(20.0), False, pytest.approx(6.0))
    ]


def test_a_model_without_any_timed_shape_takes_the_median_timed_job_not_the_slowest():
    assert _extrapolate(_gplstm("gru", "regression", 32), TIMED) == TIMED[_gplstm("gp_lstm", "regression", 32)]


def test_another_data_set_of_whole_data_size_is_scaled_by_its_training_rows():
    """drives (250 training rows) from actuator (512): the cap of epochs x batches and the step (lag, width)."""
    sizes = {"actuator": 512, "drives": 250}
    seen = []

    def n_train(shape):
        seen.append(shape.dataset)
        return sizes[shape.dataset]

    drives = _gplstm("gp_lstm", "regression", 16, units=128, dataset="drives")
    ((_, _, cap, ms, _, seconds), (_, _, theta_cap, _, _, _)) = _extrapolate(drives, TIMED, n_train)
    assert sorted(seen) == ["actuator", "drives"]
    assert (cap, theta_cap) == (round(500 * 250 / 512), round(100 * 250 / 512))
    assert ms == pytest.approx(100.0 * 16 / 32 * 128 / 256)
    assert seconds == pytest.approx(50.0 * (16 / 32 * 128 / 256) * (250 / 512))
    # on the same data set nothing is loaded
    seen.clear()
    _extrapolate(_gplstm("gp_lstm", "autoregression", 10), TIMED, n_train)
    assert seen == []


def test_every_models_first_shape_is_probed_before_any_models_second():
    counts = {
        _gplstm("gp_lstm", "regression", 32): 5,
        _gplstm("gp_lstm", "autoregression", 10): 6,
        _gplstm("gp_lstm", "regression", 16, 128, "drives"): 5,
        _gplstm("narx", "regression", 32): 5,
    }
    order = _probe_order(counts)
    # gp_lstm's most frequent shape and narx's first (these two are timed whatever the budget), then the others
    assert order[:2] == [_gplstm("gp_lstm", "autoregression", 10), _gplstm("narx", "regression", 32)]


def test_the_total_adds_each_jobs_stages_a_shared_stage_once_and_the_fixed_cost_over_parallel_jobs():
    a = Shape("dlm_fixed", "pol", 500, None, 100, "auto")
    rows = {a: [("svgp", True, 100, 10.0, False, 1.0), ("dlm", False, 100, 20.0, False, 2.0)]}
    jobs = [(a, "0"), (a, "0"), (a, "1")]  # two betas of seed 0 share the SVGP stage; seed 1 has its own
    p = types.SimpleNamespace(share_stages=True, parallel=1)
    assert _total(jobs, rows, p) == pytest.approx(2 * 1.0 + 3 * 2.0 + 3 * JOB_OVERHEAD_S)
    p = types.SimpleNamespace(share_stages=False, parallel=2)
    assert _total(jobs, rows, p) == pytest.approx((3 * 1.0 + 3 * 2.0 + 3 * JOB_OVERHEAD_S) / 2)


def test_a_gplstm_jobs_mode_and_lag_make_its_shape(monkeypatch):
    """dataset.mode is swept by gplstm_sysid and sets the lag (32 in regression on actuator, 10 otherwise): jobs
    of the two modes were composed once and timed as one shape (the regression one) until 2026-11-28."""
    jobs = [
        ["+experiment=gplstm_sysid", "dataset=actuator", f"dataset.mode={mode}", "model=gp_lstm", f"seed={s}"]
        for mode in ("regression", "autoregression")
        for s in (0, 1)
    ]
    shapes = [plan_mod._shape(cfg) for _, cfg, _ in plan_mod._job_configs(jobs)]
    assert [(sh.mode, sh.lag, sh.units) for sh in shapes] == [("regression", 32, 256)] * 2 + [
        ("autoregression", 10, 256)
    ] * 2


def test_the_dry_run_lines_name_a_shapes_mode_lag_and_width(monkeypatch, capsys):
    from gpdlm_cli import cli
    from gpdlm_cli.sweep.plan import SweepPlan

    shape = _gplstm("gp_lstm", "regression", 32)
    fake = SweepPlan([["model=gp_lstm"]], "paper", True, False, "basic", 1, per_shape={shape: TIMED[shape]})
    fake.estimate_s = 51.8
    monkeypatch.setattr(plan_mod, "plan", lambda *a, **k: fake)
    assert cli.main(["train", "-m", "model=dlm,svgp", "threads=1", "--dry-run"]) == 0  # the plan: the fake
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == (
        "  gp_lstm on actuator (train_size None, batch 64, M None, mode regression, lag 32, units 256): "
        "delayed: 500 it x 100.0 ms, theta: 100 it x 8.0 ms; iterations: cap (upper bound)"
    )
