"""Batched configurations of the RKHS family (issue 41, item 2; ``sweep.batched_rkhs``): B runs that differ in
seed and learning rate, trained together, give every member its separate run's losses, metrics, best iterate
and end state (float64, to 1e-8); a member that stops early does not perturb the others; what is out of
scope says why in one line."""

from __future__ import annotations

import pytest
import torch

from gpdlm_cli.prepare import prepare
from gpdlm_cli.run.train import evaluator
from gpdlm_cli.sweep.batched import out_of_scope, shape_key
from gpdlm_cli.sweep.batched_model import NotBatchable
from gpdlm_cli.sweep.batched_rkhs import RKHSMember, train_rkhs_batched
from gpdlm_cli.training import run_stages, stage_settings

from ..conftest import compose

# 120 concrete rows, a 2 x 8 ReLU network, batches of 16 (7 steps an epoch), 3 epochs, evaluated every epoch,
# the best train_nlml kept
SMALL = [
    "features=nn",
    "features.widths=[8,8]",
    "dataset=concrete",
    "dataset.split.train_size=120",
    "trainer.optimizer=adadelta",
    "trainer.batch_size=16",
    "trainer.max_iters=null",
    "trainer.max_epochs=3",
    "trainer.eval_every=0",
    "trainer.eval_every_epochs=1",
    "trainer.stop_rule=none",
    "trainer.keep_best=train_nlml",
    "tracking.enabled=false",
    "threads=1",
    "progress=false",
]
GRID = [(0, 0.1), (1, 0.3), (2, 1.0)]  # (seed, lr) of the three members


def _cfg(model, kernel, seed, lr, extra=()):
    return compose([f"model={model}", f"kernel={kernel}", *SMALL, f"seed={seed}", f"trainer.lr={lr}", *extra])


def _separate(cfg):
    p = prepare(cfg)
    evaluate = evaluator(p.method, p.data, p.splits.y_std)
    fit = run_stages(
        p.method.stages,
        p.data.x_train,
        p.data.y_train,
        p.settings,
        generator=torch.Generator().manual_seed(cfg.seed),
        evaluate=evaluate,
        modules=p.method.modules,
    )
    p.method.model._post = None
    return fit, evaluate(), _state(p)


def _state(p) -> dict:
    out = {}
    for i, m in enumerate(p.method.modules):
        for name, t in list(m.named_parameters()) + list(m.named_buffers()):
            out[f"{i}.{name}"] = t.detach().clone()
    return out


def _batched(cfgs):
    members, prepared = [], []
    for c in cfgs:
        p = prepare(c)
        stage = p.method.stages[-1]
        if stage.prepare is not None:
            stage.prepare()
        s = stage_settings(p.settings, stage, p.n_train)
        evaluate = evaluator(p.method, p.data, p.splits.y_std)
        members.append(RKHSMember(p.method, s, p.data.x_train, p.data.y_train, int(c.seed), evaluate))
        prepared.append((p, evaluate))
    fits = train_rkhs_batched(members)
    out = []
    for (p, evaluate), f in zip(prepared, fits):
        p.method.model._post = None
        out.append((f, evaluate(), _state(p)))
    return out


def _assert_equal(separate, batched):
    (fit, metrics, state), (f, m, s) = separate, batched
    r = f.result
    assert r.iterations == fit.iterations and r.best_iteration == fit.best_iteration
    assert r.converged == fit.converged
    assert r.losses == pytest.approx(fit.losses, rel=1e-8, abs=1e-8)
    assert sorted(m) == sorted(metrics)
    for k in metrics:
        assert m[k] == pytest.approx(metrics[k], rel=1e-8, abs=1e-8), k
    assert sorted(s) == sorted(state)
    for k in state:
        torch.testing.assert_close(s[k], state[k], rtol=1e-8, atol=1e-8, msg=k)
    # epochs 1 and 2, and the final iterate's evaluation (epoch 3: keep_best=train_nlml, Loop._finish)
    assert [pt[0] for pt in f.steps["train_nlml"]] == [7, 14, 21]


