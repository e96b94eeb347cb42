"""``gpdlm eval`` and ``gpdlm predict``: saved models at work without retraining (issue 22).

    gpdlm eval (--experiment NAME | RUN ...) [--metric M ...] [--split val|test|all] [--tracking-uri URI]
    gpdlm predict RUN --input FILE.csv --output FILE.csv [--level 0.9] [--tracking-uri URI]

RUN is an MLflow run id, a unique prefix of one (as ``gpdlm runs`` prints it), a run name, or a
run's output folder (``commands.resolve``). ``eval`` rebuilds every run from its
``model.pt`` (``run.saved_model``), recomputes its validation/test metrics -- the training-time
ones come out bit for bit on CPU, new ones (e.g. calibration metrics added later) are back-filled
-- and logs them into the same MLflow run and its ``metrics.json``. ``predict`` applies a run's
model to new rows: a CSV with the training table's feature columns (by name; extra or missing
columns, text or non-finite cells are refused), standardised with the run's own statistics; it
writes the predictive mean, variance and central interval in the target's units (regression),
P(y = 1) (classification), or the mean count and its central interval (counts).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..files import write_atomic
from ..analysis.records import AnalysisError, split_list
from ..analysis.store import get_experiment, is_training_run, open_store, search_all
from ._cli import make_parser, run_cli

EPILOG_EVAL = """examples:
  gpdlm eval --experiment regression_logloss_pol              # every FINISHED run of the experiment
  gpdlm eval 3f2a... 9c1b... --metric test_crps test_coverage_90 # two runs, two metrics
"""
EPILOG_PREDICT = """examples:
  gpdlm predict outputs/2026-11-25/10-00-00 --input new_rows.csv --output predictions.csv
  gpdlm predict dlm_joint-concrete-b1-s0 --input new_rows.csv --output out.csv --level 0.95
"""


# ----- finding runs ------------------------------------------------------------------------------
def run_folder(ref: str, uri: str | None) -> tuple[Path, str | None]:
    """(output folder, MLflow run id or None) of a run given by folder, run id, unique id prefix or
    run name (``commands.resolve``: ambiguous references are refused with the candidates)."""
    from .resolve import resolve_run

    return resolve_run(ref, uri)


# ----- gpdlm eval --------------------------------------------------------------------------------
def evaluate_folder(folder: Path, split: str = "all", metrics: list[str] | None = None) -> dict[str, float]:
    """The run's predictive metrics recomputed from its saved model."""
    from ..run.saved_model import load_run
    from ..run.train import evaluator

    run = load_run(folder)
    values = evaluator(run.method, run.data, run.splits.y_std)()
    prefixes = {"val": ("val_",), "test": ("test_",), "all": ("val_", "test_")}[split]
    values = {k: v for k, v in values.items() if k.startswith(prefixes)}
    if metrics:
        unknown = [m for m in metrics if m not in values]
        if unknown:
            raise AnalysisError(f"--metric {unknown[0]} is not a metric of this run's model; it has: "
                                  f"{', '.join(sorted(values))}")
        values = {k: values[k] for k in metrics}
    return values


