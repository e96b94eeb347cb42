"""In which units the GP-LSTM paper's Table 2 RMSEs are, read against gpdlm's committed Table 2 records
(docs/results/diagnoses/gplstm.md, section 8).

    PYTHONPATH=. python docs/results/diagnoses/gplstm_units.py             # from the repository root
    PYTHONPATH=. python docs/results/diagnoses/gplstm_units.py --markdown  # also section 8's tables

The authors' code as released with the paper (github.com/alshedivat/keras-gp, 2016-10-27 to 2017-04-29:
``kgp/datasets/data_utils.py::preprocess_data(standardize=True)``, used by ``examples/lstm_actuator.py`` and
``examples/gp_lstm_actuator.py``) standardises inputs and targets with the *training* span's mean and
standard deviation (numpy, ddof 0) and scores ``RMSE(y_test, y_preds)`` on the standardised targets. gpdlm
reports ``test_rmse`` / ``test_sim_rmse`` in the target's units (its models train on targets standardised
with the training windows' statistics, ``gpdlm_cli/data/scaling.py``, and un-standardise the predictions;
``test_rmse_norm`` is the one-step RMSE before that). This script prints, per dataset x mode x model, gpdlm's
mean RMSE in target units, the same divided by the training targets' sd (the authors' standardisation on
gpdlm's split), and the paper's figure, and how close each unit comes to the paper.

Metric per mode (the claims file's Table 2): regression and autoregression ``test_rmse`` (one step ahead),
free simulation ``test_sim_rmse`` (the whole test span fed back its own predictions).
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
RECORDS = {
    "fixed": ROOT / "docs/results/gplstm_real_fixed_2026-11-29/runs.jsonl.gz",
    "own_rollouts": ROOT / "docs/results/gplstm_own_rollouts_2026-11-29/runs.jsonl.gz",
    "first": ROOT / "docs/results/gplstm_real_2026-11-28/runs.jsonl.gz",
}
CLAIMS = ROOT / "gpdlm_cli/claims/gplstm.yaml"
DATASETS = {"actuator": "Actuator", "drives": "Drives"}
MODES = {"regression": "regression", "autoregression": "auto-regression", "free_simulation": "free simulation"}
METRIC = {"regression": "test_rmse", "autoregression": "test_rmse", "free_simulation": "test_sim_rmse"}
MODELS = {
    "narx": "NARX",
    "rnn": "RNN",
    "lstm": "LSTM",
    "gru": "GRU",
    "gp_narx": "GP-NARX",
    "gp_rnn": "GP-RNN",
    "gp_lstm": "GP-LSTM",
    "gp_gru": "GP-GRU",
}
VAL_FRACTION = 0.25  # the preset's dataset.split.val_fraction (the last quarter of the training half)
AUTHORS_SPLIT = (45.0, 90.0)  # kgp: load_data(stop=45.) trains, (45, 90) tests in examples/lstm_actuator.py


def raw_series(name: str) -> np.ndarray:
    """The target series of the real ``actuator`` (pressure, 1,024 steps) or ``drives`` (speed, 500) file."""
    from gpdlm_cli.data import get_dataset_info
    from gpdlm_cli.data.catalog import download_inputs
    from gpdlm_cli.data.sequences import read_sysid_mat

    (path,) = download_inputs(get_dataset_info(name))
    return read_sysid_mat(path, name).iloc[:, 1].to_numpy()


def target_sds(name: str, mode: str, lag: int) -> dict[str, float]:
    """The target's standard deviation (numpy, ddof 0) over parts of gpdlm's split of ``name`` at the
    study's ``mode`` and ``lag``, through gpdlm's own loader and splitter: ``train`` (the training windows,
    what gpdlm standardises with and what the authors' ``preprocess_data`` would use on this split),
    ``train_val`` (the whole first half: training and validation windows), ``test`` (the second half); and
    on the raw series at the authors' split (``authors_train``: the first 45% of the steps, ``authors_test``:
    45-90%); ``mean_predictor``: the test RMSE of predicting the training targets' mean, in standardised units
    (what a model that learnt nothing scores on the paper's scale)."""
    from gpdlm_cli.data import load_table, make_splits

    table = load_table(name, lag=lag, mode=mode)
    splits = make_splits(table, seed=0, val_fraction=VAL_FRACTION)
    y = np.asarray(table.y, dtype=float)
    tr, va, te = (np.asarray(splits.indices[k]) for k in ("train", "val", "test"))
    series = raw_series(name)
    a, b = (int(p / 100.0 * len(series)) for p in AUTHORS_SPLIT)  # kgp's int((start/100.) * len(X))
    out = {
        "train": float(y[tr].std()),
        "train_val": float(y[np.concatenate([tr, va])].std()),
        "test": float(y[te].std()),
        "authors_train": float(series[:a].std()),
        "authors_test": float(series[a:b].std()),
        "n_train": float(tr.size),
        "mean_predictor": float(np.sqrt(np.mean((y[te] - y[tr].mean()) ** 2)) / y[tr].std()),
    }
    if not math.isclose(out["train"], float(splits.y_std), rel_tol=1e-12):
        raise AssertionError(f"{name} {mode}: training sd {out['train']} but gpdlm scales with {splits.y_std}")
    return out


def input_window_bound(name: str, lag: int) -> dict[str, float]:
    """The lowest test RMSE any regression-mode model (a function of the ``lag`` past inputs alone) can reach
    on gpdlm's test half: the test windows grouped by identical input windows, each group predicted by its
    own mean of the *test* targets (an oracle; repeated windows come from Drives' two-level PRBS input).
    ``target``: in target units, ``std``: over the training targets' sd; ``distinct``/``n``: distinct test
    windows / test windows."""
    from gpdlm_cli.data import load_table, make_splits

    table = load_table(name, lag=lag, mode="regression")
    splits = make_splits(table, seed=0, val_fraction=VAL_FRACTION)
    te = np.asarray(splits.indices["test"])
    X, y = np.asarray(table.X, dtype=float)[te], np.asarray(table.y, dtype=float)[te]
    groups: dict[bytes, list[float]] = {}
    for row, target in zip(X, y, strict=True):
        groups.setdefault(row.tobytes(), []).append(float(target))
    sq = sum(float(np.sum((np.asarray(v) - np.mean(v)) ** 2)) for v in groups.values())
    rmse = math.sqrt(sq / y.size)
    return {"target": rmse, "std": rmse / float(splits.y_std), "distinct": float(len(groups)), "n": float(y.size)}


def load_records(path: Path):
    """One row per finished run of a committed ``runs.jsonl.gz``: dataset, mode, model, seed, lag, the
    Table 2 metric of its mode (``METRIC``) as ``rmse``, and the sd gpdlm scaled the targets with
    (``test_rmse / test_rmse_norm``) as ``logged_sd``."""
    import pandas as pd

    d = pd.read_json(path, lines=True)
    d = d[d["run_id"].notna() & (d["status"] == "FINISHED")]
    rows = []
    for params, metrics in zip(d["params"], d["metrics"], strict=True):
        mode = params["dataset.mode"]
        rows.append(
            {
                "dataset": params["dataset.name"],
                "mode": mode,
                "model": params["model.name"],
                "seed": int(params["seed"]),
                "lag": int(params["dataset.lag"]),
                "rmse": float(metrics[METRIC[mode]]),
                "logged_sd": float(metrics["test_rmse"]) / float(metrics["test_rmse_norm"]),
            }
        )
    return pd.DataFrame(rows)


def paper_table2() -> dict[tuple[str, str, str], float]:
    """The paper's Table 2 means from the claims file: (dataset, mode, model) -> RMSE (gpdlm's names)."""
    import yaml

    claims = yaml.safe_load(CLAIMS.read_text())
    (table,) = [t for t in claims["tables"] if t["id"] == "table2"]
    names = {v: k for k, v in MODELS.items()}
    out = {}
    for row in table["paper"]:
        if row["method"] not in names:
            continue  # RGP: quoted, not run
        for ds, dname in DATASETS.items():
            for mode, mname in MODES.items():
                cell = row.get(f"{dname} / {mname}")
                if cell is not None:
                    out[(ds, mode, names[row["method"]])] = float(str(cell).split("±")[0])
    return out


def cell_means(runs) -> dict[tuple[str, str, str], tuple[float, int, int]]:
    """(dataset, mode, model) -> (mean RMSE over seeds, number of runs, lag)."""
    out = {}
    for (ds, mode, model), g in runs.groupby(["dataset", "mode", "model"]):
        (lag,) = set(g["lag"])
        out[(ds, mode, model)] = (float(g["rmse"].mean()), len(g), int(lag))
    return out


def agreement(pairs: list[tuple[float, float]]) -> dict[str, float]:
    """How close gpdlm's numbers come to the paper's: median |log(gpdlm / paper)|, the geometric mean of
    gpdlm / paper, and how many cells lie within a factor 1.5 and 1.25 of the paper."""
    logs = [math.log(g / p) for g, p in pairs]
    return {
        "cells": len(pairs),
        "median_abs_log": statistics.median(abs(x) for x in logs),
        "geo_mean_ratio": math.exp(statistics.fmean(logs)),
        "within_1.5": sum(abs(x) <= math.log(1.5) for x in logs),
        "within_1.25": sum(abs(x) <= math.log(1.25) for x in logs),
    }


def table(studies, sds, paper) -> list[dict]:
    """One row per study variant x dataset x mode x model: ``variant`` "fixed" (the fixed study, every mode;
    free simulation trained teacher-forced), "own" (free simulation trained on the models' own rollouts) or
    "first" (the first study, GP rows before the final-theta fix); ``raw`` the mean RMSE over the seeds in
    target units, ``std`` the same over the training targets' sd, ``paper`` the paper's mean (None: GRU rows)."""
    variants = {"fixed": cell_means(studies["fixed"])}
    if "own_rollouts" in studies:
        own = cell_means(studies["own_rollouts"])
        variants["own"] = {k: v for k, v in own.items() if k[1] == "free_simulation"}
    if "first" in studies:
        variants["first"] = cell_means(studies["first"])
    out = []
    for ds in DATASETS:
        for mode in MODES:
            for model in MODELS:
                for variant, cells in variants.items():
                    if (ds, mode, model) in cells:
                        raw, n, _lag = cells[(ds, mode, model)]
                        out.append(
                            {
                                "dataset": ds,
                                "mode": mode,
                                "model": model,
                                "variant": variant,
                                "n": n,
                                "raw": raw,
                                "std": raw / sds[(ds, mode)]["train"],
                                "paper": paper.get((ds, mode, model)),
                            }
                        )
    return out


#: the agreement summaries: label -> which variant each mode's cells come from
SUMMARIES = {
    "fixed study, teacher-forced free simulation": {m: "fixed" for m in MODES},
    "fixed study, own-rollout free simulation": {**{m: "fixed" for m in MODES}, "free_simulation": "own"},
    "first study (GP rows before the fix)": {m: "first" for m in MODES},
}


def markdown(rows: list[dict]) -> None:
    """Section 8's tables: per dataset, a row per model and a column per mode (free simulation teacher-forced
    and on own rollouts), each cell "raw / standardised (paper)"."""
    columns = [
        ("regression", "fixed"),
        ("autoregression", "fixed"),
        ("free_simulation", "fixed"),
        ("free_simulation", "own"),
    ]
    heads = ["regression", "autoregression", "free sim. (teacher-forced)", "free sim. (own rollouts)"]
    cell = {(r["dataset"], r["mode"], r["model"], r["variant"]): r for r in rows}
    for ds, dname in DATASETS.items():
        print(f"\n{dname}: mean test RMSE, target units / standardised (the paper)\n")
        print("| model | " + " | ".join(heads) + " |")
        print("|---" * (len(heads) + 1) + "|")
        for model, mname in MODELS.items():
            out = []
            for mode, variant in columns:
                r = cell.get((ds, mode, model, variant))
                if r is None:
                    out.append("-")
                    continue
                p = f" ({r['paper']:.2f})" if r["paper"] else ""
                out.append(f"{r['raw']:.3f} / **{r['std']:.3f}**{p}")
            print(f"| {mname} | " + " | ".join(out) + " |")


def main(argv: list[str]) -> int:
    paper = paper_table2()
    studies = {k: load_records(p) for k, p in RECORDS.items() if p.is_file()}
    fixed = studies["fixed"]

    sds = {}
    print("Target sd (numpy, ddof 0) on gpdlm's split (train: the training windows, what gpdlm standardises")
    print("with, as the authors' preprocess_data would on this split), and on the raw series at the authors' split:")
    print(
        f"{'dataset':9} {'mode':16} {'lag':>3} {'n_train':>7} {'train':>7} {'train+val':>9} {'test':>7}  "
        f"{'authors 0-45%':>13} {'45-90%':>7} {'mean pred.':>10}  max |logged sd / train sd - 1|"
    )
    for (ds, mode), g in fixed.groupby(["dataset", "mode"]):
        (lag,) = set(g["lag"])
        s = target_sds(ds, mode, int(lag))
        sds[(ds, mode)] = s
        logged = np.concatenate(
            [st.loc[(st["dataset"] == ds) & (st["mode"] == mode), "logged_sd"].to_numpy() for st in studies.values()]
        )
        diff = float(np.max(np.abs(logged / s["train"] - 1)))
        print(
            f"{ds:9} {mode:16} {int(lag):3d} {int(s['n_train']):7d} {s['train']:7.4f} {s['train_val']:9.4f} "
            f"{s['test']:7.4f}  {s['authors_train']:13.4f} {s['authors_test']:7.4f} {s['mean_predictor']:10.3f}  "
            f"{diff:.1e} ({len(logged)} runs)"
        )

    rows = table(studies, sds, paper)
    print()
    print("Mean test RMSE over the seeds: gpdlm in target units (raw), over the training targets' sd (std), the paper.")
    print("Free simulation (test_sim_rmse): the fixed study (teacher-forced training) and, marked (own), own rollouts.")
    print(f"{'dataset':9} {'mode':16} {'model':14} {'raw':>6} {'std':>6} {'paper':>6}  {'raw/p':>5} {'std/p':>5}")
    for r in (r for r in rows if r["variant"] != "first"):
        tag = MODELS[r["model"]] + (" (own)" if r["variant"] == "own" else "")
        p = r["paper"]
        tail = f"{p:6.2f}  {r['raw'] / p:5.2f} {r['std'] / p:5.2f}" if p else f"{'-':>6}  {'-':>5} {'-':>5}"
        print(f"{r['dataset']:9} {r['mode']:16} {tag:14} {r['raw']:6.3f} {r['std']:6.3f} {tail}  (n={r['n']})")

    print()
    print("Agreement with the paper's 36 cells (6 models x 2 datasets x 3 modes):")
    for label, source in SUMMARIES.items():
        chosen = [r for r in rows if r["paper"] and r["variant"] == source[r["mode"]]]
        if not chosen:
            continue
        print(f"  {label}:")
        for scope in ("all", *DATASETS):
            sub = [r for r in chosen if scope in ("all", r["dataset"])]
            for unit in ("raw", "std"):
                a = agreement([(r[unit], r["paper"]) for r in sub])
                print(
                    f"    {scope:8} {unit}: median |log(gpdlm/paper)| {a['median_abs_log']:.3f} "
                    f"(x{math.exp(a['median_abs_log']):.2f}), geometric mean gpdlm/paper {a['geo_mean_ratio']:.2f}, "
                    f"within x1.5: {a['within_1.5']:2d}/{a['cells']}, within x1.25: {a['within_1.25']:2d}/{a['cells']}"
                )
    print()
    print("Regression mode: the lowest test RMSE any function of the input window alone can reach on gpdlm's test")
    print("half (identical input windows share one prediction; the oracle uses the test targets):")
    for ds, lags in (("drives", (10, 16, 32)), ("actuator", (32,))):
        for lag in lags:
            b = input_window_bound(ds, lag)
            print(
                f"  {ds:9} lag {lag:2d}: {b['target']:.3f} target units, {b['std']:.3f} standardised "
                f"({int(b['distinct'])} distinct of {int(b['n'])} test windows)"
            )
    if "--markdown" in argv:
        markdown(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