@pytest.mark.slow  # ~3 s each (3 separate runs and their batch)
@pytest.mark.parametrize("model,kernel", [("scgd", "linear"), ("minimax", "rff"), ("bsgd", "linear")])
def test_batched_members_equal_their_separate_runs(model, kernel):
    torch.set_num_threads(1)
    extra = ["kernel.num_features=20"] if kernel == "rff" else []
    cfgs = [_cfg(model, kernel, seed, lr, extra) for seed, lr in GRID]
    separate = [_separate(c) for c in cfgs]
    batched = _batched(cfgs)
    for a, b in zip(separate, batched):
        _assert_equal(a, b)
    # three different runs (seed and lr matter), not one copied
    assert len({round(b[1]["train_nlml"], 8) for b in batched}) == 3
    if model != "bsgd":
        assert batched[0][2]["2.w"].shape == batched[1][2]["2.w"].shape


@pytest.mark.slow
def test_a_member_that_stops_early_does_not_perturb_the_others():
    """The window rule (3 losses, tol 0.5, checked every 3 iterations): the member at lr 0.1 stops after 12 of
    its 21 iterations, the others run their budget; each member stops where its separate run stops, and the
    others go on exactly as alone."""
    torch.set_num_threads(1)
    extra = ["trainer.stop_rule=window", "trainer.stop_window=3", "trainer.stop_tol=0.5", "trainer.check_every=3"]
    cfgs = [_cfg("scgd", "linear", seed, lr, extra) for seed, lr in GRID]
    separate = [_separate(c) for c in cfgs]
    iterations = [fit.iterations for fit, _, _ in separate]
    assert iterations == [12, 21, 21]
    for a, b in zip(separate, _batched(cfgs)):
        _assert_equal_stop(a, b)


def _assert_equal_stop(separate, batched):
    (fit, metrics, state), (f, m, s) = separate, batched
    assert f.result.iterations == fit.iterations and f.result.converged == fit.converged
    assert f.result.losses == pytest.approx(fit.losses, rel=1e-8, abs=1e-8)
    for k in metrics:
        assert m[k] == pytest.approx(metrics[k], rel=1e-8, abs=1e-8), k
    for k in state:
        torch.testing.assert_close(s[k], state[k], rtol=1e-8, atol=1e-8, msg=k)


@pytest.mark.slow  # ~3 s
@pytest.mark.parametrize("model", ["scgd", "minimax"])
def test_members_with_different_training_sizes_equal_their_separate_runs(model):
    """Two 90/10 masks of a set can train on n and n - 1 rows (elevators: 14,940 and 14,939): each member keeps
    its own n in its step and its own epochs (130 rows: 8 steps an epoch, 24 in all; the others 21)."""
    torch.set_num_threads(1)
    sizes = [(0, 0.1, 120), (1, 0.3, 119), (2, 1.0, 130)]
    cfgs = [_cfg(model, "linear", s, lr, [f"dataset.split.train_size={n}"]) for s, lr, n in sizes]
    separate = [_separate(c) for c in cfgs]
    assert [fit.iterations for fit, _, _ in separate] == [21, 21, 24]
    for a, b in zip(separate, _batched(cfgs)):
        _assert_equal_stop(a, b)


@pytest.mark.slow  # ~1.5-2.5 s: the fast lane stays under 2 minutes
def test_out_of_scope_rkhs_configs_say_why_in_one_line():
    base = ["model=scgd", "kernel=linear", *SMALL]
    assert out_of_scope(compose(base)) is None
    assert out_of_scope(compose(["model=minimax", "kernel=linear", *SMALL])) is None
    for overrides, phrase in [
        (["trainer.optimizer=adam"], "adadelta only"),
        (["trainer.schedule=robbins_monro"], "constant only"),
        (["dtype=float32"], "float64 only"),
        (["model=bsgd", "model.batching=nearest"], "model.batching=nearest"),
        (["model=bsgd", "kernel=rbf"], "exact-kernel posterior"),
    ]:
        reason = out_of_scope(compose([*base, *overrides]))
        assert reason is not None and phrase in reason and "\n" not in reason, (overrides, reason)
    # the shape ignores seed, the learning rate and the split mask (not the batch size or the model)
    key = shape_key(compose(base))
    assert key == shape_key(compose([*base, "seed=4", "trainer.lr=0.7", "dataset.split.mask=2"]))
    for change in ("trainer.batch_size=32", "model=minimax", "features.widths=[8,4]"):
        assert shape_key(compose([*base, change])) != key, change


def test_members_of_different_models_are_not_batched():
    cfgs = [_cfg("scgd", "linear", 0, 0.1), _cfg("bsgd", "linear", 1, 0.1)]
    members = []
    for c in cfgs:
        p = prepare(c)
        s = stage_settings(p.settings, p.method.stages[0], p.n_train)
        members.append(RKHSMember(p.method, s, p.data.x_train, p.data.y_train, int(c.seed)))
    with pytest.raises(NotBatchable, match="different objectives"):
        train_rkhs_batched(members)


