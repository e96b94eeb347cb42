"""``gpdlm train``: one experiment from a composed config to metrics in MLflow and metrics.json.

Order matters for the promises made to users: every check (config values, data, combinations)
runs before an MLflow run exists, so bad input never leaves a run behind; ``metrics.json`` is
written to the output folder before anything is sent to MLflow, so a tracking failure loses no
result; the tracker's context manager ends every run FINISHED, FAILED or KILLED.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import torch

from .. import build
from ..exceptions import ResultsNotSaved
from ..metrics import predictive_metrics
from ..tracking import MlflowTracker, NullTracker, flatten, resolve_tracking_uri
from ..tracking.liveness import process_tags
from ..tracking.sweep import config_hash
from ..training import run_stages
from ..tracking.signals import killed_reason
from .run_report import (curve_info, dataset_input, last_evaluation, report_run, run_name_for, unsaved_message,
                         write_atomic, write_partial_results)


def git_commit() -> str:
    """The commit of the gpdlm checkout this code runs from ('unknown' outside git)."""
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or "unknown"
    except Exception:
        return "unknown"


def run_tags(command: str, *, overrides, output_dir: Path, device, fingerprint: str, chash: str, **extra) -> dict:
    """The tags every gpdlm run carries (train, bias, ...)."""
    return {
        "gpdlm.git_commit": git_commit(),
        "gpdlm.overrides": " ".join(overrides or []),
        "gpdlm.output_dir": str(output_dir.resolve()),
        "gpdlm.device": str(device),
        "gpdlm.dataset_fingerprint": fingerprint,
        "gpdlm.command": command,
        "gpdlm.config_hash": chash,
        **process_tags(),  # host, PID, process start: `gpdlm runs --stale` finds orphaned runs
        **extra,
    }


def make_tracker(tcfg, base_dir=None):
    if not tcfg.enabled:
        return NullTracker()
    every = tcfg.get("system_metrics", 10.0)
    return MlflowTracker(resolve_tracking_uri(tcfg.uri, base_dir), str(tcfg.experiment),  # `experiment=2024` parses as int
                         system_metrics=float(every) if every else None)


def run_train(cfg, output_dir: str | os.PathLike, overrides: list[str] | None = None, tracker=None,
              parent_run_id: str | None = None, skip_finished: bool = False) -> dict | None:
    """Run one experiment; returns the final metrics (None if ``skip_finished`` found a FINISHED
    run with the same config hash). Raises GpdlmError on bad input."""
    from omegaconf import OmegaConf

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)

    # 1. everything that can fail on bad input, before a run exists
    build.validate_config(cfg)
    torch.manual_seed(cfg.seed)  # backstop for library-internal randomness; gpdlm's own is explicit
    table, splits, data = build.load_data(cfg)
    build.check_sizes(cfg, splits.n_train)
    method = build.build_method(cfg, data, splits.task)
    settings = build.trainer_settings(cfg, splits.n_train, splits.task, method=method, n_val=data.x_val.shape[0])
    device = data.x_train.device
    generator = torch.Generator().manual_seed(cfg.seed)  # batch orders drawn on the CPU: the same on every device
    if method.estimator is not None:
        method.estimator.seed(cfg.seed, device)

    tracker = tracker if tracker is not None else make_tracker(cfg.tracking)
    chash = config_hash(cfg)
    if skip_finished and tracker.has_finished_run("gpdlm.config_hash", chash):
        return None
    from ..training.checkpoint import FILE as CHECKPOINT_FILE
    from ..training.checkpoint import Checkpointer, read_checkpoint

    resume_state = read_checkpoint(output_dir / CHECKPOINT_FILE)  # a requeued or resumed job continues
    if resume_state is not None and resume_state.get("config_hash") != chash:
        resume_state = None  # another configuration's checkpoint: start afresh (and overwrite it)
    config = OmegaConf.to_container(cfg, resolve=True)
    extra_tags = {"gpdlm.resumed_from": str(resume_state.get("run_id"))} if resume_state is not None else {}
    tags = run_tags("train", overrides=overrides, output_dir=output_dir, device=device,
                    fingerprint=splits.fingerprint, chash=chash, **method.tags, **extra_tags)
    write_atomic(output_dir / "config.yaml", OmegaConf.to_yaml(cfg))
    run_name = cfg.tracking.get("run_name") or run_name_for(cfg)

    with tracker.run(run_name=run_name, params=flatten(config), tags=tags, parent_run_id=parent_run_id):
        tracker.log_dataset(**dataset_input(table, splits.fingerprint))
        evaluate = evaluator(method, data, splits.y_std)
        history = {"loss": [], "steps": {}}
        if resume_state is not None:  # the learning curves of the interrupted segments, in the new run too
            history["steps"] = {k: [(int(s), float(v)) for s, v in pts] for k, pts in resume_state["history"].items()}
            tracker.log_steps(history["steps"])

        def log_steps(series):
            for k, pts in series.items():
                history["steps"].setdefault(k, []).extend(pts)
            tracker.log_steps(series)

        stage_lrs = list(dict.fromkeys(s.overrides.get("lr", settings.lr) for s in method.stages))  # families' own lrs
        info = curve_info(cfg, splits.task, splits.y_std, lr=stage_lrs)
        cache, warm = reuse_for(cfg)
        est_gen = method.estimator.random.generator(device) if hasattr(method.estimator, "random") else None

        def run_state():
            return {"modules_list": method.modules, "generator_list": [generator, est_gen],
                    "history": {k: [[s, v] for s, v in pts] for k, pts in history["steps"].items()},
                    "config_hash": chash, "run_id": str(getattr(tracker, "run_id", "") or "")}

        checkpoint = Checkpointer(output_dir / CHECKPOINT_FILE, int(cfg.trainer.get("checkpoint_every", 5)), run_state,
                                  state=resume_state) if int(cfg.trainer.get("checkpoint_every", 5)) > 0 else None
        try:
            fit = run_stages(method.stages, data.x_train, data.y_train, settings, generator=generator,
                             evaluate=evaluate, log_steps=log_steps, modules=method.modules,
                             cache=cache, warm=warm, generators=[est_gen], checkpoint=checkpoint)
        except BaseException as e:  # a run stopped from outside leaves a self-explaining folder
            why = killed_reason(e)
            if why:
                history["loss"] = [v for _, v in history["steps"].get("train_loss", [])]
                files = write_partial_results(output_dir, "KILLED", why, *last_evaluation(history), history,
                                              title=run_name, info=info)
                for f in files[:2]:
                    tracker.log_artifact(f)
            raise
        history["loss"] = fit.losses
        if fit.reused:
            tracker.set_tags({"gpdlm.reused_stage": ",".join(fit.reused)})
        if fit.warm_started_from is not None:
            tracker.set_tags({"gpdlm.warm_start_from": f"beta={fit.warm_started_from:g}"})
        tracker.set_tags({"gpdlm.stop_rule": ",".join(fit.stop_rules) or "none",
                          "gpdlm.protocol": settings.protocol, "gpdlm.optimizers": ",".join(fit.optimizers) or "none",
                          "gpdlm.keep_best": settings.keep_best or "none"})
        if method.finalize:
            method.finalize(data.x_train, data.y_train)

        metrics = evaluate()
        metrics.update({
            "train_seconds": fit.train_seconds,
            "iter_ms": fit.iter_ms,
            "iterations": fit.iterations,
            # the training objective (per datum) at the first step and at the last step of the last stage
            **({"first_loss": fit.losses[0], "final_loss": fit.losses[-1]} if fit.losses else {}),
            "converged": int(fit.converged),
            "n_train": splits.n_train,
        })
        if settings.keep_best:
            metrics["best_iteration"] = fit.best_iteration if fit.best_iteration is not None else fit.iterations
        if method.estimator is not None:
            metrics.update(method.estimator.statistics())
        if method.diagnostics is not None:
            metrics.update(method.diagnostics())
        # 2. results to disk first (atomically), then to MLflow -- which gets the metrics even when
        # the disk is full; a file not written ends the run with one line saying what was saved
        unsaved = {}
        try:
            write_atomic(output_dir / "metrics.json", json.dumps(metrics, indent=2, sort_keys=True))
        except OSError as e:
            unsaved["metrics.json"] = e
        for k, v in metrics.items():  # the final evaluation closes the learning curves
            if k.startswith(("val_", "test_")) or k in method.monitors:
                history["steps"].setdefault(k, []).append((fit.iterations, v))
        curve = output_dir / "learning_curve.png"
        try:
            _plot_learning_curve(history, curve, title=run_name, info=info)
        except OSError as e:
            unsaved["learning_curve.png"] = e
        tracker.log_metrics(metrics, step=fit.iterations)
        from ..run.saved_model import MODEL_FILE, save_model

        try:
            save_model(output_dir / MODEL_FILE, cfg, method, splits, data.target_names or [])
        except OSError as e:
            unsaved[MODEL_FILE] = e
        if checkpoint is not None:
            checkpoint.remove()  # finished: the saved model is the result
        for f in ("config.yaml", "metrics.json", "learning_curve.png", MODEL_FILE):
            if f not in unsaved and (output_dir / f).exists():
                tracker.log_artifact(output_dir / f)
        if unsaved:
            raise ResultsNotSaved(unsaved_message(output_dir, unsaved, metrics, tracker.run_id))
    report_run(run_name, metrics, output_dir, tracker)
    return metrics


def reuse_key(cfg) -> str:
    """What determines every stage whose result does not depend on beta: the resolved config without
    ``objective.beta`` (and the bookkeeping keys ``config_hash`` drops), and the code that trains it."""
    import hashlib

    from omegaconf import OmegaConf

    from .. import __version__

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


def _plot_learning_curve(history, path: Path, title: str, info: dict | None = None) -> None:
    """Training objective per iteration (top) and validation/test NLL at evaluation points.
    ``info`` (run_report.curve_info): a subtitle with the key settings and the axes' units."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = history["steps"]
    fig, axes = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    axes[0].plot(range(1, len(history["loss"]) + 1), history["loss"], lw=1)
    info = info or {}
    axes[0].set_ylabel(info.get("objective_label", "training objective"))
    axes[0].set_title(f"{title}\n{info['subtitle']}" if info.get("subtitle") else title, fontsize=10)
    for key in ("val_nll", "test_nll"):
        pts = steps.get(key)
        if pts:
            axes[1].plot([s for s, _ in pts], [v for _, v in pts], marker="o", ms=3, label=key)
    axes[1].set_xlabel("iteration")
    axes[1].set_ylabel(info.get("nll_label", "NLL"))
    if axes[1].lines:
        axes[1].legend()
    fig.subplots_adjust(left=0.13, right=0.97, top=0.89, bottom=0.08, hspace=0.08)  # fixed: tight_layout costs ~0.1 s a run
    tmp = Path(path).with_name(f".{Path(path).name}.tmp-{os.getpid()}")  # atomic: never half a png
    try:
        fig.savefig(tmp, dpi=100, format="png")
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