def eval_main(argv: list[str]) -> int:
    p = make_parser("gpdlm eval", "recompute metrics from saved models and back-fill them into their runs")
    p.epilog = EPILOG_EVAL
    p.add_argument("runs", nargs="*", help="run ids, run names or output folders (default: --experiment's runs)")
    p.add_argument("--experiment", default=None, help="every FINISHED training run of this MLflow experiment")
    p.add_argument("--metric", nargs="+", default=None, help="only these metrics (default: every val_/test_ metric)")
    p.add_argument("--split", choices=("val", "test", "all"), default="all")
    p.add_argument("--tracking-uri", default=None, metavar="URI")
    a = p.parse_args(argv)
    metrics = split_list(a.metric)
    if bool(a.runs) == bool(a.experiment):
        raise AnalysisError("gpdlm eval: give run ids/names/folders or --experiment NAME (one of the two)")
    targets: list[tuple[Path, str | None]] = []
    if a.experiment:
        client, uri = open_store(a.tracking_uri)
        exp = get_experiment(client, a.experiment, uri)
        for run in search_all(client, exp.experiment_id):
            if is_training_run(run):
                targets.append((Path(run.data.tags.get("gpdlm.output_dir", "")), run.info.run_id))
        if not targets:
            raise AnalysisError(f"experiment '{a.experiment}' has no FINISHED training run")
    else:
        targets = [run_folder(ref, a.tracking_uri) for ref in a.runs]
    results = [(folder, rid, evaluate_folder(folder, a.split, metrics)) for folder, rid in targets]  # all before writing
    client = open_store(a.tracking_uri)[0] if any(rid for _, rid, _ in results) else None
    changed = 0
    for folder, rid, values in results:
        old = json.loads((folder / "metrics.json").read_text()) if (folder / "metrics.json").exists() else {}
        differs = {k: (old[k], v) for k, v in values.items() if k in old and not _same(old[k], v)}
        added = sorted(k for k in values if k not in old)
        write_atomic(folder / "metrics.json", json.dumps({**old, **values}, indent=2, sort_keys=True))
        if client is not None and rid:
            from mlflow.entities import Metric

            import time

            now = int(time.time() * 1000)
            client.log_batch(rid, metrics=[Metric(k, float(v), now, 0) for k, v in values.items()])
        changed += bool(added or differs)
        note = f"{len(values) - len(added) - len(differs)} reproduced"
        if added:
            note += f", added {', '.join(added)}"
        if differs:
            note += ", CHANGED " + ", ".join(f"{k} {o:.6g} -> {n:.6g}" for k, (o, n) in differs.items())
        print(f"gpdlm eval: {rid or folder}: {note}")
    return 0


def _same(a, b) -> bool:
    try:
        return float(a) == float(b) or (math.isnan(float(a)) and math.isnan(float(b)))
    except (TypeError, ValueError):
        return a == b


# ----- gpdlm predict -----------------------------------------------------------------------------
def _read_csv(path: Path):
    """The --input CSV as a DataFrame; a missing or unreadable file is a one-line error."""
    import pandas as pd

    if not path.is_file():
        raise AnalysisError(f"--input {path} does not exist")
    try:
        return pd.read_csv(path)
    except Exception as e:
        raise AnalysisError(f"--input {path} is not a readable CSV ({type(e).__name__})") from None


def read_inputs(path: Path, feature_names: list[str]):
    """The CSV's feature columns in training order as a float array; one-line errors for bad files."""
    import numpy as np
    import pandas as pd

    df = _read_csv(path)
    missing = [c for c in feature_names if c not in df.columns]
    extra = [c for c in df.columns if c not in feature_names]
    if missing or extra:
        raise AnalysisError(f"--input {path}: the model takes the {len(feature_names)} columns "
                              f"{', '.join(feature_names)}; " + (f"missing {', '.join(missing)}" if missing else "")
                              + ("; " if missing and extra else "") + (f"unexpected {', '.join(map(str, extra))}" if extra else ""))
    if len(df) == 0:
        raise AnalysisError(f"--input {path} has no rows")
    for c in feature_names:
        values = pd.to_numeric(df[c], errors="coerce")
        bad = values.isna() | ~np.isfinite(values.fillna(0).to_numpy(dtype=float))
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise AnalysisError(f"--input {path}: column '{c}' row {row + 2} holds {df[c].iloc[row]!r}, not a finite number")
    return df[feature_names].to_numpy(dtype=float)


def predict_main(argv: list[str]) -> int:
    from ..run.saved_model import load_run

    p = make_parser("gpdlm predict", "apply a run's saved model to new rows")
    p.epilog = EPILOG_PREDICT
    p.add_argument("run", help="run id, run name or output folder")
    p.add_argument("--input", required=True, help="CSV with the training table's feature columns")
    p.add_argument("--output", required=True, help="CSV to write")
    p.add_argument("--level", type=float, default=0.9, help="central interval probability (default 0.9)")
    p.add_argument("--tracking-uri", default=None, metavar="URI")
    a = p.parse_args(argv)
    if not 0 < a.level < 1:
        raise AnalysisError(f"--level must be in (0, 1); got {a.level}")
    folder, _ = run_folder(a.run, a.tracking_uri)
    run = load_run(folder)
    meta, method = run.meta, run.method
    if str(run.table.task) == "sequence" and method.predict is not None:
        return predict_series(run, Path(a.input), Path(a.output), a.level)
    if str(run.table.task) == "sequence" or method.evaluate is not None:
        raise AnalysisError(f"model={run.cfg.model.name} predicts in its own way (the gamma family, "
                              f"sq_dlm's completion); gpdlm predict takes the other models for now "
                              f"(gpdlm eval recomputes its metrics)")
    X = read_inputs(Path(a.input), meta["feature_names"])
    import pandas as pd

    from ..run.serving import predict_rows

    frame = pd.DataFrame(predict_rows(run, X, a.level))  # the MLflow Model's predict too (run.pyfunc)
    frame.to_csv(a.output, index=False)
    print(f"gpdlm predict: {len(frame)} rows -> {a.output} ({', '.join(frame.columns)}; model={run.cfg.model.name})")
    return 0


