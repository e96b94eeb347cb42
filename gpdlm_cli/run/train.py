"""``gpdlm train``'s run: one experiment from a composed config to metrics in MLflow and metrics.json.

``run_train`` prepares the run (``prepare``: every check before an MLflow run exists), then
follows the tracked-run lifecycle (``run.lifecycle``): tags, ``config.yaml``, the stages trained
with checkpoints and partial results on a kill, ``metrics.json`` before MLflow, the learning curve,
the learned hyperparameters (``hyperparameters.json``, ``hp.*`` metrics: ``run.hyperparameters``)
and the saved model as artifacts, and the one-line report. ``_train_locked`` is that recipe, one line
per step; what happens *during* training is the training loop's callbacks (``training.callbacks``, and
``RecordFit`` here: the stage lines, the training tags, the L-BFGS budget note).

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
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from ..metrics import predictive_metrics
from ..prepare import prepare
from ..runtime import peak_rss_mb as runtime_peak_rss_mb
from ..runtime import reset_peak_rss
from ..tracking.identity import config_hash, config_hashes
from ..training import run_stages
from ..training.callbacks import Callback
from .artifacts import append_log, log_fit, log_protocol, plot_learning_curve, warnings_to_log
from .lifecycle import TrackedRun, finished_from, make_tracker, run_tags
from .naming import curve_info, run_name_for

#: a batched member's note (its group continued from checkpoints, or why it trained separately), as a run tag
BATCHED_NOTE = "gpdlm.batched_note"


def run_train(
    cfg,
    output_dir: str | os.PathLike,
    overrides: list[str] | None = None,
    tracker=None,
    parent_run_id: str | None = None,
    skip_finished: bool = False,
    outcome: dict | None = None,
) -> dict | None:
    """Run one experiment; returns the final metrics (None if ``skip_finished`` found a FINISHED
    run with the same config hash). With ``skip_finished`` a job whose folder holds no checkpoint of its
    own continues a stopped run of its config hash from that run's checkpoint (``run.resume``), and
    ``outcome`` (a sweep job's record) gets ``resumed``: which run, from which step. Raises GpdlmError
    on bad input."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    reset_peak_rss()  # peak_rss_mb: this run's own high-water mark (data loading included)
    p = prepare(cfg)  # 1. everything that can fail on bad input, before a run exists
    generator = torch.Generator().manual_seed(cfg.seed)  # batch orders drawn on the CPU: the same on every device
    if p.method.estimator is not None:
        p.method.estimator.seed(cfg.seed, p.device)
    tracker = tracker if tracker is not None else make_tracker(cfg.tracking, finished_from=finished_from(cfg))
    if skip_finished and _done_or_training_elsewhere(tracker, cfg, outcome):
        return None
    with _folder_locked(output_dir):
        return _train_locked(cfg, output_dir, overrides, tracker, parent_run_id, p, generator, skip_finished, outcome)


def _done_or_training_elsewhere(tracker, cfg, outcome: dict | None) -> bool:
    """``sweep.skip_finished``: whether the job has nothing to do (``Tracker.skip_reason``: a FINISHED run of
    its configuration, the store's or one recorded in ``sweep.finished_from``, or a run another live process
    on this host is training -- the job then says so on stderr and in its outcome's reason)."""
    why = tracker.skip_reason(config_hashes(cfg))
    if why not in (None, "finished"):
        print(f"gpdlm: skipped: {why}", file=sys.stderr)
        if outcome is not None:
            outcome["reason"] = why
    return why is not None


@contextmanager
def _folder_locked(output_dir: Path):
    """The folder's lock (``files.folder_lock``), its half-written files of a killed process removed."""
    from ..exceptions import GpdlmError
    from ..files import FolderBusy, folder_lock, remove_stale_temporaries

    try:
        with folder_lock(output_dir):
            remove_stale_temporaries(output_dir)
            yield
    except FolderBusy as e:
        raise GpdlmError(
            f"another gpdlm process (pid {e}) is training into {output_dir}; wait for it to end, "
            f"or choose another folder (hydra.run.dir=...)"
        ) from None


def _train_locked(
    cfg, output_dir: Path, overrides, tracker, parent_run_id, p, generator, skip_finished=False, outcome=None
) -> dict:
    """``run_train`` from the checkpoint to the report, with the folder's lock held: the recipe."""
    chash = config_hash(cfg)
    resume = _resume_state(cfg, output_dir)  # a requeued or resumed job continues
    stopped = _stopped_elsewhere(cfg, output_dir, tracker) if resume is None and skip_finished else None
    if stopped is not None:  # a sweep run again: its job continues the run stopped last time (run.resume)
        resume = stopped.state
    run = TrackedRun(output_dir, tracker, cfg.tracking.get("run_name") or run_name_for(cfg))
    tags = _tags(cfg, p, overrides, output_dir, chash, resume, stopped.run_id if stopped is not None else None)
    with run.started(cfg, tags, parent_run_id=parent_run_id, table=p.table, fingerprint=p.splits.fingerprint):
        if stopped is not None:
            stopped.take_over(output_dir, tracker)
            if outcome is not None:
                outcome["resumed"] = f"run {stopped.run_id[:8]} at step {stopped.step}"
        history = RunHistory(tracker, resume)
        evaluate = evaluator(p.method, p.data, p.splits.y_std)
        info = curve_info(cfg, p.splits.task, p.splits.y_std, lr=_stage_lrs(p))
        notes = CheckpointNotes(output_dir, tracker)
        checkpoint = _checkpointer(cfg, output_dir, p, history, generator, chash, resume, notes)
        log_protocol(output_dir, p.settings, p.method.stages)  # gpdlm.log: the protocol, then each stage's end
        with run.interruptible(history.curve, info), warnings_to_log(output_dir):  # a kill: a self-explaining folder
            fit = _fit(cfg, p, history, evaluate, generator, checkpoint, RecordFit(output_dir, tracker, p.settings))
        if p.method.finalize:
            p.method.finalize(p.data.x_train, p.data.y_train)
        metrics = final_metrics(p, fit, evaluate())
        run.save_metrics(metrics)  # 2. results to disk first (atomically), then to MLflow
        history.close_curves(metrics, p.method, fit.iterations)
        watch_monitors(history, p.method, output_dir, tracker)
        _save_results(run, cfg, p, history, metrics, fit.iterations, info)
    if checkpoint is not None:  # the run is FINISHED in MLflow: only now does the checkpoint go
        checkpoint.remove()
    run.report(metrics, note="; ".join(notes.notes))
    return metrics


def _resume_state(cfg, output_dir: Path) -> dict | None:
    """The folder's checkpoint when it belongs to this configuration (another's is started afresh)."""
    from ..training.checkpoint import FILE, read_checkpoint

    state = read_checkpoint(output_dir / FILE)
    return state if state is not None and state.get("config_hash") in config_hashes(cfg) else None


def _stopped_elsewhere(cfg, output_dir: Path, tracker):
    """The stopped run of this configuration a sweep run again continues (``run.resume.find_stopped``);
    None for a batched sweep's job (``sweep.batched`` trains without checkpoints)."""
    if cfg.sweep.get("batched", False):
        return None
    from .resume import find_stopped

    return find_stopped(tracker, config_hashes(cfg), output_dir)


def _tags(
    cfg, p, overrides, output_dir: Path, chash: str, resume: dict | None, resumed_from: str | None = None
) -> dict:
    """The run's tags: every gpdlm run's (``run_tags``), the method's, and what the family declares for
    analysis (the metric ``gpdlm select`` picks beta by, the reference beta: ``analysis.declarations``)."""
    from ..methods import declaration_tags

    if resume is not None and resumed_from is None:
        resumed_from = str(resume.get("run_id"))
    extra = {"gpdlm.resumed_from": resumed_from} if resumed_from is not None else {}
    extra.update(declaration_tags(str(cfg.model.name)))
    return run_tags(
        "train",
        overrides=overrides,
        output_dir=output_dir,
        device=p.device,
        fingerprint=p.splits.fingerprint,
        chash=chash,
        **p.method.tags,
        **extra,
    )


def _stage_lrs(p) -> list:
    """The learning rates of the stages (families may set their own), for the learning curve's caption."""
    return list(dict.fromkeys(s.overrides.get("lr", p.settings.lr) for s in p.method.stages))


def _link_stopped_group_run(cfg, tracker) -> None:
    """``gpdlm.resumed_from`` on this job's run when its configuration's run was stopped while it trained
    the batched group this job continued (``run.resume.link_batched_continuation``)."""
    from .resume import link_batched_continuation

    stopped = link_batched_continuation(tracker, config_hashes(cfg))
    if stopped is not None:
        tracker.set_tags({"gpdlm.resumed_from": stopped})


def _estimator_generator(p):
    return p.method.estimator.random.generator(p.device) if hasattr(p.method.estimator, "random") else None


def _checkpointer(cfg, output_dir: Path, p, history, generator, chash, resume, notes):
    """The run's ``Checkpointer`` (None with ``trainer.checkpoint_every=0``)."""
    from ..training.checkpoint import FILE, Checkpointer

    every = int(cfg.trainer.get("checkpoint_every", 5))
    if every <= 0:
        return None
    state = RunState(p.method.modules, [generator, _estimator_generator(p)], history, chash, history.tracker)
    minutes = float(cfg.trainer.get("checkpoint_minutes", 10.0))
    return Checkpointer(
        output_dir / FILE, every, state, state=resume, on_failure=notes.checkpoint_failed, minutes=minutes
    )


def _fit(cfg, p, history, evaluate, generator, checkpoint, record):
    """Train the method's stages (or take this job's result from a batched group: ``run.batched``)."""
    if cfg.sweep.get("batched", False):  # a member of a batch trained by the first job of its shape
        from ..sweep.batched import batched_member

        batched = batched_member(cfg, evaluator, history.tracker, stage_cache=lambda c: reuse_for(c)[0])
        if batched is not None:
            history.tracker.set_tags({"gpdlm.batched": batched.tag})
            if batched.note:  # continued from its checkpoints, or trained separately and why: in the store too
                history.tracker.set_tags({BATCHED_NOTE: batched.note})
                append_log(record.output_dir, batched.note, level="INFO")
            if batched.continued:  # the run of this job stopped while it trained the group: linked both ways
                _link_stopped_group_run(cfg, history.tracker)
        if batched is not None and batched.fit is not None:
            from ..training.reuse import loadmodule_state

            loadmodule_state(p.method.modules, batched.state)
            if batched.restore is not None:  # e.g. the RKHS family's hook states (MINIMAX's mu)
                batched.restore(p.method)
            history.log_steps(batched.steps)
            record.on_end(None, batched.fit)
            return batched.fit
    cache, warm = reuse_for(cfg)
    return run_stages(
        p.method.stages,
        p.data.x_train,
        p.data.y_train,
        p.settings,
        generator=generator,
        evaluate=evaluate,
        log_steps=history.log_steps,
        modules=p.method.modules,
        cache=cache,
        warm=warm,
        generators=[_estimator_generator(p)],
        checkpoint=checkpoint,
        callbacks=[record],
    )


def final_metrics(p, fit, evaluation: dict) -> dict:
    """The run's metrics: the final evaluation, the fit's (time, iterations, losses, convergence), the
    process's peak memory, the estimator's statistics and the family's diagnostics."""
    settings, method = p.settings, p.method
    metrics = dict(evaluation)
    metrics.update(
        {
            "train_seconds": fit.train_seconds,
            "iter_ms": fit.iter_ms,
            "iterations": fit.iterations,
            # the training objective (per datum) at the first step and at the last step of the last stage
            **({"first_loss": fit.losses[0], "final_loss": fit.losses[-1]} if fit.losses else {}),
            "converged": int(fit.converged),
            "n_train": p.splits.n_train,
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
    return metrics


def watch_monitors(history, method, output_dir: Path, tracker) -> None:
    """A watched objective that ended below its best (``run.watch``): a warning and a tag, results unchanged."""
    from .watch import falls, message

    for name in method.watch:
        found = falls(history.steps.get(name, []), higher_is_better=name in method.higher_is_better)
        if found is not None:
            note = message(name, found)
            print(f"gpdlm: warning: {note}", file=sys.stderr)
            append_log(output_dir, note, level="WARNING")
            tracker.set_tags({f"gpdlm.warning.{name}": f"falls {found['best']:.4g} -> {found['last']:.4g}"})


def _save_results(run, cfg, p, history, metrics: dict, step: int, info: dict) -> None:
    """The learning curve, the metrics to MLflow, the hyperparameters, the saved model (with its SHA-256
    as a tag) and the MLflow model; then the artifacts (``TrackedRun.close``)."""
    from .hyperparameters import FILE as HYPERPARAMETERS_FILE
    from .hyperparameters import save_hyperparameters
    from .mlflow_model import write_mlflow_model
    from .saved_model import MODEL_FILE, save_model

    run.save("learning_curve.png", lambda path: plot_learning_curve(history.dict, path, title=run.run_name, info=info))
    run.log_metrics(metrics, step=step)
    save_hyperparameters(run, p.method)  # the learned values, constrained: hyperparameters.json and hp.* metrics
    digest = []
    names = p.data.target_names or []
    if run.save(MODEL_FILE, lambda path: digest.append(save_model(path, cfg, p.method, p.splits, names))):
        run.tracker.set_tags({"gpdlm.model_sha256": digest[0]})
    mlflow_model = write_mlflow_model(run, p.method, p.splits)  # model/: the pyfunc MLflow Model (runs:/<id>/model)
    files = ("config.yaml", "metrics.json", "learning_curve.png", HYPERPARAMETERS_FILE, MODEL_FILE, *mlflow_model)
    run.close(files, metrics)


class RunHistory:
    """The run's learning curves: every step metric logged (``log_steps``, also to the tracker), those of
    the interrupted segments of a resumed run first; ``dict`` is what the plots and partial results read."""

    def __init__(self, tracker, resume: dict | None = None):
        self.tracker = tracker
        self.dict: dict = {"loss": [], "steps": {}}
        if resume is not None:  # the learning curves of the interrupted segments, in the new run too
            self.dict["steps"] = {k: [(int(s), float(v)) for s, v in pts] for k, pts in resume["history"].items()}
            tracker.log_steps(self.dict["steps"])

    @property
    def steps(self) -> dict:
        return self.dict["steps"]

    def log_steps(self, series: dict) -> None:
        for k, pts in series.items():
            self.steps.setdefault(k, []).extend(pts)
        self.tracker.log_steps(series)

    def curve(self) -> dict:
        """The curves so far (a kill's partial results)."""
        self.dict["loss"] = [v for _, v in self.steps.get("train_loss", [])]
        return self.dict

    def close_curves(self, metrics: dict, method, step: int) -> None:
        """The final evaluation closes the learning curves (validation, test and the family's monitors)."""
        for k, v in metrics.items():
            if k.startswith(("val_", "test_")) or k in method.monitors:
                self.steps.setdefault(k, []).append((step, v))


class RunState:
    """What a checkpoint holds besides the loop's state: the modules, the random generators, the learning
    curves so far, the config hash and the MLflow run (where ``gpdlm resume`` logs)."""

    def __init__(self, modules, generators, history: RunHistory, chash: str, tracker):
        self.modules, self.generators, self.history, self.chash, self.tracker = (
            modules,
            generators,
            history,
            chash,
            tracker,
        )

    def __call__(self) -> dict:
        return {
            "modules_list": self.modules,
            "generator_list": self.generators,
            "history": {k: [[s, v] for s, v in pts] for k, pts in self.history.steps.items()},
            "config_hash": self.chash,
            "run_id": str(getattr(self.tracker, "run_id", "") or ""),
            "tracking_uri": str(getattr(self.tracker, "uri", "") or ""),
        }


class CheckpointNotes:
    """Once per run: a checkpoint could not be written (a full disk); training goes on, and the log, a tag
    and the run's report line say so (``notes``)."""

    def __init__(self, output_dir: Path, tracker):
        self.output_dir, self.tracker, self.notes = output_dir, tracker, []

    def checkpoint_failed(self, error: OSError, iteration) -> None:
        since = "no checkpoint written" if iteration is None else f"checkpoint stays at iteration {iteration}"
        why = getattr(error, "strerror", None) or type(error).__name__
        note = f"checkpoint not written ({why}); {since}: a stop now costs the iterations since"
        self.notes.append(note)
        print(f"gpdlm: warning: {note}", file=sys.stderr, flush=True)
        append_log(self.output_dir, note, level="WARNING")
        try:
            self.tracker.set_tags({"gpdlm.checkpoint_failed": note})
        except Exception:  # the store may be as full as the disk: the log and the console have it
            pass


class RecordFit(Callback):
    """At the end of training: how each stage was trained (gpdlm.log), the run's training tags, and the
    fast protocol's L-BFGS budget note when its budget ended a stage before its convergence tests held."""

    def __init__(self, output_dir: Path, tracker, settings):
        self.output_dir, self.tracker, self.settings = output_dir, tracker, settings

    def on_end(self, loop, fit) -> None:
        log_fit(self.output_dir, fit)
        tags = {}
        if fit.reused:
            tags["gpdlm.reused_stage"] = ",".join(fit.reused)
        if fit.warm_started_from is not None:
            tags["gpdlm.warm_start_from"] = f"beta={fit.warm_started_from:g}"
        for k, v in tags.items():
            self.tracker.set_tags({k: v})
        self.tracker.set_tags(
            {
                "gpdlm.stop_rule": ",".join(fit.stop_rules) or "none",
                "gpdlm.protocol": self.settings.protocol,
                "gpdlm.optimizers": ",".join(fit.optimizers) or "none",
                "gpdlm.keep_best": self.settings.keep_best or "none",
            }
        )
        if fit.lbfgs_budget_hit:
            self.budget_note(fit)

    def budget_note(self, fit) -> None:
        grad = "" if fit.grad_max_abs is None else f", largest gradient component {fit.grad_max_abs:.2g} per datum"
        note = (
            f"trainer=fast: L-BFGS stage {', '.join(fit.lbfgs_budget_hit)} stopped at its budget "
            f"(trainer.fast_max_iters) before its convergence tests held{grad}; trainer=paper can end lower "
            "on such jobs (docs/training.md, 'Fast protocol')"
        )
        print(f"gpdlm: {note}", file=sys.stderr)
        append_log(self.output_dir, note, level="WARNING")
        self.tracker.set_tags({"gpdlm.lbfgs_budget_hit": ",".join(fit.lbfgs_budget_hit)})


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


def evaluator(method, data, y_std: float | np.ndarray):
    """The run's evaluation: predictive metrics on validation and test (the family's own
    ``evaluate`` if it has one) and the family's monitors. ``y_std`` puts the metrics in target units:
    ``DataSplits.y_std``, a float for one output, one sd per output (an array) for a multi-output run --
    only the families declaring ``MULTI_OUTPUT`` get those, and their own ``evaluate`` scales each output
    by its sd (``metrics.simulation.scored``)."""
    from ..metrics.simulation import target_sds

    def predictive(x, y, prefix):
        if method.evaluate is not None:
            return method.evaluate(x, y, prefix=prefix, y_std=y_std)
        one = target_sds(y_std, 1)[0]  # one output: a float (an array of several sds is refused)
        return predictive_metrics(method.model, method.likelihood, x, y, y_std=one, prefix=prefix)

    def evaluate():
        out = {**predictive(data.x_val, data.y_val, "val_"), **predictive(data.x_test, data.y_test, "test_")}
        for name, monitor in method.monitors.items():
            out[name] = float(monitor())
        return out

    return evaluate
