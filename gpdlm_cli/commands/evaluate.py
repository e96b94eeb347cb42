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
from typing import TYPE_CHECKING

from ..analysis.records import AnalysisError, split_list
from ..analysis.store import get_experiment, is_training_run, open_store, search_all
from ..files import write_atomic
from ._cli import make_parser, run_cli

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from ..data.splits import DataSplits
    from ..data.table import Table
    from ..methods.base import Method
    from ..run.saved_model import LoadedRun

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
def check_model_belongs(folder: Path, meta: dict, tags: dict | None = None) -> None:
    """One line unless the folder's ``model.pt`` is this run's: its config hash equals the run's
    (the MLflow tag when known, else the folder's ``config.yaml``) and its data fingerprint the run's tag."""
    from omegaconf import OmegaConf

    from ..tracking.identity import config_hash

    tags = tags or {}
    model_hash, run_hash = meta.get("config_hash"), tags.get("gpdlm.config_hash")
    if not (model_hash and run_hash):  # older files or no store: recompute both the same way now
        try:
            model_hash = config_hash(OmegaConf.create(meta["config"]))
            run_hash = config_hash(load_run_config(folder))
        except AnalysisError:
            raise
        except Exception:  # a config that no longer resolves: the fingerprint check below still runs
            model_hash = run_hash = None
    if model_hash and run_hash and model_hash != run_hash:
        raise AnalysisError(
            f"{folder}/model.pt is not this run's model: its config hash {model_hash} differs from "
            f"the run's {run_hash} (a model.pt copied from another run?); nothing was written"
        )
    fp = tags.get("gpdlm.dataset_fingerprint")
    if fp and meta.get("fingerprint") and fp != meta["fingerprint"]:
        raise AnalysisError(
            f"{folder}/model.pt was trained on other data (fingerprint {meta['fingerprint']}) than "
            f"the run ({fp}); nothing was written"
        )


def evaluate_folder(
    folder: Path, split: str = "all", metrics: list[str] | None = None, tags: dict | None = None
) -> dict[str, float]:
    """The run's predictive metrics recomputed from its saved model (checked to be the run's own:
    ``check_model_belongs``)."""
    from ..run.saved_model import load_run, read_model_file
    from ..run.train import evaluator

    check_model_belongs(folder, read_model_file(folder / "model.pt")[0], tags)
    run = load_run(folder)
    _, _, splits, _ = loaded_parts(run)
    values = evaluator(run.method, run.data, splits.y_std)()
    prefixes = {"val": ("val_",), "test": ("test_",), "all": ("val_", "test_")}[split]
    values = {k: v for k, v in values.items() if k.startswith(prefixes)}
    if metrics:
        unknown = [m for m in metrics if m not in values]
        if unknown:
            raise AnalysisError(
                f"--metric {unknown[0]} is not a metric of this run's model; it has: {', '.join(sorted(values))}"
            )
        values = {k: values[k] for k in metrics}
    return values


def loaded_parts(run: LoadedRun) -> tuple[DictConfig, Table, DataSplits, Method]:
    """(config, table, splits, method) of a run rebuilt by ``run.saved_model.load_run``, as their types."""
    from omegaconf import DictConfig

    from ..data.splits import DataSplits
    from ..data.table import Table
    from ..methods.base import Method

    cfg, table, splits, method = run.cfg, run.table, run.splits, run.method
    if not isinstance(cfg, DictConfig):
        raise TypeError(f"a rebuilt run's config is a DictConfig, not {type(cfg).__name__}")
    if not isinstance(table, Table):
        raise TypeError(f"a rebuilt run's table is a Table, not {type(table).__name__}")
    if not isinstance(splits, DataSplits):
        raise TypeError(f"a rebuilt run's splits are DataSplits, not {type(splits).__name__}")
    if not isinstance(method, Method):
        raise TypeError(f"a rebuilt run's method is a Method, not {type(method).__name__}")
    return cfg, table, splits, method


