"""Batched configurations (issue 21, item 4: ``sweep.batched=true``): the seeds and betas of one shape
trained as one batched model give every member the metrics, iteration count and learning curve of its
separate run; the batched objectives are the dense formulas; what is out of scope trains separately."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from mlflow.tracking import MlflowClient
from scipy.stats import multivariate_normal

from gpdlm_cli.prepare import prepare
from gpdlm_cli.sweep.batched import clear_batched, out_of_scope, shape_key
from gpdlm_cli.sweep.batched_model import BatchedSVGP, Member, NotBatchable, _objective

from ..conftest import compose, run_cli

# 150 concrete rows, M = 10, at most 100 Adam steps per stage; a loose window rule (20 iterations, tol 1e-2)
# so that some members stop early: svgp seed 0 beta 2 stops at 90, dlm seed 1 beta 2 at 80, the others run
# 100; dlm_fixed's members stop at 120, 100, 160, 150 (its SVGP stage, then the batched DLM stage)
SMALL = [
    "dataset.split.train_size=150",
    "model.num_inducing=10",
    "trainer.max_iters=100",
    "trainer.stop_window=20",
    "trainer.stop_tol=1e-2",
    "trainer.eval_every=30",
    "threads=1",
    "progress=false",
]
GRID = ["seed=0,1", "objective.beta=0.5,2"]
COMPARED = (
    "test_nll",
    "test_rmse",
    "val_nll",
    "val_rmse",
    "iterations",
    "first_loss",
    "final_loss",
    "converged",
    "n_train",
)


def _children(uri, experiment):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    runs = [r for r in client.search_runs([exp.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    return client, {(r.data.params["seed"], float(r.data.params["objective.beta"])): r for r in runs}


def _sweep(tmp_path, capsys, uri, experiment, extra):
    clear_batched()
    rc, lines = run_cli(
        [
            "train",
            "-m",
            *GRID,
            *SMALL,
            f"tracking.uri={uri}",
            f"tracking.experiment={experiment}",
            f"hydra.sweep.dir={tmp_path / experiment}",
            *extra,
        ],
        tmp_path,
        capsys,
    )
    assert rc == 0, lines
    return lines


@pytest.mark.slow
@pytest.mark.parametrize(
    "model,stops",
    [
        ("svgp", {("0", 0.5): 100, ("0", 2.0): 90, ("1", 0.5): 100, ("1", 2.0): 100}),
        ("dlm", {("0", 0.5): 100, ("0", 2.0): 100, ("1", 0.5): 100, ("1", 2.0): 80}),
        ("dlm_fixed", {("0", 0.5): 120, ("0", 2.0): 100, ("1", 0.5): 160, ("1", 2.0): 150}),
    ],
)
def test_a_batched_sweep_gives_each_member_the_metrics_of_its_separate_run(
    tmp_path, capsys, mlflow_uri, model, stops, monkeypatch
):
    """2 seeds x 2 betas: one batched model (one child run each, tag gpdlm.batched=4) against four
    separate runs, metric by metric (rtol 1e-6; float64 batched kernels round differently in the last
    bits, which Adam carries along: measured differences 4e-16 relative for svgp, 2e-11 for dlm)."""
    # dlm_fixed: each job trains its own SVGP stage (a stage restored from sweep.share_stages' cache reports
    # converged=1 whatever the stage did -- a limitation of the cache, not of batching)
    extra = [f"model={model}"] + (["sweep.share_stages=false"] if model == "dlm_fixed" else [])
    lines = _sweep(tmp_path, capsys, mlflow_uri, f"sep-{model}", extra)
    assert not any("sweep.batched" in ln for ln in lines)
    from gpdlm_cli.sweep import batched_model

    monkeypatch.setattr(batched_model, "PROGRESS_EVERY_S", 0.0)  # a progress line every iteration
    lines = _sweep(tmp_path, capsys, mlflow_uri, f"bat-{model}", extra + ["sweep.batched=true"])
    assert any(ln.startswith("gpdlm: sweep.batched: group of 4: iteration 50 of ") for ln in lines)
    assert f"gpdlm: sweep.batched: trained 4 jobs of model={model.split('_')[0]} as one batched model" in lines
    [announced] = [ln for ln in lines if ln.startswith("gpdlm: sweep of 4 jobs")]  # the start-of-multirun line
    assert announced.endswith("launcher basic, batched: 1 group of 4 members"), announced
    client, separate = _children(mlflow_uri, f"sep-{model}")
    _, batched = _children(mlflow_uri, f"bat-{model}")
    assert sorted(separate) == sorted(batched) and len(batched) == 4
    iterations = {}
    for key, run in batched.items():
        ref = separate[key]
        assert run.data.tags["gpdlm.batched"] == "4" and "gpdlm.batched" not in ref.data.tags
        assert run.info.status == "FINISHED"
        for name in COMPARED + (("final_loss_svgp", "final_loss_dlm") if model == "dlm_fixed" else ()):
            assert run.data.metrics[name] == pytest.approx(ref.data.metrics[name], rel=1e-6, abs=1e-9), (key, name)
        for tag in ("gpdlm.stop_rule", "gpdlm.protocol", "gpdlm.optimizers", "gpdlm.config_hash"):
            assert run.data.tags[tag] == ref.data.tags[tag], tag
        # the learning curves: every training loss and every intermediate evaluation
        for series in ("train_loss", "val_nll"):
            a = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, series)]
            b = [(m.step, m.value) for m in client.get_metric_history(ref.info.run_id, series)]
            assert [s for s, _ in sorted(a)] == [s for s, _ in sorted(b)], series
            np.testing.assert_allclose([v for _, v in sorted(a)], [v for _, v in sorted(b)], rtol=1e-6)
        iterations[key] = int(run.data.metrics["iterations"])
    assert iterations == stops  # members stopped early are frozen while the others go on


def _members(model, configs):
    out = []
    for seed, beta in configs:
        p = prepare(
            compose([f"model={model}", f"seed={seed}", f"objective.beta={beta}", *SMALL, "tracking.enabled=false"])
        )
        p.method.model._ensure_initialised()
        stage = p.method.stages[0]
        out.append(
            Member(
                "collapsed_elbo" if model == "svgp" else "log_loss",
                p.method.model,
                p.method.likelihood,
                p.data.x_train,
                p.data.y_train,
                beta,
                stage.groups,
                list(stage.hooks),
            )
        )
    return out


def _dense(member):
    """(Z, lengthscale, outputscale, noise, m~, L_S, X, y) of a member as numpy arrays."""
    mdl, lik = member.model, member.likelihood
    with torch.no_grad():
        return (
            mdl.inducing_points.cpu().numpy().copy(),
            float(mdl.covar_module.base_kernel.lengthscale),
            float(mdl.covar_module.outputscale),
            float(lik.noise),
            mdl.q_u.variational_mean.cpu().numpy().copy(),
            np.tril(mdl.q_u.chol_variational_covar.cpu().numpy()),
            member.x.cpu().numpy(),
            member.y.cpu().numpy(),
        )


def _rbf(a, b, ls, os):
    d2 = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
    return os * np.exp(-0.5 * d2 / ls**2)


def _dense_losses(member, jitter):
    """The per-datum loss of one member from the textbook formulas (numpy/scipy, nothing of gpdlm's)."""
    Z, ls, os, s2, m, L_S, X, y = _dense(member)
    n, M, beta = len(y), len(Z), member.beta
    Kuu = _rbf(Z, Z, ls, os) + jitter * np.eye(M)
    L = np.linalg.cholesky(Kuu)
    A = np.linalg.solve(L, _rbf(Z, X, ls, os))  # M x n
    k = np.clip(os - (A**2).sum(0), 0, None)
    if member.kind == "collapsed_elbo":
        # max_q E_q[log p(y|f)] - beta KL(q||p) = beta log E_p(u)[exp(g(u)/beta)] (Gibbs), g Gaussian in u:
        #   = -n/2 log(2 pi s2) + beta n/2 log(2 pi beta s2) - sum k / (2 s2) + beta log N(y | 0, A^T A + beta s2 I)
        value = (
            -0.5 * n * math.log(2 * math.pi * s2)
            + 0.5 * beta * n * math.log(2 * math.pi * beta * s2)
            - k.sum() / (2 * s2)
            + beta * multivariate_normal(np.zeros(n), A.T @ A + beta * s2 * np.eye(n)).logpdf(y)
        )
        return -value / n
    S = L_S @ L_S.T
    mu = A.T @ m
    var = os + jitter - (A**2).sum(0) + (A * (S @ A)).sum(0)
    nll = -np.mean([multivariate_normal(mu[i], var[i] + s2).logpdf(y[i]) for i in range(n)])
    kl = 0.5 * (np.trace(S) + m @ m - M - np.linalg.slogdet(S)[1])
    return nll + beta * kl / n


@pytest.mark.parametrize("model", ["svgp", "dlm"])
def test_the_batched_losses_are_the_dense_formulas(model):
    """Every member's batched loss (B = 3: two seeds, two betas) equals the textbook formula for that
    member alone, at the initial parameters and at a perturbed point (so q(u) is not the prior)."""
    members = _members(model, [(0, 0.5), (1, 2.0), (0, 3.0)])
    batch = BatchedSVGP(members)
    with torch.no_grad():
        got = batch.losses().cpu().numpy()
    want = [_dense_losses(m, batch.jitter) for m in members]
    np.testing.assert_allclose(got, want, rtol=1e-9)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in batch.values.values():
            if isinstance(p, torch.nn.Parameter):
                p.add_(0.1 * torch.randn(p.shape, generator=gen, dtype=p.dtype).to(p.device))
        for b in range(3):
            batch.write_member(b)
        got = batch.losses().cpu().numpy()
    want = [_dense_losses(m, batch.jitter) for m in members]
    np.testing.assert_allclose(got, want, rtol=1e-9)
    assert len(set(np.round(got, 6))) == 3  # three different members, not one copied


@pytest.mark.slow
def test_out_of_scope_configs_say_why_and_the_shape_ignores_only_seed_and_beta():
    from gpdlm_cli.sweep.batched import SWEEP_CONTEXT
    from gpdlm_cli.sweep.callback import SWEEP_FILE

    assert SWEEP_CONTEXT == SWEEP_FILE  # the jobs read the file the sweep callback writes
    base = compose(["model=svgp", *SMALL])
    assert out_of_scope(base) is None and out_of_scope(compose(["model=dlm", *SMALL])) is None
    assert out_of_scope(compose(["model=dlm_fixed", *SMALL])) is None
    for overrides, phrase in [
        (["model=sgpr"], "model=sgpr has no batched form"),
        (["model=sq_dlm"], "model=sq_dlm has no batched form"),
        (["model=svgp", "trainer=fast"], "shared line search"),
        (["model=svgp", "trainer.batch_size=32"], "minibatches"),
        (["model=dlm", "estimator=bmc"], "samples"),
        (["model=svgp", "trainer.optimizer=sgd"], "Adam only"),
    ]:
        assert phrase in out_of_scope(compose([*overrides, *SMALL])), overrides
    assert shape_key(base) == shape_key(
        compose(["model=svgp", *SMALL, "seed=3", "objective.beta=7", "tracking.experiment=x", "sweep.batched=true"])
    )
    for change in ("model.num_inducing=11", "dataset.split.train_size=151", "trainer.lr=0.05", "model=dlm"):
        assert shape_key(compose(["model=svgp", *SMALL, change])) != shape_key(base), change


def test_members_of_different_shapes_are_not_batched():
    a = _members("svgp", [(0, 1.0)])
    with pytest.raises(NotBatchable, match="different objectives"):
        BatchedSVGP(a + _members("dlm", [(0, 1.0)]))


@pytest.mark.slow
def test_out_of_scope_jobs_train_separately_with_a_note_and_a_tag(tmp_path, capsys, mlflow_uri):
    lines = _sweep(tmp_path, capsys, mlflow_uri, "oos", ["model=svgp", "trainer=fast", "sweep.batched=true"])
    notes = [ln for ln in lines if ln.startswith("gpdlm: sweep.batched:")]
    assert len(notes) == 1 and "shared line search" in notes[0] and notes[0].endswith("trained separately")
    _, runs = _children(mlflow_uri, "oos")
    assert len(runs) == 4 and {r.data.tags["gpdlm.batched"] for r in runs.values()} == {"separate"}
    assert {r.data.tags["gpdlm.batched_note"] for r in runs.values()} == {notes[0].removeprefix("gpdlm: ")}
    logs = [(tmp_path / "oos" / str(j) / "gpdlm.log").read_text() for j in range(4)]
    assert all("sweep.batched: trainer.protocol=fast" in log for log in logs)


def test_batched_is_refused_with_another_launcher_and_with_warm_starts(tmp_path):
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict

    from gpdlm_cli.hydra_apps import run_job
    from gpdlm_cli.sweep.callback import read_outcomes

    for extra, launcher, phrase in [
        ([], "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher", "use the default launcher"),
        (["sweep.warm_start=true"], "hydra._internal.core_plugins.basic_launcher.BasicLauncher", "exclude each other"),
    ]:
        cfg = compose(["sweep.batched=true", "tracking.enabled=false", *extra], hydra=True)
        with open_dict(cfg):
            OmegaConf.update(cfg, "hydra.mode", "MULTIRUN")
            OmegaConf.update(cfg, "hydra.launcher", {"_target_": launcher}, merge=False)
            OmegaConf.update(cfg, "hydra.sweep.dir", str(tmp_path / phrase[:3]))
            OmegaConf.update(cfg, "hydra.runtime.output_dir", str(tmp_path / phrase[:3] / "0"))
            OmegaConf.update(cfg, "hydra.job.num", 0)
        (tmp_path / phrase[:3] / "0").mkdir(parents=True)
        saved = HydraConfig.instance().cfg
        HydraConfig.instance().set_config(cfg)
        trained = []
        job_cfg = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
        try:
            assert run_job(job_cfg, lambda *a, trained=trained, **k: trained.append(1)) == float("inf")
        finally:
            HydraConfig.instance().cfg = saved
        assert not trained
        [outcome] = read_outcomes(tmp_path / phrase[:3])
        assert outcome["status"] == "failed" and phrase in outcome["reason"] and "\n" not in outcome["reason"]


@pytest.mark.slow  # every job composed: ~3.3 s
def test_the_plan_says_what_is_batched():
    from gpdlm_cli.sweep.plan import plan

    grid = ["model=svgp,dlm,sgpr", *GRID, *SMALL]
    assert plan(grid).summary().endswith(", not batched")
    p = plan(grid + ["sweep.batched=true"])
    # svgp and dlm: one batch each; sgpr has no batched form, and ignores beta: one job per seed (sweep/beta_free.py)
    assert (p.batch_sizes, p.separate) == ([4, 4], 2)
    assert p.summary().endswith(", batched: 2 groups of 4 members, 2 jobs separately")
    p = plan(["model=svgp", "seed=0,1,2", "dataset.split.train_size=150,200", "sweep.batched=true"])
    assert p.summary().endswith(", batched: 2 groups of 3 members")  # two training sizes: two shapes
    p = plan(["model=svgp", "seed=0", "dataset.split.train_size=150,200", "sweep.batched=true"])
    assert p.summary().endswith(", batched: none (2 jobs trained separately)")


@pytest.mark.slow
def test_a_batch_that_fails_falls_back_to_separate_runs(tmp_path, capsys, mlflow_uri, monkeypatch):
    """A batch that cannot train (here: made to raise NotBatchable, as a non-PD matrix or a NaN loss
    does) trains every job of its shape separately, each saying so once, with the separate metrics."""
    import gpdlm_cli.sweep.batched_model as TB

    def fail(*args, **kwargs):
        raise NotBatchable("member 1's loss became non-finite (its separate run reports where)")

    monkeypatch.setattr(TB, "train_batched", fail)
    lines = _sweep(tmp_path, capsys, mlflow_uri, "fails", ["model=dlm", "trainer.max_iters=30"])
    lines = _sweep(tmp_path, capsys, mlflow_uri, "fails-b", ["model=dlm", "trainer.max_iters=30", "sweep.batched=true"])
    assert [ln for ln in lines if "sweep.batched" in ln] == [
        "gpdlm: sweep.batched: member 1's loss became non-finite (its separate run reports where); 4 jobs trained separately"
    ]
    _, separate = _children(mlflow_uri, "fails")
    _, fallen = _children(mlflow_uri, "fails-b")
    for key, run in fallen.items():
        assert run.data.tags["gpdlm.batched"] == "separate"
        assert run.data.metrics["test_nll"] == separate[key].data.metrics["test_nll"]  # bit for bit: the same path


@pytest.mark.slow
@pytest.mark.parametrize("model", ["svgp", "dlm"])
def test_the_ordinary_objective_evaluates_a_batch_of_members(model):
    """Issue 46, item 4: the members' own objective (``CollapsedELBO``, ``DLM``) run once on their stacked
    parameters (``torch.func.functional_call``, a leading batch dimension) gives each member's loss and
    gradient as evaluated on its own model -- no second copy of the maths."""
    members = _members(model, [(0, 0.5), (1, 2.0), (0, 3.0)])
    batch = BatchedSVGP(members)
    assert type(batch.objective).__name__ == ("CollapsedELBO" if model == "svgp" else "DLM")
    got = batch.losses()
    assert got.shape == (3,)
    got.sum().backward()
    for b, m in enumerate(members):
        own = _objective(m)
        params = [p for ps in m.groups.values() for p in ps if p.requires_grad]
        loss = own(m.x, m.y)
        assert got[b].item() == pytest.approx(loss.item(), rel=1e-12)
        grads = torch.autograd.grad(loss, params)
        stacked = [p.grad[b] for _, ps in batch.parameter_groups() for p in ps]
        for g_own, g_batch in zip(grads, stacked):
            torch.testing.assert_close(g_batch, g_own, rtol=1e-9, atol=1e-12)


def test_a_batch_of_cholesky_factors_adds_jitter_only_where_a_member_needs_it():
    """``safe_cholesky`` on a batch: a member whose matrix is not positive definite gets the factor its
    separate run gets (its own jitter), the others the plain factor -- not the batch's jitter."""
    from gpdlm_cli.models.linalg import safe_cholesky

    good = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=torch.float64)
    bad = torch.tensor([[1.0, 1.0], [1.0, 1.0]], dtype=torch.float64)  # singular: needs jitter
    L = safe_cholesky(torch.stack([good, bad, good]))
    torch.testing.assert_close(L[0], torch.linalg.cholesky(good), rtol=0, atol=0)
    torch.testing.assert_close(L[2], torch.linalg.cholesky(good), rtol=0, atol=0)
    torch.testing.assert_close(L[1], safe_cholesky(bad), rtol=0, atol=0)
