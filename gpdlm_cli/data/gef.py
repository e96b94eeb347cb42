"""The GEFCom2012 smart-grid sets of the GP-LSTM paper's Table 3 (Sec. 5.2.3), as lagged windows.

Both are read from the zipped CSV files of the Global Energy Forecasting Competition 2012 (Hong,
Pinson & Fan, IJF 30(2), 2014) as mirrored on GitHub (``datasets/registry.yaml``).

**gef_power** (Kaggle "GEFCom2012 load"): the hourly load of 20 zones of a US utility (kW, written
with thousands separators) and the hourly temperature of 11 weather stations, 2004-01-01 to
2008-06-30. The target is the **sum of the 20 zone loads** (the paper's "cumulative hourly power
load"; keras-gp averages them, which differs by the factor 20 only and vanishes under
standardisation), the 11 inputs are the 11 temperatures. Only hours where all 31 series are present
are kept: 38,070 hours (the paper prints 38,064; the 6-hour difference is not explained). The
competition removed 8 weeks of load (its backcast weeks), so these hours form 9 contiguous stretches:
``gaps=split`` (default) builds windows inside each stretch only (37,638 windows at lag 48);
``gaps=join`` treats the kept hours as one series (38,022 windows).

**gef_wind** (Kaggle "GEFCom2012 wind"): the hourly power of 7 wind farms (normalised to [0, 1])
and, per farm, 48-hour-ahead forecasts (zonal u, meridional v, speed ws, angle wd) issued every 12
hours. Every hour is covered by the 4 latest issues (ages 1-12, 13-24, 25-36, 37-48 hours); their
4 x 4 values, newest first, are the **16 inputs**; the target is the farm's power. Each farm's
series is its hours with a published ("Training") power value up to the last forecast hour
(2012-06-28 12:00): 18,757 hours, so 7 x (18,757 - 48) = **130,963 windows** at lag 48, the
paper's count -- which is only reached by treating those hours as one series (``gaps=join``,
default): after 2010 the competition publishes 36-hour blocks between 48-hour gaps, shorter than
the lag (``gaps=split`` keeps the windows of the contiguous stretches only). The first 37 hours of
each farm (2009-07-01 00:00 to 07-02 12:00) are covered by fewer than 4 issues (the first issue is
07-01 00:00); a missing forecast age takes the next available value of its column (back-filled; a
gap later in a series would carry the last value forward -- the files have none).
The farms are separate series: no window mixes two farms; ``farms`` picks some.

Choices the paper leaves open, and gpdlm's (documented in docs/datasets.md): the split (here the
last ``test_fraction`` = 25% of each series tests, in time order; 25% of the training span
validates, Sec. 5.2.3), the prediction mode (autoregression by default, "we particularly consider
autoregressive prediction", Sec. 5.2.3) and the treatment of the gaps above. ``n`` keeps only the
first n hours of each series (CI-sized runs).
"""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pandas as pd

from ..exceptions import DataError
from .catalog import download_inputs, loader
from .sequences import windows_table
from .table import Table

HOURS = [f"h{i}" for i in range(1, 25)]
WIND_VARS = ("u", "v", "ws", "wd")
GAPS = ("split", "join")


def read_zipped_csv(path, **kw) -> pd.DataFrame:
    """The one CSV member of a zip file, parsed by pandas (errors: one-line DataError)."""
    try:
        with zipfile.ZipFile(path) as z:
            members = [m for m in z.namelist() if m.endswith(".csv")]
            if len(members) != 1:
                raise DataError(f"{path}: expected one CSV file in the zip; found {members}")
            with z.open(members[0]) as f:
                return pd.read_csv(io.BytesIO(f.read()), **kw)
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
        raise DataError(f"cannot read {path}: {type(e).__name__}: {e}".splitlines()[0]) from None


