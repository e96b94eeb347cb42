"""``gpdlm train``'s run: one experiment from a composed config to metrics in MLflow and metrics.json.

``run_train`` prepares the run (``prepare``: every check before an MLflow run exists), then
follows the tracked-run lifecycle (``run.lifecycle``): tags, ``config.yaml``, the stages trained
with checkpoints and partial results on a kill, ``metrics.json`` before MLflow, the learning curve,
the learned hyperparameters (``hyperparameters.json``, ``hp.*`` metrics: ``run.hyperparameters``)
and the saved model as artifacts, and the one-line report.

The ending is ordered so that a kill at any point leaves a run that ``gpdlm resume`` continues or
``gpdlm runs --stale --finish`` closes (docs/reliability.md):

1. training ends -> a *complete* checkpoint (every stage done; resuming from it trains nothing);
2. evaluation, ``metrics.json``, the learning curve, the metrics to MLflow, ``model.pt`` (with its
   SHA-256 in ``model.pt.sha256`` and the tag ``gpdlm.model_sha256``);
3. the artifacts, then the MLflow run ends FINISHED;
4. only then is the checkpoint removed.

The process holds ``<folder>/.gpdlm.lock`` while it works (``files.folder_lock``): a second process
never trains into the same folder, and ``gpdlm resume`` knows a live run from a dead one.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from ..metrics import predictive_metrics
from ..prepare import prepare
from ..runtime import peak_rss_mb as runtime_peak_rss_mb
from ..runtime import reset_peak_rss
from ..tracking.identity import config_hash, config_hashes
from ..training import run_stages
from .artifacts import plot_learning_curve
from .lifecycle import TrackedRun, make_tracker, run_tags
from .naming import curve_info, run_name_for


def run_train(
    cfg,
    output_dir: str | os.PathLike,
    overrides: list[str] | None = None,
    tracker=None,
    parent_run_id: str | None = None,
    skip_finished: bool = False,
) -> dict | None:
    """Run one experiment; returns the final metrics (None if ``skip_finished`` found a FINISHED
    run with the same config hash). Raises GpdlmError on bad input."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)

    # 1. everything that can fail on bad input, before a run exists
    reset_peak_rss()  # peak_rss_mb: this run's own high-water mark (data loading included)
    with shared_kmeans(cfg, sweep_job=parent_run_id is not None) as kmeans_reused:  # k-means once per sweep
        p = prepare(cfg)
    generator = torch.Generator().manual_seed(cfg.seed)  # batch orders drawn on the CPU: the same on every device
    if p.method.estimator is not None:
        p.method.estimator.seed(cfg.seed, p.device)

    tracker = tracker if tracker is not None else make_tracker(cfg.tracking)
    chash = config_hash(cfg)
    if skip_finished and tracker.has_finished_run("gpdlm.config_hash", config_hashes(cfg)):
        return None
    from ..exceptions import GpdlmError
    from ..files import FolderBusy, folder_lock, remove_stale_temporaries

    try:
        with folder_lock(output_dir):
            remove_stale_temporaries(output_dir)  # half-written files of a process killed mid-write
            return _train_locked(cfg, output_dir, overrides, tracker, parent_run_id, p, kmeans_reused, generator, chash)
    except FolderBusy as e:
        raise GpdlmError(
            f"another gpdlm process (pid {e}) is training into {output_dir}; wait for it to end, "
            f"or choose another folder (hydra.run.dir=...)"
        ) from None