def eval_main(argv: list[str]) -> int:
    p = make_parser("gpdlm eval", "recompute metrics from saved models and back-fill them into their runs")
    p.epilog = EPILOG_EVAL
    p.add_argument("runs", nargs="*", help="run ids, run names or output folders (default: --experiment's runs)")
    p.add_argument("--experiment", default=None, help="every FINISHED training run of this MLflow experiment")
    p.add_argument("--metric", nargs="+", default=None, help="only these metrics (default: every val_/test_ metric)")
    p.add_argument("--split", choices=("val", "test", "all"), default="all")
    p.add_argument("--tracking-uri", default=None, metavar="URI")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="write recomputed values that differ from those saved (default: keep them, report, exit 1)",
    )
    a = p.parse_args(argv)
    metrics = split_list(a.metric)
    if bool(a.runs) == bool(a.experiment):
        raise AnalysisError("gpdlm eval: give run ids/names/folders or --experiment NAME (one of the two)")
    targets: list[tuple[Path, str | None]] = []
    run_tags: dict[str | None, dict] = {}
    if a.experiment:
        client, uri = open_store(a.tracking_uri)
        exp = get_experiment(client, a.experiment, uri)
        for run in search_all(client, exp.experiment_id):
            if is_training_run(run):
                targets.append((Path(run.data.tags.get("gpdlm.output_dir", "")), run.info.run_id))
                run_tags[run.info.run_id] = dict(run.data.tags)
        if not targets:
            raise AnalysisError(f"experiment '{a.experiment}' has no FINISHED training run")
    else:
        targets = [run_folder(ref, a.tracking_uri) for ref in a.runs]
    client = open_store(a.tracking_uri)[0] if any(rid for _, rid in targets) else None
    if client is not None:
        for _, rid in targets:
            if rid and rid not in run_tags:
                run_tags[rid] = dict(client.get_run(rid).data.tags)
    saved = {folder: read_saved_metrics(folder) for folder, _ in targets}  # a broken file: one line, before any work
    results = [
        (folder, rid, evaluate_folder(folder, a.split, metrics, run_tags.get(rid))) for folder, rid in targets
    ]  # all before writing
    kept = 0
    for folder, rid, values in results:
        old = saved[folder]
        differs = {k: (old[k], v) for k, v in values.items() if k in old and not _same(old[k], v)}
        added = sorted(k for k in values if k not in old)
        if differs and not a.overwrite:  # reproduced something else: the saved results stay as they are
            kept += 1
            print(
                f"gpdlm eval: {rid or folder}: DIFFERS "
                + ", ".join(f"{k} {_show(o)} -> {_show(n)}" for k, (o, n) in differs.items())
                + "; nothing written (the saved model does not reproduce the run's results: --overwrite writes them)"
            )
            continue
        write_atomic(folder / "metrics.json", json.dumps({**old, **values}, indent=2, sort_keys=True))
        if client is not None and rid:
            import time

            from mlflow.entities import Metric

            now = int(time.time() * 1000)
            client.log_batch(rid, metrics=[Metric(k, float(v), now, 0) for k, v in values.items()])
        note = f"{len(values) - len(added) - len(differs)} reproduced"
        if added:
            note += f", added {', '.join(added)}"
        if differs:
            note += ", OVERWRITTEN " + ", ".join(f"{k} {_show(o)} -> {_show(n)}" for k, (o, n) in differs.items())
        print(f"gpdlm eval: {rid or folder}: {note}")
    return 1 if kept else 0


def read_saved_metrics(folder: Path) -> dict:
    """The run's ``metrics.json`` ({} when there is none); one line when it is not a JSON object."""
    path = folder / "metrics.json"
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise AnalysisError(
            f"{path} is not readable JSON ({type(e).__name__}); move it aside to rebuild it from "
            f"the model (gpdlm eval writes a new one)"
        ) from None
    if not isinstance(data, dict):
        raise AnalysisError(
            f"{path} holds a JSON {type(data).__name__}, not the run's metrics; move it aside to "
            f"rebuild it from the model"
        )
    return data


def _show(v) -> str:
    """A saved or recomputed value for one line: numbers as %.6g, anything else cut to 40 characters."""
    try:
        return f"{float(v):.6g}"
    except (TypeError, ValueError):
        text = repr(v)
        return text if len(text) <= 40 else text[:37] + "..."