def series_layout(cfg, feature_names: list[str], target_names: list[str]):
    """(inputs, targets, past, lag, lag_step, stride, mode) of a run's windows, read from its window
    columns ``col[t-k]`` and its dataset options; a one-line error when the columns are not the
    windows ``data.sequences.window_names`` makes of one series with these options."""
    import re

    from ..data.sequences import window_names

    taps: dict[str, list[int]] = {}
    for name in feature_names:
        m = re.fullmatch(r"(?P<c>.+)\[t-(?P<k>\d+)\]", str(name))
        if m is None:
            raise AnalysisError(f"the run's feature {name!r} is not a window tap 'channel[t-k]'")
        taps.setdefault(m["c"], []).append(int(m["k"]))
    inputs = [c for c, ks in taps.items() if 0 in ks]
    past = [c for c in taps if c not in inputs and c not in target_names]
    has_targets = any(t in taps for t in target_names)
    mode = str(cfg.dataset.get("mode") or ("autoregression" if has_targets else "regression"))
    lag, lag_step, stride = (int(cfg.dataset.get(k) or 1) for k in ("lag", "lag_step", "stride"))
    names = window_names(inputs, target_names, lag, "regression" if not has_targets else mode, past_names=past,
                         lag_step=lag_step)
    if names != [str(n) for n in feature_names]:
        raise AnalysisError(f"the windows of dataset={cfg.dataset.name} are not those of one series with lag={lag}, "
                              f"lag_step={lag_step}: gpdlm predict cannot rebuild them from a CSV of the series")
    return inputs, list(target_names), past, lag, lag_step, stride, mode


def read_series(path: Path, required: list[str], optional: list[str], *, gaps_after: dict[str, int] | None = None):
    """The CSV's columns by name as a DataFrame of floats, in time order (the file's row order).
    ``required`` must be there, ``optional`` may be; any other column is an error. A column of
    ``gaps_after`` (name -> r) may hold empty cells from row r on (free simulation's outputs
    after the first L rows); every other cell must be a finite number."""
    import numpy as np
    import pandas as pd

    df = _read_csv(path)
    missing = [c for c in required if c not in df.columns]
    extra = [c for c in df.columns if c not in required and c not in optional]
    if missing or extra:
        takes = ", ".join(required) + (f" (and optionally {', '.join(optional)})" if optional else "")
        raise AnalysisError(f"--input {path}: the model reads a series with the columns {takes}; "
                              + (f"missing {', '.join(missing)}" if missing else "")
                              + ("; " if missing and extra else "") + (f"unexpected {', '.join(map(str, extra))}" if extra else ""))
    if len(df) == 0:
        raise AnalysisError(f"--input {path} has no rows")
    out = {}
    for c in [c for c in required + optional if c in df.columns]:
        values = pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=float)
        bad = ~np.isfinite(values)
        r = (gaps_after or {}).get(c)
        if r is not None:
            bad[r:] &= df[c].iloc[r:].notna().to_numpy()  # an empty cell is allowed there, text is not
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise AnalysisError(f"--input {path}: column '{c}' row {row + 2} holds {df[c].iloc[row]!r}, not a finite number")
        out[c] = values
    return pd.DataFrame(out)