@pytest.mark.slow  # two sweeps of 4 jobs in this process (MLflow dominates): 20-70 s on the loaded 2 cores
def test_a_batched_rkhs_sweep_logs_each_member_as_its_separate_run(tmp_path, capsys, mlflow_uri):
    """gpdlm train -m over 2 seeds x 2 learning rates of MINIMAX: one batch of 4 (tag gpdlm.batched=4), each
    child run with its separate run's metrics (mu and the projection count included: the hook states its job
    restores), tags and learning curve."""
    from mlflow.tracking import MlflowClient

    from gpdlm_cli.sweep.batched import clear_batched

    from ..conftest import run_cli

    def sweep(name, extra):
        clear_batched()
        argv = ["train", "-m", "model=minimax", "kernel=linear", *SMALL[:-3], "threads=1", "progress=false"]
        argv += ["seed=0,1", "trainer.lr=0.1,1.0", f"tracking.uri={mlflow_uri}", f"tracking.experiment={name}"]
        rc, lines = run_cli([*argv, f"hydra.sweep.dir={tmp_path / name}", *extra], tmp_path, capsys)
        assert rc == 0, lines
        client = MlflowClient(mlflow_uri)
        exp = client.get_experiment_by_name(name)
        runs = [r for r in client.search_runs([exp.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
        return client, lines, {(r.data.params["seed"], r.data.params["trainer.lr"]): r for r in runs}

    client, _, separate = sweep("rkhs-sep", [])
    _, lines, batched = sweep("rkhs-bat", ["sweep.batched=true"])
    assert "gpdlm: sweep.batched: trained 4 jobs of model=minimax as one batched model" in lines
    assert sorted(batched) == sorted(separate) and len(batched) == 4
    timing = ("train_seconds", "iter_ms", "peak_memory_mb", "peak_rss_mb", "wall_seconds")
    for key, run in batched.items():
        ref = separate[key]
        assert run.data.tags["gpdlm.batched"] == "4" and run.info.status == "FINISHED"
        assert sorted(run.data.metrics) == sorted(ref.data.metrics)
        for name, value in ref.data.metrics.items():
            if not any(name.startswith(t) for t in timing):
                assert run.data.metrics[name] == pytest.approx(value, rel=1e-8, abs=1e-8), (key, name)
        for tag in ("gpdlm.stop_rule", "gpdlm.optimizers", "gpdlm.config_hash", "gpdlm.rkhs_setting"):
            assert run.data.tags[tag] == ref.data.tags[tag], tag
        for series in ("train_loss", "train_nlml"):
            a = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, series))
            b = sorted((m.step, m.value) for m in client.get_metric_history(ref.info.run_id, series))
            assert [s for s, _ in a] == [s for s, _ in b], series
            assert [v for _, v in a] == pytest.approx([v for _, v in b], rel=1e-8, abs=1e-8), series


def test_stacked_adadelta_moves_each_row_as_its_own_flat_adadelta():
    """StackedAdadelta on B = 3 rows (lr 0.1, 0.3, 1.0; a group scale of 0.5 on the second tensor) against
    three FlatAdadelta runs on the same gradients, 50 steps; a frozen row keeps its values exactly."""
    from gpdlm_cli.training.optim import FlatAdadelta, StackedAdadelta

    g = torch.Generator().manual_seed(0)
    lrs, B = (0.1, 0.3, 1.0), 3
    flat = torch.randn(B, 7, generator=g, dtype=torch.float64)
    leaves = [flat[:, :4].view(B, 2, 2).requires_grad_(True), flat[:, 4:].requires_grad_(True)]
    lr = torch.tensor([[r] * 4 + [0.5 * r] * 3 for r in lrs], dtype=torch.float64)
    opt = StackedAdadelta(leaves, flat, lr, rho=0.9, eps=1e-6)
    singles = []
    for b, r in enumerate(lrs):
        a, c = flat[b, :4].view(2, 2).clone().requires_grad_(True), flat[b, 4:].clone().requires_grad_(True)
        groups = [{"params": [a], "lr": r}, {"params": [c], "lr": 0.5 * r}]
        singles.append((a, c, FlatAdadelta(groups, rho=0.9, eps=1e-6)))
    for step in range(50):
        grads = torch.randn(B, 7, generator=g, dtype=torch.float64)
        leaves[0].grad, leaves[1].grad = grads[:, :4].reshape(B, 2, 2).clone(), grads[:, 4:].clone()
        opt.step(None if step < 40 else torch.tensor([True, False, True]))
        for b, (a, c, single) in enumerate(singles):
            if step >= 40 and b == 1:
                continue
            a.grad, c.grad = grads[b, :4].reshape(2, 2).clone(), grads[b, 4:].clone()
            single.step()
        if step == 39:
            frozen = flat[1].clone()
    for b, (a, c, _) in enumerate(singles):
        torch.testing.assert_close(flat[b], torch.cat([a.detach().reshape(-1), c.detach()]), rtol=1e-12, atol=1e-14)
    assert torch.equal(flat[1], frozen)
    assert torch.equal(leaves[1].detach(), flat[:, 4:])  # the leaves view the flat storage


def test_a_sweep_composes_its_jobs_once(monkeypatch):
    """The first job of every shape looks at the sweep's jobs: they are composed (and hashed) once per sweep."""
    import gpdlm_cli.sweep.compose as composer
    from gpdlm_cli.sweep import batched

    calls = []

    def fake(jobs):
        calls.append(len(jobs))
        return [compose(["model=scgd", "kernel=linear", *SMALL, *job]) for job in jobs]

    monkeypatch.setattr(composer, "compose_jobs", fake)
    batched.clear_batched()
    jobs = [["seed=0"], ["seed=1", "trainer.lr=0.3"]]
    first = batched._composed("/sweep", jobs)
    assert batched._composed("/sweep", jobs) is first and calls == [2]
    assert first[0][2] == first[1][2]  # seed and lr differ: one shape
    batched._composed("/other", jobs)
    assert calls == [2, 2]
    batched.clear_batched()


def test_full_batch_members_of_different_sizes_are_not_batched():
    """On the full batch a member's step sees all its rows: members of different n cannot stack (minibatches can)."""
    members = []
    for n in (100, 99):
        c = _cfg("scgd", "linear", 0, 0.1, ["trainer.batch_size=null", f"dataset.split.train_size={n}"])
        p = prepare(c)
        s = stage_settings(p.settings, p.method.stages[0], p.n_train)
        members.append(RKHSMember(p.method, s, p.data.x_train, p.data.y_train, int(c.seed)))
    with pytest.raises(NotBatchable, match="full-batch members of different training sizes"):
        train_rkhs_batched(members)


# the RKHS study's SVGP arm (conf/experiment/rkhs_batch_study.yaml): SVGP on the network's features with the linear
# kernel, M = batch size, AdaDelta on minibatches, the last iterate
SVGP = ["model=svgp", "kernel=linear", "features.widths=[16,16]", "model.num_inducing=16", "trainer.keep_best=null"]


@pytest.mark.slow  # ~3 s (3 separate runs and their batch)
def test_batched_minibatch_svgp_members_equal_their_separate_runs():
    """Three members of the study's SVGP arm (different seeds, so different masks' rows, and learning rates)
    trained as one stacked batch end where their separate runs end: losses, metrics and every parameter."""
    from gpdlm_cli.sweep.batched_rkhs import _member

    torch.set_num_threads(1)
    cfgs = [_cfg("svgp", "linear", seed, lr, SVGP) for seed, lr in GRID]
    for c in cfgs:
        assert out_of_scope(c) is None
    assert len({shape_key(c) for c in cfgs}) == 1  # one shape: seed and lr are free
    separate = [_separate(c) for c in cfgs]
    members = [_member(c, evaluator) for c in cfgs]
    fits = train_rkhs_batched(members)
    for (fit, metrics, state), m, f in zip(separate, members, fits):
        r = f.result
        assert r.iterations == fit.iterations == 21
        assert r.losses == pytest.approx(fit.losses, rel=1e-8, abs=1e-8)
        got = m.evaluate()
        assert sorted(got) == sorted(metrics)
        for k in metrics:
            assert got[k] == pytest.approx(metrics[k], rel=1e-8, abs=1e-8), k
        s = {}
        for i, mod in enumerate(m.method.modules):
            for name, t in list(mod.named_parameters()) + list(mod.named_buffers()):
                s[f"{i}.{name}"] = t.detach().clone()
        assert sorted(s) == sorted(state)
        for k in state:
            torch.testing.assert_close(s[k], state[k], rtol=1e-8, atol=1e-8, msg=k)
        assert [pt[0] for pt in f.steps["test_rmse"]] == [7, 14]  # evaluated after epochs 1 and 2
    assert len({round(fit.losses[-1], 8) for fit, _, _ in separate}) == 3  # three different runs


@pytest.mark.slow  # ~3 s (composes seven configs)
def test_minibatch_svgp_out_of_scope_says_why_in_one_line():
    base = ["model=svgp", "features=nn", "dataset=concrete", "trainer.optimizer=adadelta", "trainer.batch_size=16"]
    assert out_of_scope(compose([*base, "kernel=linear", "trainer.lr=0.3"])) is None
    reason = out_of_scope(compose([*base, "kernel=rbf"]))
    assert reason == "kernel=rbf is not batched for minibatch SVGP on features (linear only)"
    reason = out_of_scope(compose([*base, "kernel=linear", "trainer.schedule=step"]))
    assert reason is not None and "\n" not in reason and "schedule" in reason
    # the full-batch Adam family's limits still apply to Adam runs on features
    reason = out_of_scope(compose(["model=svgp", "features=nn", "dataset=concrete", "kernel=linear"]))
    assert reason == "input features (features=nn) are not batched"
    # lr and mask are free in the stacked arm's shape, not in the full-batch Adam one's
    a, b = (compose([*base, "kernel=linear", f"trainer.lr={lr}"]) for lr in (0.1, 1.0))
    assert shape_key(a) == shape_key(b)
    a, b = (compose(["model=svgp", "dataset=concrete", f"trainer.lr={lr}"]) for lr in (0.1, 1.0))
    assert shape_key(a) != shape_key(b)


@pytest.mark.slow  # ~3 s (prepares and trains a batch of 3)
def test_a_minibatch_svgp_group_gives_each_job_its_outcome():
    """``sweep.batched``'s group trainer on the SVGP arm: each job's outcome (tag, fit, end state) and its restore
    (no Cholesky log on this model) -- the path a sweep's jobs take."""
    from gpdlm_cli.sweep.batched_rkhs import train_group
    from gpdlm_cli.tracking.identity import config_hash

    torch.set_num_threads(1)
    cfgs = [_cfg("svgp", "linear", seed, lr, SVGP) for seed, lr in GRID]
    out = train_group(cfgs[0], config_hash(cfgs[0]), cfgs, evaluator)
    assert sorted(out) == sorted(config_hash(c) for c in cfgs)
    for c in cfgs:
        o = out[config_hash(c)]
        assert o["tag"] == "3" and o["fit"].iterations == 21 and o["state"]
        o["restore"](prepare(c).method)  # a job restores its member's hook states: none here, and no error


def test_a_batched_group_says_where_it_is_at_most_once_a_minute(capsys):
    """``GroupProgress``: no line before PROGRESS_EVERY_S has passed, then one per interval, with the
    furthest iteration of the cap, the members still training, the time so far and the time left at the
    rate since the group started (here 100 iterations a minute: 900 left -> 9 minutes); none at the cap."""
    from gpdlm_cli.sweep.batched_model import PROGRESS_EVERY_S, GroupProgress

    now = [0.0]
    shown = GroupProgress("group of 6 (scgd)", clock=lambda: now[0])
    shown.tick(1, 1000, 6)
    now[0] = PROGRESS_EVERY_S - 1
    shown.tick(99, 1000, 6)
    assert capsys.readouterr().err == ""
    now[0] = 60.0
    shown.tick(100, 1000, 5)
    assert capsys.readouterr().err == (
        "gpdlm: sweep.batched: group of 6 (scgd): iteration 100 of 1,000 (10%), 5 training, "
        "1.0 min so far, about 9.0 min left\n"
    )
    now[0] = 70.0
    shown.tick(120, 1000, 5)  # within the interval of the last line
    now[0] = 600.0
    shown.tick(1000, 1000, 0)  # done: the jobs' own lines follow
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_a_training_rkhs_group_prints_its_progress(monkeypatch, capsys):
    from gpdlm_cli.sweep import batched_model

    torch.set_num_threads(1)
    monkeypatch.setattr(batched_model, "PROGRESS_EVERY_S", 0.0)
    _batched([_cfg("scgd", "linear", seed, lr, []) for seed, lr in GRID])
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 20  # iterations 2-20 of 21 (iterations 1-20: none at the cap)
    assert lines[-1].startswith("gpdlm: sweep.batched: group of 3 (scgd): iteration 20 of 21 (95%), 3 training, ")
