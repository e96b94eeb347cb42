"""What a run says and leaves behind: its name, its one-line report, the learning curve's labels,
the partial results of an interrupted run, and no folder at all for a rejected command.

* ``run_name_for``: ``<model>_<variant>-<dataset>-b<beta>[-<swept values>]-s<seed>``, e.g.
  ``dlm_fixed-concrete-b0.1-s0`` or, in a sweep over M, ``svgp-concrete-b1-M50-s0``: the variant,
  beta and every swept value distinguish runs that used to share a name.
* ``run_line``: the one line a finished run prints (name, headline metrics, output folder, MLflow
  run id and how to open it in the UI).
* ``write_partial_results``: ``metrics.json`` with ``"status": "KILLED"`` (or FAILED), the
  iteration reached and the last evaluation, the learning curve so far, and the reason in
  ``gpdlm.log`` -- so an interrupted run's folder says what happened.
* ``discard_rejected_output``: Hydra creates ``outputs/<date>/<time>/`` before gpdlm sees the
  config; a command rejected for bad input removes that folder again (it would look like a run).
"""

from __future__ import annotations

from ..files import write_atomic  # noqa: F401  (re-exported: the commands import it from here)

import json
import math
import os
import re
import time
from pathlib import Path

# ----- run names -------------------------------------------------------------------------------------
# keys the name always shows, and short prefixes for swept keys ("" = the value alone)
NAMED = ("model", "model.name", "model.variant", "dataset", "dataset.name", "objective.beta", "seed")
SHORT = {
    "model.num_inducing": "M", "trainer.lr": "lr", "dataset.split.train_size": "n", "estimator.num_samples": "L",
    "trainer.batch_size": "bs", "trainer.max_iters": "it", "kernel.ard": "ard", "dtype": "",
    "likelihood": "", "estimator": "", "kernel": "", "kernel.name": "", "likelihood.name": "", "estimator.name": "",
}


def _fmt(v) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _lookup(cfg, key: str):
    """The value of a dotted key or a config group (its ``name``); None when absent."""
    from omegaconf import OmegaConf

    node = OmegaConf.select(cfg, key, default=None)
    if node is not None and OmegaConf.is_config(node):
        return node.get("name")
    return node


def run_name_for(cfg, swept=()) -> str:
    """The default MLflow run name of a training run (see the module docstring)."""
    from ..methods import has_variants

    model = cfg.model.name
    variant = cfg.model.get("variant") if has_variants(model) else None
    parts = [f"{model}_{variant}" if variant else str(model), str(cfg.dataset.name), f"b{_fmt(float(cfg.objective.beta))}"]
    for key in swept:
        key = key.lstrip("+~")
        if key in NAMED or key.startswith("hydra") or key in ("experiment", "tracking", "progress", "threads"):
            continue
        value = _lookup(cfg, key)
        if value is None:
            continue
        prefix = SHORT.get(key, key.rsplit(".", 1)[-1])
        parts.append(f"{prefix}{_fmt(value)}")
    parts.append(f"s{cfg.seed}")
    return "-".join(parts)


# ----- the data as an MLflow dataset input ---------------------------------------------------------------
def dataset_input(table, fingerprint: str) -> dict:
    """Arguments of ``tracker.log_dataset`` for a loaded ``Table``: its name, gpdlm's fingerprint
    as the digest, where it comes from, its columns (inputs after dummy coding, then the target)."""
    try:
        from ..data import get_dataset_info

        source = get_dataset_info(table.name).source
    except Exception:  # a user table without a registry entry
        source = table.name
    target_type = "double" if table.task in ("regression", "sequence") else "long"
    columns = {str(c): "double" for c in table.feature_names}
    columns[str(table.target_name)] = target_type
    return {"name": table.name, "digest": fingerprint, "source": str(source), "columns": columns,
            "num_rows": int(table.n)}


