"""The bad-input table, generated from the config schema (issue 26, findings 4 and 9).

Every leaf key of the composed config -- the default config and every option of every config
group that adds keys -- is given values of the wrong type and out of range, chosen by the type of
its default (the schema: ``config_check.check_value``):

* true/false keys: ``abc``, ``2``;
* integer keys: ``abc``, ``1.5``, ``-1`` (no integer key is negative);
* float keys: ``abc``, ``nan``, ``inf``, ``-1`` (no float key is negative or non-finite);
* list keys: ``abc``; keys whose default is null: ``inf``, and ``abc`` where a string is no value;
* string keys that name a choice: ``nosuch``; keys that name a metric: ``val_nosuch``.

Each case runs ``gpdlm train`` in-process (``cli.main``, stderr captured, SystemExit caught) and
must end with exactly one ``gpdlm: error:`` line, a non-zero exit, no run folder and no MLflow run.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from gpdlm_cli import cli
from gpdlm_cli.config_check import composed
from gpdlm_cli.tracking import flatten

from .conftest import assert_no_mlflow_run, gpdlm_subprocess, run_cli

CONF = Path(cli.__file__).resolve().parent / "conf"
GROUPS = ("model", "kernel", "likelihood", "estimator", "features", "dataset", "trainer", "tracking")
SKIP_PREFIXES = ("hydra",)
# keys whose values are free text or names looked up elsewhere: any string is a value
FREE_TEXT = {
    "tracking.experiment",
    "tracking.run_name",
    "tracking.uri",
    "dataset.path",
    "dataset.target",
    "dataset.sep",
    "dataset.planes_path",
    "sweep.cache_dir",
}


# keys that name one of the run's metrics (checked against those the run computes, before training)
METRIC_NAMES = {"trainer.keep_best", "sweep.objective"}
# every case runs with a small budget: a value no validator catches trains for seconds, not minutes
BUDGET = ["trainer.max_iters=2"]


def _leaves(cfg) -> dict:
    return flatten(OmegaConf.to_container(cfg, resolve=True))


def _option_keys(group: str, option: str) -> set[str]:
    raw = OmegaConf.to_container(OmegaConf.load(CONF / group / f"{option}.yaml"))
    raw.pop("defaults", None)
    return {f"{group}.{k}" for k in flatten(raw)}


def _inputs_digest() -> str:
    """sha256 of everything the schema is composed from: the package's configs and code (the structured
    configs, the search-path plugin) and GPDLM_CONFIG_PATH."""
    root = CONF.parent.parent
    h = hashlib.sha256(os.environ.get("GPDLM_CONFIG_PATH", "").encode())
    for f in sorted(
        [*(root / "gpdlm_cli").rglob("*.py"), *CONF.rglob("*.yaml"), *(root / "hydra_plugins").rglob("*.py")]
    ):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def schema() -> dict[str, tuple[tuple[str, ...], object]]:
    """``_schema()``, kept in the system's temp folder under the digest of its inputs: collection builds
    the table in every xdist worker, and its ~40 composes cost ~5 s each time; any change to a config
    or to the code composes it again (a damaged file too)."""
    cache = Path(tempfile.gettempdir()) / f"gpdlm-test-schema-{_inputs_digest()[:32]}.json"
    try:
        return {k: (tuple(g), v) for k, (g, v) in json.loads(cache.read_text()).items()}
    except (OSError, ValueError, TypeError):
        pass
    table = _schema()
    tmp = cache.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(table))
    os.replace(tmp, cache)  # atomic: a worker reading it meanwhile sees the old file or none
    return table


def _schema() -> dict[str, tuple[tuple[str, ...], object]]:
    """{key: (group overrides that bring the key in, its default)}: the default config's keys, then
    those of every group option that adds any (composed only for those options)."""
    keys = {k: ((), v) for k, v in _leaves(composed(())).items()}
    for group in GROUPS:
        for f in sorted((CONF / group).glob("*.yaml")):
            if _option_keys(group, f.stem) <= set(keys):
                continue
            choice = (f"{group}={f.stem}",)
            for k, v in _leaves(composed(choice)).items():
                keys.setdefault(k, (choice, v))
    return {k: v for k, v in keys.items() if not k.startswith(SKIP_PREFIXES)}


def bad_values(key: str, default) -> list[str]:
    if isinstance(default, bool):
        return ["abc", "2"]
    if isinstance(default, int):
        return ["abc", "1.5", "-1"]
    if isinstance(default, float):
        return ["abc", "nan", "inf", "-1"]
    if isinstance(default, list):
        return ["abc"]
    if default is None:
        return ["inf"] + ([] if key in FREE_TEXT else ["abc"])
    if key in METRIC_NAMES:
        return ["val_nosuch"]
    if isinstance(default, str) and key not in FREE_TEXT:
        return ["nosuch"]
    return []


# The keys of the `bias` block are read by `gpdlm bias` only (which studies a sampling estimator)
COMMAND = {"bias": ("bias", ("estimator=bmc",))}
# Keys no validator checks yet, in files other work is changing (methods/rkhs.py): xfail, not hidden
KNOWN_GAPS = {("model.best_by", "nosuch"): "methods/rkhs.py does not check model.best_by"}


def cases():
    """One case per (key, bad value). The fast lane runs the first case of each (top-level group, bad
    value) pair -- each kind of rejection once per group (69 of ~440); ``make test`` runs them all."""
    out = []
    kinds: set[tuple[str, str]] = set()
    for key, (groups, default) in schema().items():
        command, extra = COMMAND.get(key.split(".")[0], ("train", ()))
        for value in bad_values(key, default):
            marks = [pytest.mark.xfail(reason=KNOWN_GAPS[key, value], run=False)] if (key, value) in KNOWN_GAPS else []
            kind = (key.split(".")[0], value)
            if kind in kinds:
                marks.append(pytest.mark.slow)
            kinds.add(kind)
            args = (*groups, *extra)
            out.append(
                pytest.param(
                    command,
                    args,
                    key,
                    value,
                    marks=marks,
                    id=f"{command} {' '.join(args) + ' ' if args else ''}{key}={value}",
                )
            )
    return out


CASES = cases()


@pytest.mark.slow
def test_the_table_covers_every_key_of_the_schema():
    keys = {p.values[2] for p in CASES}
    uncovered = [k for k, (_, v) in schema().items() if k not in keys]
    assert uncovered == [] or all(k in FREE_TEXT or isinstance(schema()[k][1], dict) for k in uncovered), uncovered
    assert len(keys) > 150  # the default config alone has 76 keys


def assert_rejected(rc, lines, cwd: Path):
    assert rc != 0, lines
    assert len(lines) == 1 and lines[0].startswith("gpdlm: error: "), lines
    assert not (cwd / "outputs").exists() and not (cwd / "run").exists()
    assert_no_mlflow_run(cwd / "mlflow.db")


@pytest.mark.parametrize("command,groups,key,value", CASES)
def test_bad_value_is_one_line_and_leaves_nothing(command, groups, key, value, tmp_path, capsys):
    budget = [] if key == "trainer.max_iters" else BUDGET
    argv = [
        command,
        *groups,
        *budget,
        f"{key}={value}",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        "progress=false",
        f"hydra.run.dir={tmp_path}/run",
    ]
    rc, lines = run_cli(argv, tmp_path, capsys)
    assert_rejected(rc, lines, tmp_path)


# ----- the probe's cases that used to leave an outputs/ folder (finding 9), with the default run dir ----
def _inf_csv(tmp_path) -> str:
    rows = [f"{i},{(i * 7) % 5},{0.5 * i}" for i in range(40)]
    rows[17] = "17,inf,8.5"
    (tmp_path / "inf.csv").write_text("a,b,y\n" + "\n".join(rows) + "\n")
    return f"dataset.path={tmp_path / 'inf.csv'}"


PROBED = {  # id in the probe -> (overrides, the start of the one line)
    "b03": (["trainer.lr=inf"], "the 'lr' parameter of trainer must be a finite number"),
    "b11": (["seed=-1"], "the 'seed' parameter of gpdlm must be an integer in [0, 2^63)"),
    "b19": (["seed=abc"], "the 'seed' parameter of gpdlm must be an integer"),
    "c06": (["dataset=csv", "dataset.target=y", "{csv}"], "dataset 'csv' ("),
    "t01": (["tracking.uri=http://127.0.0.1:1"], "the MLflow tracking server http://127.0.0.1:1 cannot be reached"),
    "t02": (
        ["tracking.uri=sqlite:////proc/gpdlm/mlflow.db"],
        "tracking.uri=sqlite:////proc/gpdlm/mlflow.db: the folder",
    ),
    # issue 45: a 600-character experiment name (MLflow's limit is 500) said "check tracking.uri", after the folder
    "n45": (
        ["tracking.experiment=" + "e" * 600],
        "the 'experiment' parameter of tracking must be at most 500 characters",
    ),
}


@pytest.mark.parametrize("probe", sorted(PROBED))
def test_the_probes_bad_inputs_leave_no_outputs_folder(probe, tmp_path, capsys):
    """In the launch folder, as a user types them (the default outputs/<date>/<time> run folder;
    f_e, a locked store, is in tests/commands/test_faults.py)."""
    overrides, start = PROBED[probe]
    overrides = [_inf_csv(tmp_path) if o == "{csv}" else o for o in overrides]
    tracking = (
        [] if any(o.startswith("tracking.uri") for o in overrides) else [f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"]
    )
    rc, lines = run_cli(["train", *BUDGET, "threads=1", "progress=false", *overrides, *tracking], tmp_path, capsys)
    assert_rejected(rc, lines, tmp_path)
    assert lines[0].startswith("gpdlm: error: " + start), lines
    if probe == "c06":
        assert "column 'b' has the non-finite value inf in row 17" in lines[0]


@pytest.mark.slow
def test_a_non_finite_csv_cell_from_the_command_line(tmp_path):
    """The one subprocess case of bad input: `gpdlm train dataset=csv ...` with an inf cell (43 lines
    before) exits 2 with one line as a shell sees it, and leaves no run folder and no MLflow run."""
    proc = gpdlm_subprocess(
        [
            "train",
            "dataset=csv",
            "dataset.target=y",
            _inf_csv(tmp_path),
            *BUDGET,
            "threads=1",
            "progress=false",
            f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        ],
        tmp_path,
    )
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, lines
    assert_rejected(proc.returncode, lines, tmp_path)
    assert "column 'b' has the non-finite value inf in row 17 (1 such cell)" in lines[0]
