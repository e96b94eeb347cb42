"""What a run is called and what it says: its name, the learning curve's labels, and the one line
a finished run prints.

* ``run_name_for``: ``<model>_<variant>-<dataset>-b<beta>[-<swept values>]-s<seed>``, e.g.
  ``dlm_fixed-concrete-b0.1-s0`` or, in a sweep over M, ``svgp-concrete-b1-M50-s0``: the variant,
  beta and every swept value distinguish runs that used to share a name.
* ``curve_info``: the subtitle and axis units of ``learning_curve.png``.
* ``run_line``/``report_run``: the one line a finished run prints (name, headline metrics, output
  folder, MLflow run id and how to open it in the UI).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

# ----- run names -------------------------------------------------------------------------------------
# keys the name always shows, and short prefixes for swept keys ("" = the value alone)
NAMED = ("model", "model.name", "model.variant", "dataset", "dataset.name", "objective.beta", "seed")
SHORT = {
    "model.num_inducing": "M",
    "trainer.lr": "lr",
    "dataset.split.train_size": "n",
    "estimator.num_samples": "L",
    "trainer.batch_size": "bs",
    "trainer.max_iters": "it",
    "kernel.ard": "ard",
    "dtype": "",
    "likelihood": "",
    "estimator": "",
    "kernel": "",
    "kernel.name": "",
    "likelihood.name": "",
    "estimator.name": "",
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
    model = cfg.model.name
    from ..methods import has_variants

    variant = cfg.model.get("variant") if has_variants(model) else None
    parts = [
        f"{model}_{variant}" if variant else str(model),
        str(cfg.dataset.name),
        f"b{_fmt(float(cfg.objective.beta))}",
    ]
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


# ----- the learning curve's labels ---------------------------------------------------------------------
def curve_info(cfg, task: str, y_std: float | np.ndarray, lr=None) -> dict:
    """Subtitle (the key settings) and the units of both axes of ``learning_curve.png``. ``y_std``: the
    target sd (``DataSplits.y_std``: one per output for several). ``lr``: one learning rate, or the
    distinct ones of the run's stages in order."""
    bits = [f"beta={_fmt(float(cfg.objective.beta))}"]
    from ..methods import declaration

    if cfg.model.get("num_inducing") is not None and declaration(str(cfg.model.name), "INDUCING_POINTS"):
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
HEADLINE = (
    "test_nll",
    "test_rmse",
    "test_error",
    "test_mre",
    "val_nll",
    "cond_i_mean",
    "cond_ii_mean",
    "bias_rel",
    "ms_per_estimate",
)


def shown_path(path: Path) -> str:
    path = Path(path).resolve()
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def ui_hint(uri: str | None, experiment_id: str | None, run_id: str | None) -> str:
    """How to open a run in the MLflow UI: the command and the run's address."""
    from ..tracking.tracker import default_tracking_uri, run_page

    if not uri or not run_id or experiment_id is None:  # a tracked run always has both ids
        return ""
    page = run_page(experiment_id, run_id)
    if uri.startswith(("http://", "https://")):
        return f"{uri.rstrip('/')}/{page}"
    command = "gpdlm ui" if uri == default_tracking_uri() else f"gpdlm ui --tracking-uri {uri}"
    return f"`{command}`, then http://127.0.0.1:5000/{page}"


def run_line(
    run_name: str,
    metrics: dict,
    output_dir,
    run_id: str | None = None,
    uri: str | None = None,
    experiment_id: str | None = None,
    note: str = "",
) -> str:
    """``gpdlm: <name>: test_nll 3.12, test_rmse 5.71, 1000 it, 38 s -> <folder> | MLflow run <id>: <ui>``
    (``note``: a warning the run must carry on its one line, after the folder)."""
    shown = [
        f"{k} {metrics[k]:.4g}"
        for k in HEADLINE
        if isinstance(metrics.get(k), (int, float)) and math.isfinite(metrics[k])
    ][:4]
    if "iterations" in metrics:
        shown.append(f"{int(metrics['iterations'])} it")
    if isinstance(metrics.get("train_seconds"), (int, float)):
        shown.append(f"{metrics['train_seconds']:.1f} s")
    line = f"gpdlm: {run_name}: {', '.join(shown)} -> {shown_path(output_dir)}"
    if note:
        line += f" (WARNING: {note})"
    if run_id:
        line += f" | MLflow run {run_id}"
        hint = ui_hint(uri, experiment_id, run_id)
        if hint:
            line += f", open with {hint}"
    return line


def report_run(run_name: str, metrics: dict, output_dir, tracker, note: str = "") -> str:
    """Print ``run_line`` for a run tracked by ``tracker`` (an MlflowTracker or NullTracker)."""
    line = run_line(
        run_name,
        metrics,
        output_dir,
        getattr(tracker, "run_id", None),
        getattr(tracker, "uri", None),
        getattr(tracker, "experiment_id", None),
        note=note,
    )
    print(line, flush=True)
    return line