def _train_locked(
    cfg, output_dir: Path, overrides, tracker, parent_run_id, p, kmeans_reused, generator, chash: str
) -> dict:
    """``run_train`` from the checkpoint to the report, with the folder's lock held."""
    splits, data, method, settings = p.splits, p.data, p.method, p.settings
    device = p.device
    from ..training.checkpoint import FILE as CHECKPOINT_FILE
    from ..training.checkpoint import Checkpointer, read_checkpoint

    resume_state = read_checkpoint(output_dir / CHECKPOINT_FILE)  # a requeued or resumed job continues
    if resume_state is not None and resume_state.get("config_hash") not in config_hashes(cfg):
        resume_state = None  # another configuration's checkpoint: start afresh (and overwrite it)
    extra_tags = {"gpdlm.resumed_from": str(resume_state.get("run_id"))} if resume_state is not None else {}
    # what the family declares for analysis (the metric `gpdlm select` and sweeps pick beta by, the
    # reference beta): run tags, so that analysis never imports a family (analysis.declarations)
    from ..methods import declaration_tags

    extra_tags.update(declaration_tags(str(cfg.model.name)))
    tags = run_tags(
        "train",
        overrides=overrides,
        output_dir=output_dir,
        device=device,
        fingerprint=splits.fingerprint,
        chash=chash,
        **method.tags,
        **extra_tags,
    )
    run = TrackedRun(output_dir, tracker, cfg.tracking.get("run_name") or run_name_for(cfg))

    with run.started(cfg, tags, parent_run_id=parent_run_id, table=p.table, fingerprint=splits.fingerprint):
        evaluate = evaluator(method, data, splits.y_std)
        history = {"loss": [], "steps": {}}
        if resume_state is not None:  # the learning curves of the interrupted segments, in the new run too
            history["steps"] = {k: [(int(s), float(v)) for s, v in pts] for k, pts in resume_state["history"].items()}
            tracker.log_steps(history["steps"])

        def log_steps(series):
            for k, pts in series.items():
                history["steps"].setdefault(k, []).extend(pts)
            tracker.log_steps(series)

        def curve_so_far():
            history["loss"] = [v for _, v in history["steps"].get("train_loss", [])]
            return history

        stage_lrs = list(dict.fromkeys(s.overrides.get("lr", settings.lr) for s in method.stages))  # families' own lrs
        info = curve_info(cfg, splits.task, splits.y_std, lr=stage_lrs)
        cache, warm = reuse_for(cfg)
        est_gen = method.estimator.random.generator(device) if hasattr(method.estimator, "random") else None

        def run_state():
            return {
                "modules_list": method.modules,
                "generator_list": [generator, est_gen],
                "history": {k: [[s, v] for s, v in pts] for k, pts in history["steps"].items()},
                "config_hash": chash,
                "run_id": str(getattr(tracker, "run_id", "") or ""),
                "tracking_uri": str(getattr(tracker, "uri", "") or ""),
            }  # where `gpdlm resume` logs

        warnings: list[str] = []

        def checkpoint_failed(error: OSError, iteration):
            """Once per run: a checkpoint could not be written (a full disk); training goes on."""
            from .artifacts import append_log

            since = "no checkpoint written" if iteration is None else f"checkpoint stays at iteration {iteration}"
            why = getattr(error, "strerror", None) or type(error).__name__
            note = f"checkpoint not written ({why}); {since}: a stop now costs the iterations since"
            warnings.append(note)
            print(f"gpdlm: warning: {note}", file=sys.stderr, flush=True)
            append_log(output_dir, note, level="WARNING")
            try:
                tracker.set_tags({"gpdlm.checkpoint_failed": note})
            except Exception:  # the store may be as full as the disk: the log and the console have it
                pass

        checkpoint = (
            Checkpointer(
                output_dir / CHECKPOINT_FILE,
                int(cfg.trainer.get("checkpoint_every", 5)),
                run_state,
                state=resume_state,
                on_failure=checkpoint_failed,
            )
            if int(cfg.trainer.get("checkpoint_every", 5)) > 0
            else None
        )
        from .artifacts import log_fit, log_protocol, warnings_to_log

        log_protocol(output_dir, settings, method.stages)  # gpdlm.log: the protocol, then each stage's end
        with (
            run.interruptible(curve_so_far, info),
            warnings_to_log(output_dir),
        ):  # a kill leaves a self-explaining folder
            batched = None
            if cfg.sweep.get("batched", False):  # a member of a batch trained by the first job of its shape
                from ..sweep.batched import batched_member

                batched = batched_member(cfg, evaluator, tracker, stage_cache=lambda c: reuse_for(c)[0])
            if batched is not None and batched.fit is not None:
                from ..training.reuse import loadmodule_state

                loadmodule_state(method.modules, batched.state)
                log_steps(batched.steps)
                fit = batched.fit
            else:
                fit = run_stages(
                    method.stages,
                    data.x_train,
                    data.y_train,
                    settings,
                    generator=generator,
                    evaluate=evaluate,
                    log_steps=log_steps,
                    modules=method.modules,
                    cache=cache,
                    warm=warm,
                    generators=[est_gen],
                    checkpoint=checkpoint,
                )
                if checkpoint is not None and not (resume_state or {}).get("complete"):
                    # training is done: a stop from here on resumes without training (issue 47.6)
                    checkpoint.save_complete(fit, len(method.stages))
        if batched is not None:
            tracker.set_tags({"gpdlm.batched": batched.tag})
            if batched.note:
                from .artifacts import append_log

                append_log(output_dir, batched.note, level="INFO")
        history["loss"] = fit.losses
        log_fit(output_dir, fit)
        if fit.reused:
            tracker.set_tags({"gpdlm.reused_stage": ",".join(fit.reused)})
        if kmeans_reused:
            tracker.set_tags({"gpdlm.reused_inducing": ",".join(kmeans_reused)})
        if fit.warm_started_from is not None:
            tracker.set_tags({"gpdlm.warm_start_from": f"beta={fit.warm_started_from:g}"})
        tracker.set_tags(
            {
                "gpdlm.stop_rule": ",".join(fit.stop_rules) or "none",
                "gpdlm.protocol": settings.protocol,
                "gpdlm.optimizers": ",".join(fit.optimizers) or "none",
                "gpdlm.keep_best": settings.keep_best or "none",
            }
        )
        if fit.lbfgs_budget_hit:  # the fast protocol's budget ended a stage: say so where people look
            from .artifacts import append_log

            grad = "" if fit.grad_max_abs is None else f", largest gradient component {fit.grad_max_abs:.2g} per datum"
            note = (
                f"trainer=fast: L-BFGS stage {', '.join(fit.lbfgs_budget_hit)} stopped at its budget "
                f"(trainer.fast_max_iters) before its convergence tests held{grad}; trainer=paper can end lower "
                "on such jobs (docs/training.md, 'Fast protocol')"
            )
            print(f"gpdlm: {note}", file=sys.stderr)
            append_log(output_dir, note, level="WARNING")
            tracker.set_tags({"gpdlm.lbfgs_budget_hit": ",".join(fit.lbfgs_budget_hit)})
        if method.finalize:
            method.finalize(data.x_train, data.y_train)

        metrics = evaluate()
        metrics.update(
            {
                "train_seconds": fit.train_seconds,
                "iter_ms": fit.iter_ms,
                "iterations": fit.iterations,
                # the training objective (per datum) at the first step and at the last step of the last stage
                **({"first_loss": fit.losses[0], "final_loss": fit.losses[-1]} if fit.losses else {}),
                "converged": int(fit.converged),
                "n_train": splits.n_train,
                "peak_rss_mb": runtime_peak_rss_mb(),  # resident-set high-water mark of this run (runtime.peak_rss_mb)
            }
        )
        if len(fit.stage_final_loss) > 1:  # multi-stage protocols (the fixed variants): each stage's own end
            metrics.update({f"final_loss_{name}": v for name, v in fit.stage_final_loss.items()})
        if fit.grad_max_abs is not None:  # the fast protocol's gradient test (training.loop.train)
            metrics["grad_max_abs"] = fit.grad_max_abs
        if settings.keep_best:
            metrics["best_iteration"] = fit.best_iteration if fit.best_iteration is not None else fit.iterations
        if method.estimator is not None:
            metrics.update(method.estimator.statistics())
        if method.diagnostics is not None:
            metrics.update(method.diagnostics())
        # 2. results to disk first (atomically), then to MLflow -- which gets the metrics even when
        # the disk is full; a file not written ends the run with one line saying what was saved
        run.save_metrics(metrics)
        for k, v in metrics.items():  # the final evaluation closes the learning curves
            if k.startswith(("val_", "test_")) or k in method.monitors:
                history["steps"].setdefault(k, []).append((fit.iterations, v))
        for name in method.watch:  # a watched objective that ended below its best: say so, tag it (results unchanged)
            from .watch import falls, message

            found = falls(history["steps"].get(name, []), higher_is_better=name in method.higher_is_better)
            if found is not None:
                from .artifacts import append_log

                note = message(name, found)
                print(f"gpdlm: warning: {note}", file=sys.stderr)
                append_log(output_dir, note, level="WARNING")
                tracker.set_tags({f"gpdlm.warning.{name}": f"falls {found['best']:.4g} -> {found['last']:.4g}"})
        run.save("learning_curve.png", lambda path: plot_learning_curve(history, path, title=run.run_name, info=info))
        run.log_metrics(metrics, step=fit.iterations)
        from .hyperparameters import FILE as HYPERPARAMETERS_FILE
        from .hyperparameters import save_hyperparameters

        save_hyperparameters(run, method)  # the learned values, constrained: hyperparameters.json and hp.* metrics
        from .saved_model import MODEL_FILE, save_model

        digest = []
        if run.save(
            MODEL_FILE, lambda path: digest.append(save_model(path, cfg, method, splits, data.target_names or []))
        ):
            tracker.set_tags({"gpdlm.model_sha256": digest[0]})
        from .mlflow_model import write_mlflow_model

        mlflow_model = write_mlflow_model(run, method, splits)  # model/: the pyfunc MLflow Model (runs:/<id>/model)
        run.close(
            ("config.yaml", "metrics.json", "learning_curve.png", HYPERPARAMETERS_FILE, MODEL_FILE, *mlflow_model),
            metrics,
        )
    # the run is FINISHED in MLflow: only now does the checkpoint go (a kill before this line leaves
    # a complete checkpoint, and `gpdlm resume` only finalises)
    if checkpoint is not None:
        checkpoint.remove()
    run.report(metrics, note="; ".join(warnings))
    return metrics


