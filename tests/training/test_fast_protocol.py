"""trainer=fast (issue 21, item 1): L-BFGS on the deterministic full-batch stages a family marks safe,
the paper's first-order protocol everywhere else, and an optimum at least as good as the paper's."""

from __future__ import annotations

import numpy as np
import pytest

from gpdlm_cli import build
from gpdlm_cli.exceptions import GpdlmError
from gpdlm_cli.prepare import prepare
from gpdlm_cli.run.train import run_train
from gpdlm_cli.tracking import NullTracker
from gpdlm_cli.training import stage_settings

from ..conftest import compose, exhaustive

BASE = ["dataset.split.train_size=200", "trainer.eval_every=0", "progress=false", "threads=1", "tracking.enabled=false"]


def _m(overrides):
    return [] if any(o in ("model=exact",) or "scgd" in o for o in overrides) else ["model.num_inducing=15"]


def _stage_optimizers(overrides):
    cfg = compose(BASE + list(overrides) + _m(overrides))
    prepared = prepare(cfg)
    splits, method, settings = prepared.splits, prepared.method, prepared.settings
    return {s.name: stage_settings(settings, s, splits.n_train).optimizer for s in method.stages if s.solve is None}


LBFGS_CASES = [
    (["model=dlm"], {"dlm": "lbfgs"}),
    (["model=dlm_fixed"], {"svgp": "lbfgs", "dlm": "lbfgs"}),
    (["model=svgp"], {"svgp": "lbfgs"}),
    (["model=sgpr"], {"sgpr": "lbfgs"}),
    (["model=exact"], {"exact": "lbfgs"}),
    (["model=dlm", "dataset=doctor_visits", "estimator=quadrature"], {"dlm": "lbfgs"}),
    (["model=dlm", "dataset=doctor_visits", "estimator=bmc"], {"dlm": "adam"}),  # sampling: stochastic
    (["model=dlm", "trainer.batch_size=50"], {"dlm": "adam"}),  # minibatches: stochastic
    (["model=dlm", "features=nn"], {"dlm": "adam"}),  # a network: first-order
    (["model=scgd", "features=nn", "trainer.batch_size=32"], {"scgd": "adam"}),
]


# the fast lane: one closed-form, a two-stage, a sampling and a minibatch case; make test, all
@pytest.mark.parametrize(
    "overrides, expected", exhaustive(LBFGS_CASES, fast=lambda c: LBFGS_CASES.index(c) in {0, 1, 6, 7})
)
def test_fast_uses_lbfgs_exactly_on_deterministic_full_batch_stages(overrides, expected):
    assert _stage_optimizers(overrides + ["trainer=fast"]) == expected
    paper = _stage_optimizers(overrides)
    assert set(paper.values()) == {"adam"}, paper  # trainer=paper (the default) never switches


@pytest.mark.slow
def test_fast_reaches_the_paper_optimum_or_lower_in_fewer_iterations(tmp_path):
    """SGPR on 200 concrete rows: the paper's Adam protocol (1000 iterations) against trainer=fast."""
    runs = {}
    for protocol in ("paper", "fast"):
        cfg = compose(BASE + ["model=sgpr", "model.num_inducing=15", f"trainer={protocol}", "trainer.max_iters=1000"])
        runs[protocol] = run_train(cfg, tmp_path / protocol, tracker=NullTracker())
    assert runs["fast"]["final_loss"] <= runs["paper"]["final_loss"] + 1e-3 / 1  # per datum
    assert runs["fast"]["iterations"] - 200 < runs["paper"]["iterations"] / 4  # 200 Adam steps, then L-BFGS
    assert runs["fast"]["converged"] == 1
    assert runs["fast"]["grad_max_abs"] <= 1e-4  # the gradient test of trainer.fast_grad_tol
    assert "grad_max_abs" not in runs["paper"]  # Adam's window rule has no gradient test


@pytest.mark.parametrize(
    "override",
    [
        "trainer.protocol=quick",
        "trainer.fast_window=1",
        "trainer.fast_tol=-1",
        "trainer.fast_grad_tol=-1",
        "trainer.fast_grad_tol=inf",
        "trainer.fast_adam_iters=-1",
        "trainer.fast_adam_iters=0.5",
    ],
)
def test_bad_protocol_settings_fail_before_training(override):
    with pytest.raises(GpdlmError, match=override.split("=")[0].split(".")[1]):
        build.validate_config(compose(BASE + [override]))


def test_fast_stages_carry_the_gradient_test_and_paper_stages_do_not():
    for protocol, expected in (("fast", 3e-5), ("paper", None)):
        cfg = compose(
            BASE + ["model=svgp", "model.num_inducing=15", f"trainer={protocol}", "trainer.fast_grad_tol=3e-5"]
        )
        prepared = prepare(cfg)
        (stage,) = [s for s in prepared.method.stages if s.solve is None]
        assert stage_settings(prepared.settings, stage, prepared.splits.n_train).grad_tol == expected
    cfg = compose(BASE + ["model=svgp", "trainer=fast", "trainer.fast_grad_tol=null"])
    prepared = prepare(cfg)
    assert all(
        stage_settings(prepared.settings, s, prepared.splits.n_train).grad_tol is None
        for s in prepared.method.stages
        if s.solve is None
    )