def _same(a, b) -> bool:
    try:
        return float(a) == float(b) or (math.isnan(float(a)) and math.isnan(float(b)))
    except (TypeError, ValueError):
        return a == b


# ----- gpdlm predict -----------------------------------------------------------------------------
ECHO_CHARS = 80  # the most of a bad cell (or of a parser's message) an error line repeats
CHUNK_ROWS = 50_000  # rows read at a time: a junk file fails at its first bad chunk, not after reading it all
HEADER_BYTES = 1 << 20  # a first line longer than this is no CSV header


def clip(value, limit: int = ECHO_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters (an error line never echoes a 40 MB cell)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _read_csv(path: Path, check=None):
    """The --input CSV as a DataFrame, read ``CHUNK_ROWS`` rows at a time; ``check(chunk, first_row)``
    (the 0-based data row of the chunk's first line) raises at the first bad row, so a huge junk file
    stops early. A missing file, a directory, an unreadable or header-less file is a one-line error."""
    import pandas as pd

    if path.is_dir():
        raise AnalysisError(f"--input {path} is a directory, not a CSV file")
    if not path.is_file():
        raise AnalysisError(f"--input {path} does not exist")
    try:
        with open(path, "rb") as f:
            head = f.readline(HEADER_BYTES)
    except OSError as e:
        raise AnalysisError(f"--input {path} cannot be read ({e.strerror or type(e).__name__})") from None
    if len(head) >= HEADER_BYTES and not head.endswith(b"\n"):
        raise AnalysisError(
            f"--input {path}: its first line is longer than {HEADER_BYTES >> 20} MiB: not a CSV with "
            f"a header row of column names"
        )
    chunks, first = [], 0
    try:
        with pd.read_csv(path, chunksize=CHUNK_ROWS) as reader:
            for chunk in reader:
                if check is not None:
                    check(chunk, first)
                chunks.append(chunk)
                first += len(chunk)
    except AnalysisError:
        raise
    except Exception as e:
        raise AnalysisError(
            f"--input {path} is not a readable CSV ({type(e).__name__}: "
            f"{clip(str(e).strip().splitlines()[0] if str(e).strip() else '')})"
        ) from None
    if not chunks:
        return pd.DataFrame()
    return pd.concat(chunks, ignore_index=True) if len(chunks) > 1 else chunks[0]


def _check_columns(path: Path, columns, required: list[str], allowed: list[str], takes: str) -> None:
    missing = [c for c in required if c not in columns]
    extra = [c for c in columns if c not in allowed]
    if missing or extra:
        raise AnalysisError(
            f"--input {path}: {takes}; "
            + (f"missing {', '.join(missing)}" if missing else "")
            + ("; " if missing and extra else "")
            + (
                f"unexpected {', '.join(clip(str(c), 40)[1:-1] for c in extra[:10])}"
                + (f" (+{len(extra) - 10} more)" if len(extra) > 10 else "")
                if extra
                else ""
            )
        )


def _first_bad(path: Path, chunk, column: str, bad, first_row: int):
    import numpy as np

    row = int(np.flatnonzero(bad)[0])
    raise AnalysisError(
        f"--input {path}: column '{column}' row {first_row + row + 2} holds {clip(chunk[column].iloc[row])}, "
        f"not a finite number"
    )


def read_inputs(path: Path, feature_names: list[str]):
    """The CSV's feature columns in training order as a float array; one-line errors for bad files."""
    import numpy as np
    import pandas as pd

    takes = f"the model takes the {len(feature_names)} columns {', '.join(feature_names)}"

    def check(chunk, first_row):
        _check_columns(path, chunk.columns, feature_names, feature_names, takes)
        for c in feature_names:
            values = pd.to_numeric(chunk[c], errors="coerce")
            bad = values.isna() | ~np.isfinite(values.fillna(0).to_numpy(dtype=float))
            if bad.any():
                _first_bad(path, chunk, c, bad.to_numpy(), first_row)

    df = _read_csv(path, check)
    if len(df) == 0:
        if len(df.columns):
            _check_columns(path, df.columns, feature_names, feature_names, takes)
        raise AnalysisError(f"--input {path} has no rows")
    return df[feature_names].to_numpy(dtype=float)


def predict_main(argv: list[str]) -> int:
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
    from ..run.saved_model import load_run  # torch: after the arguments (``--help`` answers at once)

    folder, _ = run_folder(a.run, a.tracking_uri)
    run = load_run(folder)
    cfg, table, _, method = loaded_parts(run)
    meta = run.meta
    if str(table.task) == "sequence" and method.predict is not None:
        return predict_series(run, Path(a.input), Path(a.output), a.level)
    if str(table.task) == "sequence" or method.evaluate is not None:
        raise AnalysisError(
            f"model={cfg.model.name} predicts in its own way (the gamma family, "
            f"sq_dlm's completion); gpdlm predict takes the other models for now "
            f"(gpdlm eval recomputes its metrics)"
        )
    X = read_inputs(Path(a.input), meta["feature_names"])
    import pandas as pd

    from ..run.serving import predict_rows

    frame = pd.DataFrame(predict_rows(run, X, a.level))  # the MLflow Model's predict too (run.pyfunc)
    frame.to_csv(a.output, index=False)
    print(f"gpdlm predict: {len(frame)} rows -> {a.output} ({', '.join(frame.columns)}; model={cfg.model.name})")
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
    names = window_names(
        inputs, target_names, lag, "regression" if not has_targets else mode, past_names=past, lag_step=lag_step
    )
    if names != [str(n) for n in feature_names]:
        raise AnalysisError(
            f"the windows of dataset={cfg.dataset.name} are not those of one series with lag={lag}, "
            f"lag_step={lag_step}: gpdlm predict cannot rebuild them from a CSV of the series"
        )
    return inputs, list(target_names), past, lag, lag_step, stride, mode


def read_series(path: Path, required: list[str], optional: list[str], *, gaps_after: dict[str, int] | None = None):
    """The CSV's columns by name as a DataFrame of floats, in time order (the file's row order).
    ``required`` must be there, ``optional`` may be; any other column is an error. A column of
    ``gaps_after`` (name -> r) may hold empty cells from row r on (free simulation's outputs
    after the first L rows); every other cell must be a finite number."""
    import numpy as np
    import pandas as pd

    takes = (
        "the model reads a series with the columns "
        + ", ".join(required)
        + (f" (and optionally {', '.join(optional)})" if optional else "")
    )

    def check(chunk, first_row):
        _check_columns(path, chunk.columns, required, required + optional, takes)
        for c in [c for c in required + optional if c in chunk.columns]:
            values = pd.to_numeric(chunk[c], errors="coerce").to_numpy(dtype=float)
            bad = ~np.isfinite(values)
            r = (gaps_after or {}).get(c)
            if r is not None:
                local = max(0, r - first_row)
                bad[local:] &= chunk[c].iloc[local:].notna().to_numpy()  # an empty cell is allowed there, text is not
            if bad.any():
                _first_bad(path, chunk, c, bad, first_row)

    df = _read_csv(path, check)
    if len(df) == 0:
        raise AnalysisError(f"--input {path} has no rows")
    out = {
        c: pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=float) for c in required + optional if c in df.columns
    }
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
    inputs, targets, past, lag, lag_step, stride, mode = series_layout(
        run.cfg, meta["feature_names"], meta["target_names"]
    )
    needs_outputs = mode != "regression"
    required = inputs + past + (targets if needs_outputs else [])
    optional = [] if needs_outputs else targets
    gaps = {t: lag for t in targets} if mode == "free_simulation" else None
    df = read_series(inp, required, optional, gaps_after=gaps)
    if len(df) <= lag:
        raise AnalysisError(
            f"--input {inp} has {len(df)} rows; a window of model={run.cfg.model.name} needs "
            f"lag={lag} earlier rows, so the series must have more than {lag}"
        )
    Y = df[targets].to_numpy(float) if all(t in df for t in targets) else np.zeros((len(df), len(targets)))
    if mode == "free_simulation":
        Y = np.where(np.isnan(Y), 0.0, Y)  # overwritten by the rollout before any window reads them
    X, _, t_idx = make_windows(
        df[inputs].to_numpy(float),
        Y,
        lag,
        "regression" if not needs_outputs else mode,
        past=df[past].to_numpy(float) if past else None,
        lag_step=lag_step,
        stride=stride,
    )
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
    print(
        f"gpdlm predict: {len(out)} steps -> {output} ({mode}, lag={lag}; {', '.join(out.columns)}; "
        f"model={run.cfg.model.name})"
    )
    return 0


