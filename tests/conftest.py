"""Shared fixtures: compose the real Hydra config (shrunk for speed) and a session MLflow store."""

from __future__ import annotations

import dataclasses
import os
import signal
from pathlib import Path

import pytest
from omegaconf import OmegaConf

os.environ.setdefault("MPLBACKEND", "Agg")
# pytest-xdist runs one worker per core: one BLAS/torch thread each (and in the gpdlm subprocesses
# they start) avoids oversubscribing the cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")


def _memoise_hydra_yaml() -> None:
    """Parse each of Hydra's config files once per test process, as every gpdlm command does
    (``sweep.compose.cache_config_files``): the tests' own composes (``compose`` below, ``gpdlm train``
    in-process, the bad-input table's collection) re-read ~20 YAML files each otherwise."""
    from gpdlm_cli.sweep.compose import cache_config_files

    cache_config_files()


_memoise_hydra_yaml()


@pytest.fixture(autouse=True, scope="session")
def _private_data_cache(tmp_path_factory):
    """Parsed-table cache in a temp dir, so tests never write into the repository's datasets/. Under
    pytest-xdist the workers share one (beside their own temp dirs): each table is parsed once per test run,
    not once per worker (the 2008 flights: ~14 s). The cache is safe to share: tables are written atomically
    and the checksum record is updated under a lock (``data.download._updating_db``)."""
    old = os.environ.get("GPDLM_DATA")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = tmp_path_factory.getbasetemp().parent / "gpdlm_data"
        shared.mkdir(exist_ok=True)
        os.environ["GPDLM_DATA"] = str(shared)
    else:
        os.environ["GPDLM_DATA"] = str(tmp_path_factory.mktemp("gpdlm_data"))
    # the byte-exact mirror of the registry's GitHub-hosted files beside the checkout (../shared):
    # tests and the gpdlm subprocesses they start fetch real UCI data from it, offline
    os.environ.setdefault(
        "GPDLM_DATA_MIRROR", str(Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "mirror")
    )
    yield
    if old is None:
        os.environ.pop("GPDLM_DATA", None)
    else:
        os.environ["GPDLM_DATA"] = old


def pytest_addoption(parser):
    parser.addoption(
        "--device",
        default=None,
        choices=("cpu", "cuda", "auto"),
        help="gpdlm's default device for every run the tests start (composed configs and `gpdlm` "
        "subprocesses, through GPDLM_DEVICE): `pytest --device=cuda` trains the suite on CUDA",
    )


def pytest_configure(config):
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    # Ctrl-C as in a terminal, whatever this process inherited: a suite started in the background by a shell
    # without job control (`make test > log &`) inherits SIGINT *ignored*, and so would every `gpdlm` the tests
    # start (an ignored signal stays ignored across exec); the Ctrl-C tests would then see nothing happen
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    device = config.getoption("--device")
    if device is not None:
        os.environ["GPDLM_DEVICE"] = device  # conf/config.yaml: device: ${oc.env:GPDLM_DEVICE,auto}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks and -m deselects
def pytest_collection_modifyitems(config, items):
    """How `make test` spreads the suite over its workers (``pytest -n 2 --dist loadgroup``):

    * the modules holding slow tests run first (each module's tests stay together and in order), so the
      suite ends on sub-second tests and no worker idles while the other finishes a minute-long run;
    * a module whose tests share a module-scoped fixture (trained runs, a populated store) is one
      xdist group: one worker builds the fixture once, instead of each worker building it; these
      groups (the largest units of work) are handed out next, before the single tests that balance
      the workers at the end.
    """
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    grouped = set()
    for item in items:
        defs = getattr(item, "_fixtureinfo", None)
        if defs and any(d.scope == "module" for fds in defs.name2fixturedefs.values() for d in fds):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
            grouped.add(item.path)
    items.sort(key=lambda item: (item.path not in slow, item.path not in grouped))


@pytest.fixture(autouse=True)
def _logging_handlers_restored():
    """Each test leaves the logging handlers as it found them: an in-process Hydra run attaches console
    handlers to the test's captured stdout, which is closed after that test, and a later log record
    through them printed '--- Logging error ---' into another test's captured stderr."""
    import logging

    def loggers() -> list[logging.Logger]:
        named = logging.Logger.manager.loggerDict.values()
        return [logging.getLogger()] + [lg for lg in named if isinstance(lg, logging.Logger)]

    before = {id(lg): list(lg.handlers) for lg in loggers()}
    yield
    for lg in loggers():
        kept = before.get(id(lg), [])
        for handler in list(lg.handlers):
            if handler not in kept:
                lg.removeHandler(handler)


@pytest.fixture(scope="session")
def device():
    """The torch device the suite trains on (``--device``; CPU by default, as in CI)."""
    import torch

    name = os.environ.get("GPDLM_DEVICE", "cpu")
    return torch.device("cuda" if name == "auto" and torch.cuda.is_available() else ("cpu" if name == "auto" else name))