def _hourly(df: pd.DataFrame, key: str, path) -> pd.DataFrame:
    """Day rows (key, year, month, day, h1..h24) -> an hourly frame, one column per key value."""
    missing = [c for c in [key, "year", "month", "day"] + HOURS if c not in df.columns]
    if missing:
        raise DataError(f"{path}: not a GEFCom2012 load/temperature file; missing columns {missing}")
    long = df.melt(id_vars=[key, "year", "month", "day"], value_vars=HOURS, var_name="h", value_name="v")
    long["time"] = pd.to_datetime(long[["year", "month", "day"]]) + pd.to_timedelta(
        long["h"].str[1:].astype(int) - 1, unit="h"
    )
    return long.pivot_table(index="time", columns=key, values="v", aggfunc="first", dropna=False)


def _check_common(info, lag, test_fraction, gaps, n) -> None:
    """What ties options together (each option's type and range: the config schema, schema.options)."""
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 4 * lag):
        raise DataError(f"dataset '{info.name}': option n must be null or an integer >= 4*lag={4 * lag}; got {n!r}")


def series_parts(df: pd.DataFrame, *, lag: int, test_fraction: float, gaps: str) -> list[tuple[pd.DataFrame, bool]]:
    """One series (hourly DatetimeIndex, time order) -> [(frame, is_test)] for ``windows_table``: the
    last ``test_fraction`` of its hours test (their first windows look back ``lag`` hours into the
    training span); with ``gaps=split`` every stretch of consecutive hours is its own piece. Pieces
    too short for one window are left out."""
    n = len(df)
    cut = int(round(n * (1 - test_fraction)))
    if gaps == "join":
        stretches = [(0, n)]
    else:
        new = np.flatnonzero(np.diff(df.index.values) != np.timedelta64(1, "h")) + 1
        bounds = np.concatenate([[0], new, [n]])
        stretches = list(zip(bounds[:-1], bounds[1:]))
    parts = []
    for a, b in stretches:
        if a < cut:
            parts.append((df.iloc[a : min(b, cut)], False))
        if b > cut:
            parts.append((df.iloc[max(a, cut - lag) : b], True))
    return [(p, t) for p, t in parts if len(p) > lag]


# ----- gef_power ----------------------------------------------------------------------------------------
def gef_power_frame(load_path, temp_path) -> pd.DataFrame:
    """Hourly frame of ``temp1..temp11`` and ``load`` (the sum of the 20 zones), on the hours where
    all 31 series are present (38,070 hours)."""
    load = _hourly(read_zipped_csv(load_path, thousands=","), "zone_id", load_path)
    temp = _hourly(read_zipped_csv(temp_path), "station_id", temp_path)
    if load.shape[1] != 20 or temp.shape[1] != 11:
        raise DataError(f"GEFCom2012 load: expected 20 zones and 11 stations; got {load.shape[1]} and {temp.shape[1]}")
    temp.columns = [f"temp{int(c)}" for c in temp.columns]
    both = temp.join(load, how="inner")
    both = both[both.notna().all(axis=1)]
    out = both[list(temp.columns)].astype(float)
    out["load"] = both[list(load.columns)].astype(float).sum(axis=1)
    return out


@loader("gef_power", inputs=download_inputs)
def load_gef_power(
    info,
    lag: int = 48,
    mode: str = "autoregression",
    lag_step: int = 1,
    stride: int = 1,
    test_fraction: float = 0.25,
    gaps: str = "split",
    n: int | None = None,
    missing: str = "drop",
) -> Table:
    """GEFCom2012 load: the summed load of 20 zones from 11 hourly temperature series (module
    docstring), as ``lag``-hour windows predicting the next hour; chronological test part."""
    _check_common(info, lag, test_fraction, gaps, n)
    load_path, temp_path = download_inputs(info)
    df = gef_power_frame(load_path, temp_path)
    if n is not None:
        df = df.iloc[:n]
    parts = series_parts(df, lag=lag, test_fraction=test_fraction, gaps=gaps)
    t = windows_table(
        info.name,
        parts,
        inputs=[f"temp{i}" for i in range(1, 12)],
        target="load",
        lag=lag,
        mode=mode,
        lag_step=lag_step,
        stride=stride,
        missing=missing,
        source=f"{load_path} + {temp_path}",
    )
    t.notes.append(f"gef_power: {len(df)} hours, gaps={gaps}, test_fraction={test_fraction}")
    return t


# ----- gef_wind -----------------------------------------------------------------------------------------
def _hour_index(s: pd.Series) -> pd.DatetimeIndex:
    return pd.DatetimeIndex(pd.to_datetime(s.astype("int64").astype(str), format="%Y%m%d%H"))