def _least_squares(seed=0, n=40, d=12):
    """0.5 mean((A theta - b)^2) with singular values 1 ... 1e-2: L-BFGS needs tens of iterations."""
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.normal(size=(n, d)))
    v, _ = np.linalg.qr(rng.normal(size=(d, d)))
    a = u @ np.diag(np.logspace(0, -2, d)) @ v.T * np.sqrt(n)
    b = rng.normal(size=n)
    return a, b


def _lbfgs_on_least_squares(seed, *, max_iters, grad_tol):
    """gpdlm's L-BFGS loop on ``_least_squares`` with the window rule set to fire at its first check
    (tol 1e9); returns (result, the max-abs gradient at the final parameters computed with numpy)."""
    import torch

    from gpdlm_cli.training import ConvergenceRule, TrainerSettings, train

    a, b = _least_squares(seed)
    at, bt = torch.tensor(a), torch.tensor(b)
    theta = torch.nn.Parameter(torch.zeros(a.shape[1], dtype=torch.float64))
    settings = TrainerSettings(
        max_iters=max_iters,
        optimizer="lbfgs",
        lr=1.0,
        check_every=10,
        eval_every=0,
        progress=False,
        stop=ConvergenceRule(window=10, tol=1e9),
        stop_rule="window",
        grad_tol=grad_tol,
    )
    x = torch.zeros(a.shape[0], 1, dtype=torch.float64)
    res = train(
        lambda x, y: 0.5 * ((at @ theta - bt) ** 2).mean(),
        [theta],
        x,
        x[:, 0],
        settings,
        generator=torch.Generator().manual_seed(0),
    )
    return res, np.abs(a.T @ (a @ theta.detach().numpy() - b) / a.shape[0]).max()


@pytest.mark.parametrize("grad_tol", [None, 1e-3, 1e-7])
def test_lbfgs_stops_only_when_the_gradient_is_small_as_well(grad_tol):
    """Without a gradient test L-BFGS stops after ``window`` iterations; with ``grad_tol`` it stops at
    the first check where the gradient's largest component, recomputed independently, is <= grad_tol."""
    res, g = _lbfgs_on_least_squares(0, max_iters=500, grad_tol=grad_tol)
    if grad_tol is None:
        assert res.iterations == 10 and res.converged and res.grad_max_abs is None
        assert g > 1e-3  # not converged in the gradient's sense
    else:
        assert res.converged and res.iterations < 500 and res.iterations % 10 == 0
        assert g <= grad_tol
        assert res.grad_max_abs == pytest.approx(g, rel=1e-9, abs=1e-15)
        if grad_tol == 1e-7:
            assert res.iterations > 10


def test_lbfgs_stopped_by_its_budget_reports_the_gradient():
    res, g = _lbfgs_on_least_squares(1, max_iters=5, grad_tol=1e-12)
    assert res.iterations == 5 and not res.converged
    assert res.grad_max_abs == pytest.approx(g, rel=1e-9)


def _fit(overrides, warm=None):
    import torch

    from gpdlm_cli.training import run_stages

    prepared = prepare(compose(BASE + ["model=svgp", "model.num_inducing=15", "trainer.max_iters=400"] + overrides))
    fit = run_stages(
        prepared.method.stages,
        prepared.data.x_train,
        prepared.data.y_train,
        prepared.settings,
        generator=torch.Generator().manual_seed(0),
        modules=prepared.method.modules,
        warm=warm,
    )
    return fit


@pytest.mark.slow
def test_a_cold_lbfgs_stage_first_follows_the_paper_protocol_for_fast_adam_iters_steps():
    """The first-order start is the paper protocol's own path: its 50 losses equal the first 50 of a
    trainer=paper run from the same seed, and L-BFGS continues from there (optimizers tag adam50+lbfgs)."""
    paper = _fit(["trainer=paper"])
    fast = _fit(["trainer=fast", "trainer.fast_adam_iters=50"])
    assert fast.optimizers == ["svgp:adam50+lbfgs"] and paper.optimizers == ["svgp:adam"]
    assert fast.losses[:50] == pytest.approx(paper.losses[:50], rel=1e-12)
    assert fast.iterations > 50 and fast.losses[-1] <= paper.losses[-1] + 1e-6
    none = _fit(["trainer=fast", "trainer.fast_adam_iters=0"])
    assert none.optimizers == ["svgp:lbfgs"] and none.losses[0] == pytest.approx(paper.losses[0], rel=1e-12)
    assert none.losses[1] != pytest.approx(paper.losses[1], rel=1e-6)  # L-BFGS from the first step


@pytest.mark.slow
def test_a_warm_started_stage_skips_the_first_order_start():
    from gpdlm_cli.training.reuse import WarmStart, clear_warm_starts

    clear_warm_starts()
    try:
        first = _fit(["trainer=fast", "trainer.fast_adam_iters=50", "objective.beta=1"], warm=WarmStart("path", 1.0))
        second = _fit(["trainer=fast", "trainer.fast_adam_iters=50", "objective.beta=0.5"], warm=WarmStart("path", 0.5))
    finally:
        clear_warm_starts()
    assert first.optimizers == ["svgp:adam50+lbfgs"] and first.warm_started_from is None
    assert second.optimizers == ["svgp:lbfgs"] and second.warm_started_from == 1.0


