"""Commands that only print (help, the dataset registry, the run list of an empty folder) import nothing
heavy: no torch, pandas, scipy or MLflow (docs/performance.md, "Start-up imports").

Each command runs as a user runs it, ``python -X importtime -m gpdlm_cli.cli ...`` in a fresh interpreter;
the modules it imported are read from the ``-X importtime`` lines on stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .conftest import REPO

HEAVY = ("torch", "gpytorch", "pandas", "scipy", "sklearn", "mlflow", "hydra", "omegaconf", "matplotlib")

#: (argv, the heavy top-level packages it may import)
COMMANDS = [
    (["--help"], ()),
    (["datasets", "list"], ()),
    (["datasets", "info", "concrete"], ()),
    (["datasets", "info", "airline"], ()),
    (["datasets", "--help"], ()),
    (["runs"], ()),  # an empty folder: "no MLflow store" before MLflow is imported
    (["runs", "--help"], ()),
    (["compare", "--help"], ()),
    (["report", "--help"], ()),
    (["predict", "--help"], ()),
    (["resume", "--help"], ()),
    (["eval", "--help"], ()),
]


def imported_modules(stderr: str) -> set[str]:
    """The top-level packages named in ``-X importtime`` lines ("import time: self | cumulative | name")."""
    out = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":  # the header line
                out.add(name.split(".")[0])
    return out


@pytest.mark.slow
def test_printing_commands_import_nothing_heavy(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    procs = [
        (
            argv,
            allowed,
            subprocess.Popen(
                [sys.executable, "-X", "importtime", "-m", "gpdlm_cli.cli", *argv],
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
        for argv, allowed in COMMANDS
    ]
    for argv, allowed, proc in procs:
        out, err = proc.communicate(timeout=120)
        expected_rc = 2 if argv == ["runs"] else 0
        assert proc.returncode == expected_rc, (argv, err[-2000:])
        assert out.strip() or argv == ["runs"], argv
        modules = imported_modules(err)
        assert "gpdlm_cli" in modules, argv  # the parse found the import lines
        heavy = sorted(m for m in HEAVY if m in modules and m not in allowed)
        assert heavy == [], f"gpdlm {' '.join(argv)} imported {heavy}"


@pytest.mark.slow
def test_the_data_package_loads_the_registry_without_the_loaders():
    """In a fresh interpreter, listing the registry imports no loader module and no pandas; loading a
    table then imports them (the registry entries' loaders are checked at that point)."""
    code = (
        "import sys\n"
        "from gpdlm_cli.data import all_datasets, get_dataset_info\n"
        "infos = all_datasets()\n"
        "print(len(infos) > 30, get_dataset_info('concrete').task,\n"
        "      sorted(m for m in ('pandas', 'scipy', 'gpdlm_cli.data.sources', 'gpdlm_cli.data.uci') if m in sys.modules))\n"
        "from gpdlm_cli.data import registry\n"
        "print(sorted(registry.LOADERS) == sorted(registry.loaders()), 'gpdlm_cli.data.sources' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["True regression []", "True True"]


def test_an_entry_naming_a_missing_loader_is_refused_when_the_loaders_load(monkeypatch):
    from gpdlm_cli.data import registry
    from gpdlm_cli.data.catalog import DatasetInfo
    from gpdlm_cli.exceptions import DataError

    registry.all_datasets()
    bad = DatasetInfo(
        "nope_ds", "regression", "x", registry._Bound("nope_ds", "no_such_loader"), loader_key="no_such_loader"
    )
    monkeypatch.setitem(registry.REGISTRY, "nope_ds", bad)
    with pytest.raises(DataError, match="registry entry 'nope_ds' names loader 'no_such_loader', which does not exist"):
        registry.load_table("nope_ds")
