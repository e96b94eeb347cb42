"""GP-LSTM evaluation cost (issue 41, item 1): one pass for the free simulation and the rollouts from
every start (means only in the loop, the simulation's variances in one batch), equal to the separate
``simulate`` and ``rollouts``; training evaluations one-step only unless asked; ``means`` equal to the
marginals' means."""

from __future__ import annotations

import torch

from gpdlm_cli.data.sequences import make_windows, window_names
from gpdlm_cli.features.recurrent import WindowLayout
from gpdlm_cli.metrics.simulation import EvaluationSchedule, SequenceEvaluation, free_simulation, rollouts, simulate

from ..conftest import ar1_series


def nonlinear(rows):
    """A one-step model whose variance depends on the row (so batching the variances is checked)."""
    mu = 0.5 * torch.tanh(rows[:, 2]) + rows[:, 0] - 0.1 * rows[:, 3]
    return mu[:, None], (0.01 + rows[:, 1:2] ** 2)


def _windows(n=60, lag=3):
    u, y = ar1_series(n)
    X, Y, _ = make_windows(u, y, lag, "free_simulation")
    layout = WindowLayout.from_names(window_names(["u"], "y", lag, "free_simulation"), ["y"])
    return torch.as_tensor(X), torch.as_tensor(Y), layout.feedback


def test_one_pass_equals_simulate_and_rollouts():
    x, _, feedback = _windows()
    for steps in (0, 1, 7, x.shape[0], x.shape[0] + 5):
        mu, var, ahead = free_simulation(lambda r: nonlinear(r)[0], nonlinear, x, feedback, steps)
        ref_mu, ref_var = simulate(nonlinear, x, feedback)
        torch.testing.assert_close(mu, ref_mu, rtol=0, atol=1e-12)
        torch.testing.assert_close(var, ref_var, rtol=0, atol=1e-12)
        if steps == 0:
            assert ahead is None
        else:
            ref = rollouts(nonlinear, x, feedback, min(steps, x.shape[0]))
            torch.testing.assert_close(ahead, ref, rtol=0, atol=1e-12, equal_nan=True)


class _Model:
    def __init__(self):
        self.calls = 0

    def condition(self, x, y):
        pass

    def marginals_all(self, rows):
        self.calls += 1
        return nonlinear(rows)

    def means(self, rows):
        self.calls += 1
        return nonlinear(rows)[0]


def _evaluation(**kw):
    from gpdlm_cli.likelihoods import GaussianLikelihood

    x, y, feedback = _windows()
    model = _Model()
    ev = SequenceEvaluation(
        model,
        x,
        y,
        [GaussianLikelihood(noise_init=0.01)],
        mode="free_simulation",
        feedback=feedback,
        horizons=[1, 5],
        **kw,
    )
    return ev, model, x, y


def test_training_evaluations_are_one_step_and_the_final_one_complete():
    ev, model, x, y = _evaluation()
    hook = EvaluationSchedule(ev)
    full = ev.evaluate(x, y, "val_", 1.0)
    assert {"val_sim_rmse", "val_sim_nll", "val_sim_rmse_h5"} <= set(full)
    hook.bind_optimizer(None)  # a training stage starts
    model.calls = 0
    during = {**ev.evaluate(x, y, "val_", 1.0), **ev.evaluate(x, y, "test_", 1.0)}
    assert model.calls == 2 and not any("sim_" in k for k in during)  # one batch per split
    assert during["val_rmse"] == full["val_rmse"]
    hook.stage_end(None)
    assert ev.evaluate(x, y, "val_", 1.0) == full


def test_a_simulated_selection_metric_keeps_the_validation_simulation_in_training():
    ev, _, x, y = _evaluation(simulate_in_training="val")
    EvaluationSchedule(ev).bind_optimizer(None)
    assert "val_sim_rmse_h5" in ev.evaluate(x, y, "val_", 1.0)
    assert "test_sim_rmse" not in ev.evaluate(x, y, "test_", 1.0)
    ev, _, x, y = _evaluation(simulate_in_training="all")  # model.simulate_in_training=true
    EvaluationSchedule(ev).bind_optimizer(None)
    assert "test_sim_rmse" in ev.evaluate(x, y, "test_", 1.0)


def test_dense_means_are_the_marginals_means():
    import gpytorch

    from gpdlm_cli.features.recurrent import FeatureMap
    from gpdlm_cli.likelihoods import GaussianLikelihood
    from gpdlm_cli.models.deep_kernel import DeepKernelGP

    x, y, _ = _windows()
    layout = WindowLayout.from_names(window_names(["u"], "y", 3, "free_simulation"), ["y"])
    torch.manual_seed(0)
    net = FeatureMap("lstm", layout, x.shape[1], units=4, layers=1, out_dim=2, rec_dropout=0.05).double()
    for inference in ("exact", "kiss"):
        model = DeepKernelGP(
            net,
            [gpytorch.kernels.RBFKernel(ard_num_dims=2)],
            [GaussianLikelihood(noise_init=0.1)],
            inference=inference,
            grid_size=16,
        )
        model.condition(x, y)
        torch.testing.assert_close(model.means(x), model.marginals_all(x)[0], rtol=0, atol=1e-10)
