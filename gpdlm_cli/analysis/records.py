"""Run records: one MLflow training run reduced to what the analysis needs, and its values.

Grouping keys are short names (``dataset``, ``model``, ``beta``, ``train_size``, ...) or any param
key verbatim. Values are compared as numbers whenever they parse as finite numbers, so "10" sorts
after "9" and ``objective.beta=1`` groups with ``objective.beta=1.0``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import GpdlmError

DEFAULT_EXPERIMENT = "gpdlm"

# short name -> (source, key); source is "param", "metric" or "tag"
ALIASES: dict[str, tuple[str, str]] = {
    "dataset": ("param", "dataset.name"),
    "model": ("param", "model.name"),
    "variant": ("param", "model.variant"),
    "likelihood": ("param", "likelihood.name"),
    "estimator": ("param", "estimator.name"),
    "beta": ("param", "objective.beta"),
    "train_size": ("metric", "n_train"),
    "seed": ("param", "seed"),
}
# keys computed by gpdlm itself rather than read from MLflow
DERIVED = ("method", "refit")

# the task metrics shown when --metric is not given (those that some run has)
DEFAULT_METRICS = ("test_nll", "test_rmse", "test_error", "test_mre")


class AnalysisError(GpdlmError, ValueError):
    """Bad input to compare/select/ui: printed as one line, exit code 2."""


# ----- values ----------------------------------------------------------------------------------------
def canon(raw: Any) -> float | str | None:
    """A param/metric/tag value as a comparable value: a float when it parses as a finite number,
    else the string; None when absent."""
    if raw is None:
        return None
    if isinstance(raw, bool):
        return str(raw)
    if isinstance(raw, (int, float)):
        return float(raw) if math.isfinite(raw) else str(raw)
    s = str(raw)
    try:
        x = float(s)
    except ValueError:
        return s
    return x if math.isfinite(x) else s


def sort_key(v: float | str | None) -> tuple:
    """Numbers first (by value), then strings, then missing values."""
    if v is None:
        return (2, 0.0, "")
    if isinstance(v, float):
        return (0, v, "")
    return (1, 0.0, v)


def fmt_value(v: float | str | None) -> str:
    """A group value for tables: integers without '.0', other numbers by repr, '-' when absent."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() and abs(v) < 1e15 else repr(v)
    return v