def test_lbfgs_answers_the_repeated_start_of_each_step_from_its_last_evaluation():
    """The trainer's L-BFGS iterates are bit-identical to the same optimiser (``CompactLBFGS``) driven by
    a plain closure, with fewer objective evaluations (the start of each step repeats the previous line
    search's last point). ``tests/training/test_compact_lbfgs.py`` compares it with torch's LBFGS."""
    import torch

    from gpdlm_cli.training import ConvergenceRule, TrainerSettings, train
    from gpdlm_cli.training.lbfgs import CompactLBFGS

    a, b = _least_squares(seed=2)
    at, bt = torch.tensor(a), torch.tensor(b)
    counts = {"gpdlm": 0, "plain": 0}

    def objective_for(theta, who):
        def objective(x=None, y=None):
            counts[who] += 1
            return 0.5 * ((at @ torch.tanh(theta) - bt) ** 2).mean()  # not a quadratic: real line searches

        return objective

    theta = torch.nn.Parameter(torch.full((a.shape[1],), 0.1, dtype=torch.float64))
    settings = TrainerSettings(
        max_iters=40,
        optimizer="lbfgs",
        lr=1.0,
        check_every=10,
        eval_every=0,
        progress=False,
        stop=ConvergenceRule(window=10, tol=0.0),
        stop_rule="none",
    )
    x = torch.zeros(a.shape[0], 1, dtype=torch.float64)
    res = train(
        objective_for(theta, "gpdlm"), [theta], x, x[:, 0], settings, generator=torch.Generator().manual_seed(0)
    )

    ref = torch.nn.Parameter(torch.full((a.shape[1],), 0.1, dtype=torch.float64))
    opt = CompactLBFGS(
        [ref], lr=1.0, max_iter=1, max_eval=26, history_size=100, line_search_fn="strong_wolfe", tolerance_change=0.0
    )
    f = objective_for(ref, "plain")

    def closure():
        opt.zero_grad()
        v = f()
        v.backward()
        return v

    plain_losses = [float(opt.step(closure).detach()) for _ in range(40)]
    assert res.iterations == 40
    assert torch.equal(theta.detach(), ref.detach())
    assert res.losses == plain_losses
    assert counts["gpdlm"] <= counts["plain"] - 30, counts  # about one evaluation saved per iteration


@pytest.mark.slow
def test_a_run_whose_lbfgs_budget_ends_a_stage_says_so(tmp_path, capsys):
    """trainer=fast: an L-BFGS stage stopped by fast_max_iters (its tests not met) is named on the console,
    in gpdlm.log and in the tag gpdlm.lbfgs_budget_hit; one that converges is not."""
    short, tags = tmp_path / "short", NullTracker()
    over = ["model=svgp", "model.num_inducing=15", "trainer=fast", "trainer.fast_adam_iters=10"]
    m = run_train(compose(BASE + over + ["trainer.fast_max_iters=3"]), short, tracker=tags)
    assert m["converged"] == 0 and m["iterations"] == 13
    assert tags.tags["gpdlm.lbfgs_budget_hit"] == "svgp"
    err = capsys.readouterr().err
    assert "L-BFGS stage svgp stopped at its budget" in err and f"{m['grad_max_abs']:.2g} per datum" in err
    assert "[WARNING] - trainer=fast: L-BFGS stage svgp stopped" in (short / "gpdlm.log").read_text()
    done, tags = tmp_path / "done", NullTracker()
    m = run_train(compose(BASE + over), done, tracker=tags)
    assert m["converged"] == 1 and "gpdlm.lbfgs_budget_hit" not in tags.tags
    assert "stopped at its budget" not in capsys.readouterr().err


def test_lbfgs_history_reaches_the_fast_protocols_lbfgs_stages():
    """trainer.lbfgs_history was dropped under trainer=fast (the options kept only Adam's keys), so every
    fast L-BFGS stage kept 100 pairs whatever the key said."""
    cfg = compose(BASE + ["model=svgp", "model.num_inducing=15", "trainer=fast", "trainer.lbfgs_history=7"])
    prepared = prepare(cfg)
    (stage,) = [s for s in prepared.method.stages if s.solve is None]
    s = stage_settings(prepared.settings, stage, prepared.splits.n_train)
    assert s.optimizer == "lbfgs" and s.optimizer_options == {"lbfgs_history": 7}
    fit = _fit(["trainer=fast", "trainer.fast_adam_iters=0", "trainer.lbfgs_history=1", "trainer.fast_max_iters=30"])
    default = _fit(["trainer=fast", "trainer.fast_adam_iters=0", "trainer.fast_max_iters=30"])
    assert fit.losses[:2] == pytest.approx(default.losses[:2], rel=1e-12)  # the same first step
    assert fit.losses[5] != pytest.approx(default.losses[5], rel=1e-9)  # then one curvature pair against 100