def exhaustive(cases, *, fast, ids=None) -> list:
    """The cases of an exhaustive table (every option, every preset, every key's bad values) as
    ``pytest.param``s: those for which ``fast(case)`` is true (or, ``fast`` an int, the first ``fast``
    cases) run in both lanes, the others only in ``make test`` (marked ``slow``). The fast lane checks
    each kind of case once; the full suite checks every case. ``ids``: a function of the case (default:
    pytest's own)."""
    out = []
    for i, case in enumerate(cases):
        values = case if isinstance(case, tuple) else (case,)
        in_fast = i < fast if isinstance(fast, int) else fast(case)
        marks = () if in_fast else (pytest.mark.slow,)
        out.append(pytest.param(*values, marks=marks, id=ids(case) if ids else None))
    return out


_COMPOSED: dict = {}
_READONLY: dict = {}
_SHAPES: dict = {}


def compose(overrides=(), *, hydra: bool = False, readonly: bool = False):
    """The composed gpdlm config, exactly as `gpdlm train` would build it (with its ``hydra`` node,
    the launcher's and sweeper's settings, when ``hydra=True``). Each distinct (overrides, hydra, working
    directory) is composed once per test process and handed out as a deep copy, which the caller may
    change freely: a compose costs ~0.1-0.5 s, a copy ~0.02 s, and many tests compose the same presets.
    Without ``hydra``, a list that differs from one composed before only in the values of leaf keys (the
    same group choices, ``trainer.lr=0.1`` for ``=0.3``) is that config with its values set, as
    ``hydra_apps.compose_configs`` does for a sweep's jobs (``_leaf_copy``; tests/test_conftest_compose.py
    checks it against Hydra's compose, ``GPDLM_TEST_COMPOSE_CHECK=1`` checks every one of a run).
    Interpolations (``${oc.env:...}``) stay unresolved in the copy, as in a fresh compose. With
    ``readonly=True`` every call gets one shared read-only copy instead (for tests that only look: the plan
    tests read ~700 configs, whose copies cost more than the composes they saved)."""
    import copy

    overrides = list(overrides)
    key = (tuple(overrides), hydra, os.getcwd())
    if key not in _COMPOSED:
        _COMPOSED[key] = (None if hydra else _leaf_copy(overrides)) or hydra_compose(overrides, hydra=hydra)
    if not readonly:
        return copy.deepcopy(_COMPOSED[key])
    if key not in _READONLY:
        _READONLY[key] = copy.deepcopy(_COMPOSED[key])
        OmegaConf.set_readonly(_READONLY[key], True)
    return _READONLY[key]


def hydra_compose(overrides, *, hydra: bool = False):
    """Hydra's own compose of gpdlm's config with ``overrides`` (no cache)."""
    from hydra import compose as _compose
    from hydra import initialize_config_module

    with initialize_config_module(config_module="gpdlm_cli.conf", version_base="1.3"):
        return _compose(config_name="config", overrides=list(overrides), return_hydra_config=hydra)


def _leaf_copy(overrides: list[str]):
    """The config of ``overrides`` as a copy of an earlier compose of the same *shape* -- the same overrides
    but for plain ``a.b=value`` ones on keys that config has as values (no group choice, ``+``/``~``,
    package, list or dict) -- with those values set in order (``OmegaConf.update``: what Hydra does with them
    after composing the defaults); None where there is no such compose yet (this one becomes it)."""
    import copy

    from hydra.core.override_parser.overrides_parser import OverridesParser

    from gpdlm_cli.hydra_apps import is_leaf, override_shape

    try:
        shape, values = override_shape(OverridesParser.create().parse_overrides(overrides))
    except Exception:  # Hydra's compose says what is wrong
        return None
    shape = (*shape, os.getcwd())
    base = _SHAPES.get(shape)
    if base is None:  # the first list of its shape: its compose is the shape's base
        _SHAPES[shape] = base = hydra_compose(overrides)
        return base
    if not all(is_leaf(base, o.key_or_group) for o in values):
        return None
    cfg = copy.deepcopy(base)
    for o in values:
        OmegaConf.update(cfg, o.key_or_group, o.value(), merge=True)
    if os.environ.get("GPDLM_TEST_COMPOSE_CHECK"):
        assert OmegaConf.to_yaml(cfg) == OmegaConf.to_yaml(hydra_compose(overrides)), overrides
    return cfg


def sweep_grid(overrides=()) -> dict[str, list[str]]:
    """The grid `gpdlm train -m <overrides>` sweeps: the composed hydra.sweeper.params as {key: [values]}
    (a preset's grid for ``["+experiment=NAME"]``)."""
    cfg = compose(overrides, hydra=True, readonly=True)
    return {k: str(v).split(",") for k, v in cfg.hydra.sweeper.params.items()}


FAST = ["trainer.max_iters=60", "trainer.eval_every=30", "progress=false"]


def fast(overrides=()):
    """FAST plus M=20 for the models that have inducing points."""
    extra = [] if "model=exact" in overrides else ["model.num_inducing=20"]
    return FAST + extra + list(overrides)