# ----- gpdlm resume ------------------------------------------------------------------------------
def load_run_config(folder: Path):
    """The run's ``config.yaml`` (in today's key names: ``run.lifecycle.canonical_run_config``); a
    missing, unreadable or foreign file is one line."""
    from omegaconf import DictConfig, OmegaConf

    path = folder / "config.yaml"
    if not path.is_file():
        raise AnalysisError(f"{folder} has no config.yaml: not a gpdlm run folder")
    try:
        cfg = OmegaConf.load(path)
    except Exception as e:
        raise AnalysisError(
            f"{path} is not readable YAML ({type(e).__name__}): the run's config is damaged; retrain the run"
        ) from None
    missing = [
        k for k in ("model", "trainer", "tracking", "dataset") if not isinstance(cfg, DictConfig) or k not in cfg
    ]
    if missing:
        raise AnalysisError(f"{path} is not a gpdlm run config (no {missing[0]!r} section); retrain the run")
    from ..run.lifecycle import canonical_run_config

    return canonical_run_config(cfg)  # a run of gpdlm before config-hash version 3: today's key names


def resume_store(a_uri: str | None, state: dict, cfg) -> str:
    """The store the stopped run logged into: ``--tracking-uri``, else the one its checkpoint
    recorded, else its config's when that names a store independent of the working directory."""
    if a_uri:
        from ..tracking import resolve_tracking_uri

        return resolve_tracking_uri(a_uri)
    if state.get("tracking_uri"):
        return str(state["tracking_uri"])
    uri = str(cfg.tracking.get("uri") or "")
    if uri.startswith(("http://", "https://", "sqlite:////")) or (uri and "://" not in uri and Path(uri).is_absolute()):
        from ..tracking import resolve_tracking_uri

        return resolve_tracking_uri(uri)
    raise AnalysisError(
        "the run's checkpoint does not say which MLflow store it logged into (written by an older "
        "gpdlm) and its config names a store relative to the directory it was started from; "
        "give it: gpdlm resume RUN --tracking-uri URI"
    )