def predict_series(run, inp: Path, output: Path, level: float) -> int:
    """``gpdlm predict`` for the recurrent family: the CSV holds the series (the run's input and
    output columns by name, in time order); the windows are built as the run built them
    (``data.sequences.make_windows`` with its lag, lag_step, stride and mode) and predicted as its
    evaluation predicts them (``Method.predict``): ``regression`` reads the inputs only;
    ``autoregression`` the outputs' true past values from the CSV; ``free_simulation`` the outputs of
    the first L rows only, then feeds back its own predictive means (later output cells may be
    empty). One row per time step t with a full window (t = L, L + stride, ...; ``t`` is the
    0-based row of the CSV): the predictive mean, variance (latent + noise) and central ``level``
    interval of every output in its own units."""
    import numpy as np
    import pandas as pd
    import torch

    from ..data.sequences import make_windows

    meta, method = run.meta, run.method
    inputs, targets, past, lag, lag_step, stride, mode = series_layout(run.cfg, meta["feature_names"], meta["target_names"])
    needs_outputs = mode != "regression"
    required = inputs + past + (targets if needs_outputs else [])
    optional = [] if needs_outputs else targets
    gaps = {t: lag for t in targets} if mode == "free_simulation" else None
    df = read_series(inp, required, optional, gaps_after=gaps)
    if len(df) <= lag:
        raise AnalysisError(f"--input {inp} has {len(df)} rows; a window of model={run.cfg.model.name} needs "
                              f"lag={lag} earlier rows, so the series must have more than {lag}")
    Y = df[targets].to_numpy(float) if all(t in df for t in targets) else np.zeros((len(df), len(targets)))
    if mode == "free_simulation":
        Y = np.where(np.isnan(Y), 0.0, Y)  # overwritten by the rollout before any window reads them
    X, _, t_idx = make_windows(df[inputs].to_numpy(float), Y, lag, "regression" if not needs_outputs else mode,
                               past=df[past].to_numpy(float) if past else None, lag_step=lag_step, stride=stride)
    x_mean, x_std = np.asarray(meta["x_mean"]), np.asarray(meta["x_std"])
    ref = run.data.x_train
    x = torch.as_tensor((X - x_mean) / x_std, dtype=ref.dtype, device=ref.device)
    with torch.no_grad():
        mu, var = method.predict(x)
    z = float(torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(0.5 + level / 2, dtype=torch.float64)))
    frame = {"t": t_idx}
    for k, name in enumerate(targets):
        noise = method.model.likelihoods[k].noise.detach().to(var.dtype).reshape(-1)[0]
        y_mean, y_std = float(meta["y_mean"][k]), float(meta["y_std"][k])
        m = (mu[:, k] * y_std + y_mean).cpu().numpy()
        s = ((var[:, k] + noise).sqrt() * y_std).cpu().numpy()
        pre = "" if len(targets) == 1 else f"{name}_"
        frame.update({pre + "mean": m, pre + "variance": s**2, pre + "lower": m - z * s, pre + "upper": m + z * s})
    out = pd.DataFrame(frame)
    out.to_csv(output, index=False)
    print(f"gpdlm predict: {len(out)} steps -> {output} ({mode}, lag={lag}; {', '.join(out.columns)}; "
          f"model={run.cfg.model.name})")
    return 0


# ----- gpdlm resume ------------------------------------------------------------------------------
def resume_main(argv: list[str]) -> int:
    """``gpdlm resume RUN``: continue a stopped run from its checkpoint in its own folder."""
    from omegaconf import OmegaConf

    from ..training.checkpoint import FILE, read_checkpoint
    from ..run.lifecycle import make_tracker
    from ..run.train import run_train

    p = make_parser("gpdlm resume", "continue a stopped run from its checkpoint (same folder, a new linked MLflow run)")
    p.add_argument("run", help="run id, run name or output folder of a KILLED (or FAILED) run")
    p.add_argument("--tracking-uri", default=None, metavar="URI")
    a = p.parse_args(argv)
    folder, _ = run_folder(a.run, a.tracking_uri)
    if read_checkpoint(folder / FILE) is None:
        raise AnalysisError(f"{folder} has no readable {FILE}: the run finished, was stopped before its first "
                              f"checkpoint, or ran with trainer.checkpoint_every=0; retrain it")
    if not (folder / "config.yaml").is_file():
        raise AnalysisError(f"{folder} has no config.yaml: not a gpdlm run folder")
    cfg = OmegaConf.load(folder / "config.yaml")
    if a.tracking_uri:
        cfg.tracking.uri = a.tracking_uri
    from ..build import configure_threads

    configure_threads(cfg.get("threads", "auto"))
    metrics = run_train(cfg, folder, overrides=["(resumed)"], tracker=make_tracker(cfg.tracking))
    return 0 if metrics is not None else 1


def resume_cli() -> int:
    return run_cli(resume_main)


def eval_cli() -> int:
    return run_cli(eval_main)


def predict_cli() -> int:
    return run_cli(predict_main)