# ----- the learning curve's labels ---------------------------------------------------------------------
def curve_info(cfg, task: str, y_std: float, lr=None) -> dict:
    """Subtitle (the key settings) and the units of both axes of ``learning_curve.png``. ``lr``: one
    learning rate, or the distinct ones of the run's stages in order."""
    bits = [f"beta={_fmt(float(cfg.objective.beta))}"]
    if cfg.model.get("num_inducing") is not None and cfg.model.name != "exact":
        bits.append(f"M={cfg.model.num_inducing}")
    if lr is not None:
        lrs = lr if isinstance(lr, (list, tuple)) else [lr]
        bits.append("lr=" + "/".join(_fmt(float(v)) for v in lrs))
    bs = cfg.trainer.get("batch_size")
    bits.append(f"batch={bs}" if bs else "full batch")
    from ..methods import has_variants

    variant = cfg.model.get("variant") if has_variants(cfg.model.name) else None
    model = f"{cfg.model.name} ({variant})" if variant else str(cfg.model.name)
    subtitle = f"{model} on {cfg.dataset.name}, {cfg.likelihood.name} likelihood: " + ", ".join(bits)
    import numpy as np

    standardised = task in ("regression", "sequence") and bool(np.any(np.asarray(y_std) != 1.0))  # one per output
    objective = "training objective\n(per datum" + (", standardised targets)" if standardised else ")")
    nll = "NLL (nats per point" + (", target units)" if standardised else ")")
    return {"subtitle": subtitle, "objective_label": objective, "nll_label": nll}


# ----- the one line at the end of a run -----------------------------------------------------------------
HEADLINE = ("test_nll", "test_rmse", "test_error", "test_mre", "val_nll",
            "cond_i_mean", "cond_ii_mean", "bias_rel", "ms_per_estimate")


def _shown_path(path: Path) -> str:
    path = Path(path).resolve()
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def ui_hint(uri: str | None, experiment_id: str | None, run_id: str | None) -> str:
    """How to open a run in the MLflow UI: the command and the run's address."""
    from ..tracking.tracker import default_tracking_uri

    if not uri or not run_id:
        return ""
    page = f"#/experiments/{experiment_id}/runs/{run_id}"
    if uri.startswith(("http://", "https://")):
        return f"{uri.rstrip('/')}/{page}"
    command = "gpdlm ui" if uri == default_tracking_uri() else f"gpdlm ui --tracking-uri {uri}"
    return f"`{command}`, then http://127.0.0.1:5000/{page}"


def run_line(run_name: str, metrics: dict, output_dir, run_id: str | None = None, uri: str | None = None,
             experiment_id: str | None = None) -> str:
    """``gpdlm: <name>: test_nll 3.12, test_rmse 5.71, 1000 it, 38 s -> <folder> | MLflow run <id>: <ui>``."""
    shown = [f"{k} {metrics[k]:.4g}" for k in HEADLINE if isinstance(metrics.get(k), (int, float))
             and math.isfinite(metrics[k])][:4]
    if "iterations" in metrics:
        shown.append(f"{int(metrics['iterations'])} it")
    if isinstance(metrics.get("train_seconds"), (int, float)):
        shown.append(f"{metrics['train_seconds']:.1f} s")
    line = f"gpdlm: {run_name}: {', '.join(shown)} -> {_shown_path(output_dir)}"
    if run_id:
        line += f" | MLflow run {run_id}"
        hint = ui_hint(uri, experiment_id, run_id)
        if hint:
            line += f", open with {hint}"
    return line


def report_run(run_name: str, metrics: dict, output_dir, tracker) -> str:
    """Print ``run_line`` for a run tracked by ``tracker`` (an MlflowTracker or NullTracker)."""
    line = run_line(run_name, metrics, output_dir, getattr(tracker, "run_id", None), getattr(tracker, "uri", None),
                    getattr(tracker, "experiment_id", None))
    print(line, flush=True)
    return line


# ----- result files ---------------------------------------------------------------------------------------
def unsaved_message(output_dir, unsaved: dict, metrics: dict, run_id: str | None) -> str:
    """One line for a run whose result files could not all be written: what was not saved and why,
    and where the results are instead (the MLflow run, or the headline metrics themselves)."""
    names = ", ".join(unsaved)
    first = next(iter(unsaved.values()))
    why = getattr(first, "strerror", None) or str(first)
    disk = "disk full: " if getattr(first, "errno", None) == 28 else ""
    where = (f"the final metrics are in MLflow run {run_id}" if run_id else
             "tracking is off, so the results are only here: " + ", ".join(
                 f"{k} {metrics[k]:.6g}" for k in HEADLINE if isinstance(metrics.get(k), (int, float))))
    return f"{disk}could not write {names} to {_shown_path(output_dir)} ({why}); {where}"