def wind_forecast_inputs(path) -> pd.DataFrame:
    """One farm's forecast file (date = issue time yyyymmddhh, hors = hours ahead 1..48, u, v, ws,
    wd) -> hourly frame of 16 columns ``u_1, v_1, ws_1, wd_1, ..., wd_4``: the forecasts of the 4
    issues covering the hour, newest (1-12 hours ahead) first."""
    f = read_zipped_csv(path)
    missing = [c for c in ("date", "hors") + WIND_VARS if c not in f.columns]
    if missing:
        raise DataError(f"{path}: not a GEFCom2012 wind forecast file; missing columns {missing}")
    f["time"] = _hour_index(f["date"]) + pd.to_timedelta(f["hors"], unit="h")
    f["age"] = (f["hors"].astype(int) - 1) // 12 + 1
    wide = f.pivot_table(index="time", columns="age", values=list(WIND_VARS), aggfunc="first", dropna=False)
    return wide[[(v, a) for a in (1, 2, 3, 4) for v in WIND_VARS]].set_axis(
        [f"{v}_{a}" for a in (1, 2, 3, 4) for v in WIND_VARS], axis=1
    )


WIND_INPUTS = [f"{v}_{a}" for a in (1, 2, 3, 4) for v in WIND_VARS]


def gef_wind_series(power_path, forecast_path, farm: int, power: pd.DataFrame | None = None) -> pd.DataFrame:
    """Farm ``farm``'s hourly series: the 16 forecast inputs and ``power``, on its published hours up
    to the last forecast hour (18,757 hours); missing forecast ages are filled from the nearest hour
    (forward, then backward: only the first 37 hours lack some). ``power``: the parsed power file,
    if already read."""
    p = read_zipped_csv(power_path) if power is None else power
    col = f"wp{farm}"
    if col not in p.columns or "date" not in p.columns or "usage" not in p.columns:
        raise DataError(f"{power_path}: not the GEFCom2012 wind power file; no columns date, {col}, usage")
    p = p[p["usage"] == "Training"]
    power = pd.Series(p[col].to_numpy(float), index=_hour_index(p["date"]), name="power")
    fc = wind_forecast_inputs(forecast_path)
    power = power[power.index <= fc.index.max()]
    out = fc.reindex(power.index).ffill().bfill()
    out["power"] = power
    return out


@loader("gef_wind", inputs=download_inputs)
def load_gef_wind(
    info,
    lag: int = 48,
    mode: str = "autoregression",
    lag_step: int = 1,
    stride: int = 1,
    test_fraction: float = 0.25,
    gaps: str = "join",
    farms: list | None = None,
    n: int | None = None,
    missing: str = "drop",
) -> Table:
    """GEFCom2012 wind: each farm's power from the 16 values of the 4 forecasts covering the hour
    (module docstring), ``lag``-hour windows predicting the next hour, farm by farm; the last
    ``test_fraction`` of each farm's series tests."""
    _check_common(info, lag, test_fraction, gaps, n)
    farms = list(range(1, 8)) if farms is None else list(farms)
    paths = download_inputs(info)
    power_path, forecasts = paths[0], paths[1:]
    if len(forecasts) != 7:
        raise DataError(f"dataset '{info.name}': the registry entry must list the power file and 7 forecast files")
    parts, hours = [], 0
    power = read_zipped_csv(power_path)
    for k in farms:
        df = gef_wind_series(power_path, forecasts[k - 1], k, power)
        if n is not None:
            df = df.iloc[:n]
        hours += len(df)
        parts += series_parts(df, lag=lag, test_fraction=test_fraction, gaps=gaps)
    t = windows_table(
        info.name,
        parts,
        inputs=WIND_INPUTS,
        target="power",
        lag=lag,
        mode=mode,
        lag_step=lag_step,
        stride=stride,
        missing=missing,
        source=f"{power_path} + windforecasts_wf*.csv.zip",
    )
    t.notes.append(f"gef_wind: farms {farms}, {hours} hours, gaps={gaps}, test_fraction={test_fraction}")
    return t
