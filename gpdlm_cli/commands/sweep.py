"""``gpdlm sweep beta [overrides...]``: the DLM paper's beta grid as a Hydra multirun.

The grid depends on the training size n (paper, Sec. 6 / App. D): beta = n, n/f, n/f^2, ... down to
``sweep.grid_min`` (default 0.01, always included), with f = ``sweep.factor`` (default 2). gpdlm
composes the config with the given overrides, loads the dataset to learn n, builds the grid and
launches ``gpdlm train -m objective.beta=<grid> <overrides>`` -- so launchers, parent/child runs,
``sweep.skip_finished`` and the failure summary all work as for any sweep. With
``sweep.warm_start=true`` the grid runs upwards (0.01, ..., n), each beta starting where the smaller
one ended.

When the sweep's jobs have more than one dataset configuration -- a preset sweeping
``dataset.split.train_size`` (``regression_logloss_pol``: 500 to 4,000), or ``dataset=pol,kin40k``
on the command line -- each has its own n and so its own grid: ``gpdlm sweep beta`` launches one
multirun per configuration, in the order of the jobs, with those keys pinned to its values and every
other key swept as given (a parent run each).
"""

from __future__ import annotations

import math
import sys

from ..exceptions import ConfigError, param_error

USAGE = "usage: gpdlm sweep beta [hydra overrides ...]   (e.g. gpdlm sweep beta model=dlm,svgp seed=0,1)"


def beta_grid(n: int, grid_min: float = 0.01, factor: float = 2.0) -> list[float]:
    """[n, n/f, n/f^2, ..., grid_min]: every value > grid_min, then grid_min itself."""
    if not isinstance(grid_min, (int, float)) or not grid_min > 0 or math.isinf(grid_min):
        raise param_error("grid_min", "sweep", "a float in (0, inf)", grid_min)
    if not isinstance(factor, (int, float)) or not factor > 1 or math.isinf(factor):
        raise param_error("factor", "sweep", "a float in (1, inf)", factor)
    if grid_min > n:
        raise ConfigError(f"the beta grid is empty: sweep.grid_min={grid_min} exceeds the training size n={n}")
    grid, b = [], float(n)
    while b > grid_min * (1 + 1e-9):
        grid.append(b)
        b /= factor
    grid.append(float(grid_min))
    return grid


def _format(b: float) -> str:
    return repr(float(f"{b:.6g}"))


def data_combinations(overrides: list[str]) -> list[list[str]]:
    """The distinct settings of the swept dataset keys (``dataset``, ``dataset.*``; from the command
    line and the preset's ``hydra.sweeper.params``) over the sweep's jobs, in job order, as pinning
    overrides: [[]] when no dataset key varies."""
    return [pins for pins, _ in _data_jobs(overrides)]


def _data_jobs(overrides: list[str]) -> list[tuple[list[str], list[str]]]:
    """(pins, the override list of the first job with these pins) per ``data_combinations`` entry: the
    job's list holds everything the job composes with, the preset's ``hydra.sweeper.params`` included
    (a preset's single ``dataset.split.train_size`` is not a pin, but it sets the job's n)."""
    from ..sweep.plan import job_overrides

    jobs, _ = job_overrides([o for o in overrides if not o.startswith("-")])

    def data_key(o: str) -> bool:
        key = o.split("=", 1)[0].lstrip("+~")
        return key == "dataset" or key.startswith("dataset.")

    varying = {o.split("=", 1)[0] for j in jobs for o in j if data_key(o)}
    varying = {k for k in varying if len({o for j in jobs for o in j if o.split("=", 1)[0] == k}) > 1}
    if not varying:
        return [([], list(jobs[0]))]
    first: dict[tuple, list[str]] = {}
    for j in jobs:
        first.setdefault(tuple(o for o in j if o.split("=", 1)[0] in varying), list(j))
    return [(list(c), job) for c, job in first.items()]


def sweep_overrides(kind: str, overrides: list[str]) -> list[list[str]]:
    """The argv of each multirun that `gpdlm sweep <kind>` launches: one per dataset configuration of
    the sweep's jobs (``data_combinations``), each with the beta grid of its training size."""
    from .. import build
    from ..hydra_apps import compose_configs

    if kind != "beta":
        raise ConfigError(f"unknown sweep '{kind}'; available: beta")
    if any(o.startswith("objective.beta=") for o in overrides):
        raise ConfigError("gpdlm sweep beta builds objective.beta itself; drop the objective.beta override")
    runs = []
    # n depends on the dataset settings only: each multirun's grid comes from the first of its jobs, composed
    # with the job's whole override list (the preset's sweeper params included: its dataset.split values)
    data_jobs = _data_jobs(overrides)
    for (pins, _), cfg in zip(data_jobs, compose_configs([job for _, job in data_jobs])):
        build.validate_config(cfg)
        _, splits, _ = build.load_data(cfg)
        grid = beta_grid(splits.n_train, cfg.sweep.grid_min, cfg.sweep.factor)
        if cfg.sweep.get("warm_start", False):
            # a warm-started path runs from small beta up: measured on pol (docs/sweeps.md "Warm-started beta
            # paths"), the descending path gets stuck at large beta's noise-only optimum
            grid = sorted(grid)
        runs.append(["-m", "objective.beta=" + ",".join(_format(b) for b in grid), *overrides, *pins])
    return runs


def cli() -> int:
    from ..exceptions import GpdlmError
    from ..hydra_apps import report_error

    argv = sys.argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    from ..sweep.compose import split_config_dir

    config_dir, overrides = split_config_dir(argv[1:])  # -cd DIR: Hydra's flag, before the overrides
    try:
        runs = sweep_overrides(argv[0], overrides)
    except GpdlmError as e:
        report_error(e)
        return 2
    from .train import train_main

    for i, args in enumerate(runs):
        pins = args[2 + len(overrides) :]
        where = f" ({' '.join(pins)}; multirun {i + 1} of {len(runs)})" if len(runs) > 1 else ""
        print(f"gpdlm: sweeping {args[1]}{where}", file=sys.stderr)
        sys.argv = ["gpdlm train", *config_dir, *args]
        train_main()
    return 0