@pytest.fixture(scope="session")
def template_db(tmp_path_factory):
    """An empty MLflow SQLite store with its schema, made once per test process (MLflow's migrations take
    seconds); tests copy it (``copy_store``) wherever a store's creation is not what they check."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow_template") / "mlflow.db"
    client = MlflowClient(f"sqlite:///{path}")
    client.search_experiments()  # creates the schema
    return path


def copy_store(template, directory) -> str:
    """A fresh store ``directory/mlflow.db`` (a copy of the template, the file `gpdlm` would create there
    by default); its URI."""
    import shutil

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    dest = directory / "mlflow.db"
    shutil.copyfile(template, dest)
    return f"sqlite:///{dest}"


@pytest.fixture(scope="session")
def mlflow_uri(template_db, tmp_path_factory):
    """One SQLite store per test session (a copy of the template: its schema is made once)."""
    return copy_store(template_db, tmp_path_factory.mktemp("mlflow"))


def ar1_series(T: int, seed: int = 0):
    """A toy input/output sequence: u_t ~ N(0, 1), y_t = 0.5 y_{t-1} + u_t (y_0 = 0)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    u = rng.normal(size=T)
    y = np.zeros(T)
    for t in range(1, T):
        y[t] = 0.5 * y[t - 1] + u[t]
    return u, y


# ----- running `gpdlm` as a user does: in this process, or (slow) in a fresh interpreter ----------------
REPO = Path(__file__).resolve().parents[1]


def gpdlm_subprocess(args, cwd, *, env=None, timeout=None, runner=None, **kwargs):
    """``python -m gpdlm_cli.cli <args>`` in a fresh interpreter started in ``cwd`` (stdout/stderr
    captured as text), importing this checkout's gpdlm_cli. Tests that use it are ``slow``.
    ``runner=subprocess.Popen`` starts it in the background (``kwargs`` then say where its output goes)."""
    import subprocess
    import sys

    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    if runner is not None:
        return runner([sys.executable, "-m", "gpdlm_cli.cli", *args], cwd=cwd, env=env, **kwargs)
    return subprocess.run(
        [sys.executable, "-m", "gpdlm_cli.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        **kwargs,
    )


@dataclasses.dataclass
class SmokeRuns:
    """What one run of a smoke preset (`gpdlm train -m +experiment=<preset>`, tests/run/test_sweeps.py) leaves
    for a family's checks: its MLflow store, its child runs, the command's stderr and its folder."""

    preset: str
    uri: str
    experiment: str
    children: list
    stderr: str
    cwd: Path


def run_cli(argv, cwd, capsys) -> tuple[int, list[str]]:
    """``gpdlm <argv>`` in this process (``cli.main``), from ``cwd``: (exit code, non-empty stderr
    lines); a SystemExit (argparse, Hydra) gives its code."""
    import sys

    from gpdlm_cli import cli

    old_cwd, old_argv = os.getcwd(), list(sys.argv)
    os.chdir(cwd)
    try:
        try:
            rc = cli.main(list(argv))
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
    finally:
        os.chdir(old_cwd)
        sys.argv = old_argv
    err = capsys.readouterr().err
    return rc, [ln for ln in err.splitlines() if ln.strip()]


def assert_no_mlflow_run(db) -> None:
    """No run in any experiment of the SQLite store ``db`` (nothing when the store was never created)."""
    if Path(db).exists():
        from mlflow.tracking import MlflowClient

        client = MlflowClient(f"sqlite:///{db}")
        assert all(not client.search_runs([e.experiment_id]) for e in client.search_experiments())


from gpdlm_cli.tracking import NullTracker  # noqa: E402


class KillAt:
    """A training hook that sends this process SIGTERM during step ``at`` (delivered after the iteration)."""

    def __init__(self, at):
        self.at = at

    def after_step(self, iteration, epoch):
        if iteration == self.at:
            import signal

            os.kill(os.getpid(), signal.SIGTERM)

    def checkpoint_state(self):
        return {}

    def load_checkpoint_state(self, state):
        pass


def kill_last_stage_at(monkeypatch, at: int):
    """Make every run built from now on receive SIGTERM at step ``at`` of its last stage; returns the real
    ``build.build_method`` (``monkeypatch.setattr(build, "build_method", real)`` undoes it)."""
    from gpdlm_cli import build

    real = build.build_method

    def with_killer(cfg, data, task, *family, **options):  # options: build_method's spec=
        method = real(cfg, data, task, *family, **options)
        method.stages[-1].hooks = list(method.stages[-1].hooks) + [KillAt(at)]
        return method

    monkeypatch.setattr(build, "build_method", with_killer)
    return real


class NoRunTracker(NullTracker):
    """The tracker of bad-input tests: starting a run is the failure."""

    def run(self, *a, **k):  # pragma: no cover - reaching it is the failure
        raise AssertionError("an MLflow run was started for bad input")
