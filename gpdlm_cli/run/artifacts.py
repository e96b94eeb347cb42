"""What a run leaves on disk besides its results: the learning curve, the partial results of an
interrupted run, the line saying which result files could not be written, and no folder at all for
a rejected command.

* ``plot_learning_curve``: training objective per iteration and validation/test NLL at evaluation
  points (``learning_curve.png``, written atomically).
* ``write_partial_results``: ``metrics.json`` with ``"status": "KILLED"`` (or FAILED), the
  iteration reached and the last evaluation, the learning curve so far, and the reason in
  ``gpdlm.log`` -- so an interrupted run's folder says what happened.
* ``discard_rejected_output``: Hydra creates ``outputs/<date>/<time>/`` before gpdlm sees the
  config; a command rejected for bad input removes that folder again (it would look like a run).
"""

from __future__ import annotations

import json
import os
import re
import time
from contextlib import contextmanager
from pathlib import Path

from ..files import write_atomic
from .naming import HEADLINE, shown_path


# ----- result files ---------------------------------------------------------------------------------------
def unsaved_message(output_dir, unsaved: dict, metrics: dict, run_id: str | None) -> str:
    """One line for a run whose result files could not all be written: what was not saved and why,
    and where the results are instead (the MLflow run, or the headline metrics themselves)."""
    names = ", ".join(unsaved)
    first = next(iter(unsaved.values()))
    why = getattr(first, "strerror", None) or str(first)
    disk = "disk full: " if getattr(first, "errno", None) == 28 else ""
    where = (
        f"the final metrics are in MLflow run {run_id}"
        if run_id
        else "tracking is off, so the results are only here: "
        + ", ".join(f"{k} {metrics[k]:.6g}" for k in HEADLINE if isinstance(metrics.get(k), (int, float)))
    )
    return f"{disk}could not write {names} to {shown_path(output_dir)} ({why}); {where}"


# ----- the learning curve -------------------------------------------------------------------------------
def plot_learning_curve(history, path: Path, title: str, info: dict | None = None) -> None:
    """Training objective per iteration (top) and validation/test NLL at evaluation points.
    ``info`` (``naming.curve_info``): a subtitle with the key settings and the axes' units."""
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
    fig.subplots_adjust(
        left=0.13, right=0.97, top=0.89, bottom=0.08, hspace=0.08
    )  # fixed: tight_layout costs ~0.1 s a run
    tmp = Path(path).with_name(f".{Path(path).name}.tmp-{os.getpid()}")  # atomic: never half a png
    try:
        fig.savefig(tmp, dpi=100, format="png")
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)


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


def log_protocol(output_dir, settings, stages) -> None:
    """The composed training protocol, as the run's first lines in gpdlm.log: the protocol, the
    trainer's settings and the stages in order."""
    stop = getattr(settings, "stop", None)
    append_log(
        output_dir,
        f"protocol {settings.protocol}: optimizer {settings.optimizer}, lr {settings.lr:g}, "
        f"max_iters {settings.max_iters}, batch {settings.batch_size or 'full'}, stop rule "
        f"{settings.stop_rule} (window {getattr(stop, 'window', '-')}, tol {getattr(stop, 'tol', '-')}), "
        f"eval_every {settings.eval_every}",
        level="INFO",
    )
    append_log(
        output_dir,
        "stages: "
        + ", ".join(
            s.name
            + (" (closed form)" if getattr(s, "solve", None) else "")
            + (" (beta-free, shareable)" if getattr(s, "shareable", False) else "")
            for s in stages
        ),
        level="INFO",
    )


def log_fit(output_dir, fit) -> None:
    """How each stage was trained and why it stopped (``FitResult.stage_log``), and the whole fit."""
    for line in getattr(fit, "stage_log", []):
        append_log(output_dir, line, level="INFO")
    append_log(
        output_dir,
        f"training done: {fit.iterations} iterations in {fit.train_seconds:.1f} s, "
        f"{'converged' if fit.converged else 'NOT converged (a stage stopped at its cap)'}",
        level="INFO" if fit.converged else "WARNING",
    )


@contextmanager
def warnings_to_log(output_dir):
    """Every Python warning raised inside (gpytorch's numerical warnings, ...) also goes to gpdlm.log;
    the console shows it as before."""
    import warnings

    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        append_log(
            output_dir, f"{category.__name__}: {str(message).strip()} ({Path(filename).name}:{lineno})", level="WARNING"
        )
        shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        if warnings.showwarning is show:
            warnings.showwarning = shown


def last_evaluation(curve: dict) -> tuple[int, dict]:
    """(iteration reached, last evaluation's metrics) from a learning-curve history
    ``{"loss": [...], "steps": {name: [(step, value), ...]}}``."""
    steps = (curve or {}).get("steps", {})
    iteration = max([len((curve or {}).get("loss", []))] + [int(s) for pts in steps.values() for s, _ in pts[-1:]])
    last = {k: float(pts[-1][1]) for k, pts in steps.items() if pts and k.startswith(("val_", "test_"))}
    return iteration, last


def write_partial_results(
    output_dir,
    status: str,
    reason: str,
    iteration: int,
    last_metrics: dict | None,
    curve: dict | None,
    title: str | None = None,
    info: dict | None = None,
) -> list[Path]:
    """Leave an interrupted (or failed) run's folder self-explaining; returns the files written.

    * ``metrics.json``: ``{"status": status, "reason": reason, "iterations": iteration,
      "evaluated_at": <iteration of the last evaluation>, **last_metrics}`` (written atomically);
    * ``learning_curve.png``: the curve so far (when it has any point);
    * ``gpdlm.log``: one line with the status, the iteration and the reason.

    Termination signals are held back while the files are written, so a second Ctrl-C or SIGTERM
    cannot leave half a file."""
    from ..signals import deferred_signals

    output_dir = Path(output_dir)
    written = []
    with deferred_signals():
        output_dir.mkdir(parents=True, exist_ok=True)
        last = {k: float(v) for k, v in (last_metrics or {}).items()}
        evaluated = [
            int(pts[-1][0])
            for k, pts in ((curve or {}).get("steps") or {}).items()
            if pts and k.startswith(("val_", "test_"))
        ]
        record = {
            "status": status,
            "reason": reason,
            "iterations": int(iteration),
            "evaluated_at": max(evaluated) if evaluated else None,
            **last,
        }
        path = write_atomic(output_dir / "metrics.json", json.dumps(record, indent=2, sort_keys=True, allow_nan=True))
        written.append(path)
        if curve and (curve.get("loss") or any(curve.get("steps", {}).values())):
            png = output_dir / "learning_curve.png"
            label = f"{status} at iteration {int(iteration)}"
            plot_learning_curve(
                curve, png, title=f"{title} ({label})" if title else label, **({"info": info} if info else {})
            )
            written.append(png)
        written.append(append_log(output_dir, f"run {status} at iteration {int(iteration)}: {reason}"))
    return written


# ----- rejected commands --------------------------------------------------------------------------------
HYDRA_FILES = (".hydra", "gpdlm.log", ".gpdlm.lock")  # the last: the folder lock of run.train (files.folder_lock)
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
    for logger in [logging.getLogger()] + [
        lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)
    ]:
        for h in list(logger.handlers):
            if getattr(h, "baseFilename", None) == target:
                logger.removeHandler(h)
                h.close()