def resume_main(argv: list[str]) -> int:
    """``gpdlm resume RUN``: continue a stopped run from its checkpoint in its own folder, logging
    into the store it came from. Only a run whose process is gone is resumed (its folder's lock is
    free and, in MLflow, it is KILLED, FAILED, or RUNNING with its process gone: the liveness check
    of ``gpdlm runs --stale``); a FINISHED run is refused. The stopped run is closed (KILLED, with
    ``failure_reason`` and ``gpdlm.resumed_as``), so it never stays RUNNING."""
    p = make_parser("gpdlm resume", "continue a stopped run from its checkpoint (same folder, a new linked MLflow run)")
    p.add_argument("run", help="run id, run name or output folder of a KILLED (or FAILED) run")
    p.add_argument("--tracking-uri", default=None, metavar="URI")
    a = p.parse_args(argv)
    # torch and gpytorch: after the arguments (``gpdlm resume --help`` answers at once)
    from ..files import folder_holder
    from ..run.lifecycle import make_tracker
    from ..run.train import run_train
    from ..tracking.identity import config_hash, config_hashes
    from ..training.checkpoint import FILE, read_checkpoint

    folder, rid = run_folder(a.run, a.tracking_uri)
    holder = folder_holder(folder)
    if holder:
        raise AnalysisError(
            f"{folder} is still being trained by a live process (pid {holder}); resume only a "
            f"stopped run (`gpdlm runs --stale` lists those whose process is gone)"
        )
    cfg = load_run_config(folder)
    state = read_checkpoint(folder / FILE, strict=True)
    if state is None:
        finished = (folder / "model.pt").is_file() and "status" not in _read_metrics(folder)
        if finished:
            raise AnalysisError(f"{folder} holds a finished run (model.pt, final metrics.json): nothing to resume")
        from ..run.resume import moved_to

        moved = moved_to(folder)
        if moved is not None:  # a sweep run again (sweep.skip_finished) continued it elsewhere
            raise AnalysisError(f"{folder} has no {FILE}: a sweep run again moved it to {moved}; resume that run")
        if (cfg.get("sweep") or {}).get("batched", False):  # a group's checkpoints are the group's, not the job's
            raise AnalysisError(
                f"{folder} has no readable {FILE}: a job of a batched sweep (sweep.batched=true) that trained its "
                f"group keeps the group's checkpoints in sweep.cache_dir/batched/; run its sweep again with "
                f"sweep.skip_finished=true to continue it (or it was stopped before its first checkpoint)"
            )
        raise AnalysisError(
            f"{folder} has no readable {FILE}: the run was stopped before its first checkpoint, "
            f"or ran with trainer.checkpoint_every=0; retrain it"
        )
    if state.get("config_hash") not in config_hashes(cfg):  # a checkpoint of config-hash version 2 or 1 too
        raise AnalysisError(
            f"{folder}/{FILE} belongs to another configuration than {folder}/config.yaml "
            f"(config hash {state.get('config_hash')} != {config_hash(cfg)}); retrain the run"
        )
    client, stopped = None, None
    if cfg.tracking.get("enabled", True):
        uri = resume_store(a.tracking_uri, state, cfg)
        cfg.tracking.uri = uri
        client, stopped = _stopped_run(uri, rid or state.get("run_id"))
    from ..build import configure_threads

    configure_threads(cfg.get("threads", "auto"))
    tracker = make_tracker(cfg.tracking)
    try:
        metrics = run_train(cfg, folder, overrides=["(resumed)"], tracker=tracker)
    finally:
        if client is not None and stopped is not None and getattr(tracker, "run_id", None):
            from mlflow.entities import RunTag

            client.log_batch(stopped.info.run_id, tags=[RunTag("gpdlm.resumed_as", str(tracker.run_id))])
    return 0 if metrics is not None else 1