def reuse_key(cfg) -> str:
    """What determines every stage whose result does not depend on beta: the resolved config without
    ``objective.beta`` (and the bookkeeping keys ``config_hash`` drops), and the code that trains it."""
    import hashlib

    from omegaconf import OmegaConf

    from .. import __version__
    from .lifecycle import git_commit

    c = OmegaConf.to_container(cfg, resolve=True)
    c.get("objective", {}).pop("beta", None)
    for k in ("tracking", "progress", "sweep", "hydra"):
        c.pop(k, None)
    blob = json.dumps({"config": c, "gpdlm": __version__, "commit": git_commit()}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def shared_kmeans(cfg, sweep_job: bool = True):
    """The k-means cache of ``sweep.share_stages`` (``<sweep.cache_dir>/kmeans``) for a job of a sweep,
    or a block without one (a single run has nothing to share it with); either yields the list of
    cached centres it reused."""
    from contextlib import nullcontext

    from ..methods.components import kmeans_cache

    s = cfg.sweep
    if not sweep_job or not bool(s.get("share_stages", True)):
        return nullcontext([])
    return kmeans_cache(Path(str(s.get("cache_dir", "outputs/.cache"))) / "kmeans")


def reuse_for(cfg):
    """(StageCache or None, WarmStart or None) from ``sweep.share_stages`` and ``sweep.warm_start``."""
    from ..training.reuse import StageCache, WarmStart

    s = cfg.sweep
    share, warm = bool(s.get("share_stages", True)), bool(s.get("warm_start", False))
    if not (share or warm):
        return None, None
    key = reuse_key(cfg)
    cache = StageCache(Path(str(s.get("cache_dir", "outputs/.cache"))) / "stages", key) if share else None
    return cache, (WarmStart(key, float(cfg.objective.beta)) if warm else None)


def evaluator(method, data, y_std: float):
    """The run's evaluation: predictive metrics on validation and test (the family's own
    ``evaluate`` if it has one) and the family's monitors."""

    def predictive(x, y, prefix):
        if method.evaluate is not None:
            return method.evaluate(x, y, prefix=prefix, y_std=y_std)
        return predictive_metrics(method.model, method.likelihood, x, y, y_std=y_std, prefix=prefix)

    def evaluate():
        out = {**predictive(data.x_val, data.y_val, "val_"), **predictive(data.x_test, data.y_test, "test_")}
        for name, monitor in method.monitors.items():
            out[name] = float(monitor())
        return out

    return evaluate