def fmt_num(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "nan"
    return f"{x:.4g}"


def fmt_mean_se(mean: float, se: float) -> str:
    if se is None or math.isnan(se):
        return fmt_num(mean)
    return f"{fmt_num(mean)} ± {se:.2g}"


def mean_se(values: list[float]) -> tuple[float, float, int]:
    """Mean, standard error (sample std / sqrt(n); nan for n < 2) and n."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan, 0
    mean = statistics.fmean(values)
    if n < 2 or not all(math.isfinite(v) for v in values):
        return mean, math.nan, n
    return mean, statistics.stdev(values) / math.sqrt(n), n


# ----- runs --------------------------------------------------------------------------------------
@dataclass
class RunRecord:
    """One MLflow run, reduced to what the analysis needs. ``extra`` holds derived values (the
    method label of a selection, a refit's original training size) that override lookups."""

    run_id: str
    run_name: str
    start_time: int
    params: dict[str, str]
    metrics: dict[str, float]
    tags: dict[str, str]
    extra: dict[str, Any] = field(default_factory=dict)
    end_time: int = 0  # ms since the epoch (0: not ended or not known)

    @classmethod
    def from_run(cls, run) -> RunRecord:
        """The record of an MLflow run (or of an export line read back, ``analysis.export.as_run``), its
        params in today's names: a run logged before config-hash version 3 has its recurrent protocol
        keys ``trainer.<key>`` read as ``model.training.<key>`` (``tracking.identity.canonical_params``,
        the one place that renaming lives), so claims, ``--by`` and ``--filter``-free grouping see one name."""
        from ..tracking.identity import canonical_params

        return cls(
            run.info.run_id,
            run.info.run_name or "",
            int(run.info.start_time or 0),
            canonical_params(dict(run.data.params)),
            dict(run.data.metrics),
            dict(run.data.tags),
            end_time=int(getattr(run.info, "end_time", 0) or 0),
        )

    def raw(self, key: str):
        """The raw value behind a grouping key (None if the run does not have it)."""
        if key in self.extra:
            return self.extra[key]
        if key == "method":
            return self.params.get("model.name")
        if key == "refit":
            return "yes" if self.tags.get("gpdlm.refit_of") else "no"
        source, name = resolve_key(key)
        stores: dict[str, Mapping[str, Any]] = {"param": self.params, "metric": self.metrics, "tag": self.tags}
        return stores[source].get(name)

    def value(self, key: str) -> float | str | None:
        return canon(self.raw(key))

    def with_extra(self, **extra) -> RunRecord:
        return RunRecord(
            self.run_id,
            self.run_name,
            self.start_time,
            self.params,
            self.metrics,
            self.tags,
            {**self.extra, **extra},
            self.end_time,
        )


def resolve_key(key: str) -> tuple[str, str]:
    """('param'|'metric'|'tag', name) for a short name, ``params.X``/``metrics.X``/``tags.X``, or a
    param key given verbatim."""
    if key in ALIASES:
        return ALIASES[key]
    for prefix, source in (("params.", "param"), ("metrics.", "metric"), ("tags.", "tag")):
        if key.startswith(prefix):
            return source, key[len(prefix) :]
    return "param", key


def check_keys(records: list[RunRecord], keys: Iterable[str], option: str = "--by") -> None:
    """Every grouping key must be a short name or be present in at least one run."""
    for key in keys:
        if key in ALIASES or key in DERIVED:
            continue
        if not any(r.raw(key) is not None for r in records):
            from ..tracking.identity import RENAMED

            name = key.removeprefix("params.")
            if name in RENAMED:  # runs are read in today's names, old ones too
                raise AnalysisError(
                    f"{option} {key}: the key is now '{RENAMED[name]}' (config-hash version 3; runs logged "
                    f"with the old name are read in the new one): use {option} {RENAMED[name]}"
                )
            short = ", ".join(list(ALIASES) + list(DERIVED))
            raise AnalysisError(
                f"unknown {option} key '{key}': not a short name ({short}) and no run has a "
                f"param of that name (metrics.NAME / tags.NAME for other sources)"
            )


def group_records(records: list[RunRecord], keys: list[str]) -> list[tuple[tuple, list[RunRecord]]]:
    """[(values, runs)] per distinct combination of ``keys``, sorted (numbers as numbers)."""
    groups: dict[tuple, list[RunRecord]] = {}
    for r in records:
        groups.setdefault(tuple(r.value(k) for k in keys), []).append(r)
    return sorted(groups.items(), key=lambda kv: tuple(sort_key(v) for v in kv[0]))


def split_list(values: Iterable[str] | None) -> list[str]:
    """['a,b', 'c'] -> ['a', 'b', 'c'] (options may be repeated and/or comma-separated)."""
    out: list[str] = []
    for v in values or []:
        out.extend(p.strip() for p in v.split(",") if p.strip())
    return out


BOOKKEEPING = ("tracking.", "progress", "sweep.", "device", "threads", "hydra.", "bias.")


def varying_params(runs: list[RunRecord], ignore: Iterable[str] = ("seed",)) -> list[str]:
    """Param keys (bookkeeping and ``ignore`` aside) whose value differs between ``runs`` (as
    values: "1" and "1.0" are equal); a key missing from some runs counts as a difference."""
    ignore = set(ignore)
    keys = set().union(*(r.params for r in runs)) if runs else set()
    return sorted(
        k
        for k in keys
        if k not in ignore and not k.startswith(BOOKKEEPING) and len({canon(r.params.get(k)) for r in runs}) > 1
    )


def short_key(param: str) -> str:
    """The short grouping name of a param key (``model.variant`` -> ``variant``), or the key itself."""
    for short, (source, name) in ALIASES.items():
        if source == "param" and name == param:
            return short
    return param


def choose_metrics(records: list[RunRecord], requested: list[str]) -> list[str]:
    """The requested metrics (each must exist in some run), or the default task metrics present."""
    present = set().union(*(r.metrics for r in records))
    if requested:
        for m in requested:
            if m not in present:
                shown = ", ".join(sorted(k for k in present if k.startswith(("test_", "val_")))) or ", ".join(
                    sorted(present)
                )
                raise AnalysisError(f"no run has metric '{m}'; metrics present: {shown}")
        return list(dict.fromkeys(requested))
    chosen = [m for m in DEFAULT_METRICS if m in present]
    if not chosen:
        chosen = sorted(k for k in present if k.startswith("test_"))
    if not chosen:
        raise AnalysisError("the runs have no test_* metrics; name the metrics with --metric")
    return chosen