# ----- what an interrupted run leaves behind ------------------------------------------------------------
def append_log(output_dir, message: str, level: str = "ERROR") -> Path:
    """Append one line to the run's ``gpdlm.log`` in Hydra's log format."""
    path = Path(output_dir) / "gpdlm.log"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    try:
        with open(path, "a") as f:
            f.write(f"[{stamp}][gpdlm][{level}] - {message}\n")
    except OSError:  # a full disk or a vanished folder: the console has said it already
        pass
    return path


def last_evaluation(curve: dict) -> tuple[int, dict]:
    """(iteration reached, last evaluation's metrics) from a learning-curve history
    ``{"loss": [...], "steps": {name: [(step, value), ...]}}``."""
    steps = (curve or {}).get("steps", {})
    iteration = max([len((curve or {}).get("loss", []))] + [int(s) for pts in steps.values() for s, _ in pts[-1:]])
    last = {k: float(pts[-1][1]) for k, pts in steps.items() if pts and k.startswith(("val_", "test_"))}
    return iteration, last


def write_partial_results(output_dir, status: str, reason: str, iteration: int, last_metrics: dict | None,
                          curve: dict | None, title: str | None = None, info: dict | None = None) -> list[Path]:
    """Leave an interrupted (or failed) run's folder self-explaining; returns the files written.

    * ``metrics.json``: ``{"status": status, "reason": reason, "iterations": iteration,
      "evaluated_at": <iteration of the last evaluation>, **last_metrics}`` (written atomically);
    * ``learning_curve.png``: the curve so far (when it has any point);
    * ``gpdlm.log``: one line with the status, the iteration and the reason.

    Termination signals are held back while the files are written, so a second Ctrl-C or SIGTERM
    cannot leave half a file."""
    from ..tracking.signals import deferred_signals

    output_dir = Path(output_dir)
    written = []
    with deferred_signals():
        output_dir.mkdir(parents=True, exist_ok=True)
        last = {k: float(v) for k, v in (last_metrics or {}).items()}
        evaluated = [int(pts[-1][0]) for k, pts in ((curve or {}).get("steps") or {}).items()
                     if pts and k.startswith(("val_", "test_"))]
        record = {"status": status, "reason": reason, "iterations": int(iteration),
                  "evaluated_at": max(evaluated) if evaluated else None, **last}
        path = write_atomic(output_dir / "metrics.json", json.dumps(record, indent=2, sort_keys=True, allow_nan=True))
        written.append(path)
        if curve and (curve.get("loss") or any(curve.get("steps", {}).values())):
            from .train import _plot_learning_curve

            png = output_dir / "learning_curve.png"
            label = f"{status} at iteration {int(iteration)}"
            _plot_learning_curve(curve, png, title=f"{title} ({label})" if title else label,
                                 **({"info": info} if info else {}))
            written.append(png)
        written.append(append_log(output_dir, f"run {status} at iteration {int(iteration)}: {reason}"))
    return written


# ----- rejected commands --------------------------------------------------------------------------------
HYDRA_FILES = (".hydra", "gpdlm.log")
DATE_FOLDER = re.compile(r"\d{4}-\d{2}-\d{2}")  # outputs/<date>/<time>: conf/config.yaml's hydra.run.dir


def discard_rejected_output(output_dir, message: str) -> bool:
    """After bad input (nothing trained, no MLflow run): remove the run folder Hydra created, when
    it holds nothing but Hydra's own files, and its date folder when that is left empty. A folder
    with anything else in it is kept, with the error appended to its ``gpdlm.log``. True when
    removed."""
    import shutil

    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return False
    if any(p.name not in HYDRA_FILES for p in output_dir.iterdir()):
        append_log(output_dir, f"rejected: {message}")
        return False
    _close_log_handlers(output_dir / "gpdlm.log")
    shutil.rmtree(output_dir, ignore_errors=True)
    parent = output_dir.parent
    if DATE_FOLDER.fullmatch(parent.name):  # the default layout's date folder and outputs/, never a user's folder
        for folder in (parent, parent.parent) if parent.parent.name == "outputs" else (parent,):
            try:
                folder.rmdir()  # only when empty
            except OSError:
                break
    return not output_dir.exists()


def _close_log_handlers(path: Path) -> None:
    """Close (and detach) the logging handlers writing to ``path`` (Hydra's job log file)."""
    import logging

    target = str(path.resolve())
    for logger in [logging.getLogger()] + [lg for lg in logging.Logger.manager.loggerDict.values()
                                           if isinstance(lg, logging.Logger)]:
        for h in list(logger.handlers):
            if getattr(h, "baseFilename", None) == target:
                logger.removeHandler(h)
                h.close()