def _read_metrics(folder: Path) -> dict:
    try:
        data = json.loads((folder / "metrics.json").read_text())
    except (OSError, ValueError):
        return {"status": "unreadable"}
    return data if isinstance(data, dict) else {"status": "unreadable"}


def _stopped_run(uri: str, run_id: str | None):
    """(client, the stopped MLflow run or None): refuses a FINISHED run, one already continued (tag
    ``gpdlm.resumed_as``) and one whose process may be alive; a RUNNING run whose process is gone is
    closed KILLED before it is resumed."""
    from mlflow.exceptions import MlflowException

    from ..tracking.liveness import HOST_TAG, PID_TAG, close_orphan, process_state

    if not run_id:
        return None, None
    client, uri = open_store(uri)
    try:
        run = client.get_run(run_id)
    except MlflowException:
        raise AnalysisError(
            f"the stopped run {run_id} is not in the MLflow store {uri}; give the store it was "
            f"tracked in (--tracking-uri URI)"
        ) from None
    status = run.info.status
    successor = run.data.tags.get("gpdlm.resumed_as")
    if successor:  # continued once already: its checkpoint (if any) is its successor's now
        raise AnalysisError(
            f"run {run_id} was already continued as run {successor}; resume that one (gpdlm resume {successor})"
        )
    if status == "FINISHED":
        raise AnalysisError(f"run {run_id} is FINISHED: nothing to resume (retrain it to run it again)")
    if status == "RUNNING":
        alive = process_state(run.data.tags)
        if alive == "alive":
            raise AnalysisError(
                f"run {run_id} is still running (pid {run.data.tags.get(PID_TAG)} is alive); resume only a stopped run"
            )
        if alive == "unknown":
            raise AnalysisError(
                f"run {run_id} is RUNNING and its process (host {run.data.tags.get(HOST_TAG, '?')}) "
                f"cannot be checked from here; if it is dead, `gpdlm runs --stale --mark-failed` "
                f"closes it, then resume"
            )
        close_orphan(client, run, "gpdlm resume")
    return client, run


def resume_cli() -> int:
    return run_cli(resume_main)


def eval_cli() -> int:
    return run_cli(eval_main)


def predict_cli() -> int:
    return run_cli(predict_main)
