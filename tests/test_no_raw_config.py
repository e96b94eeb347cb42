"""Library modules never read the raw config (issue 46, item 2): the composition root (``build.py``,
``run/``) turns a composed config into typed specs once (``gpdlm_cli.schema``) and families, the
trainer and the data layer receive those. This test greps every module of ``gpdlm_cli`` outside the
composition root, the schema, the Hydra entry points, the commands and the dispatcher for ``cfg.`` and
``DictConfig`` and fails on any hit not listed below with its reason."""

from __future__ import annotations

import re
from pathlib import Path

import gpdlm_cli

PACKAGE = Path(gpdlm_cli.__file__).resolve().parent

#: where the raw config is at home: the composition root (``build``, ``prepare``, ``run/``), the
#: multirun's composition (``sweep/``: it plans and composes jobs' configs and is Hydra's callback), the
#: schema that checks it, Hydra's entry points, the subcommands and the dispatcher with its check of
#: the overrides
OUTSIDE = (
    "run/",
    "sweep/",
    "schema/",
    "build.py",
    "prepare.py",
    "hydra_apps.py",
    "commands/",
    "cli.py",
    "config_check.py",
)

#: modules still allowed to name the config, each with its reason (an entry here is a known debt:
#: keep it short and remove it with the change that pays it)
EXCEPTIONS = {
    "data/registry.py": "turns OmegaConf containers a caller passes as dataset options into plain Python "
    "(it names the type, it reads no config)",
}

PATTERN = re.compile(r"\bcfg\.|\bDictConfig\b")


def hits() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(OUTSIDE):
            continue
        lines = [
            f"{i}: {line.strip()}" for i, line in enumerate(path.read_text().splitlines(), 1) if PATTERN.search(line)
        ]
        if lines:
            found[rel] = lines
    return found


def test_no_library_module_reads_the_raw_config():
    unexpected = {rel: lines for rel, lines in hits().items() if rel not in EXCEPTIONS}
    assert not unexpected, "library modules that read the raw config (take a spec instead):\n" + "\n".join(
        f"{rel}:{line}" for rel, lines in unexpected.items() for line in lines[:5]
    )


def test_every_listed_exception_is_still_needed():
    stale = [rel for rel in EXCEPTIONS if rel not in hits()]
    assert not stale, f"remove these from EXCEPTIONS (they no longer name the config): {stale}"


def test_the_grep_sees_a_config_read(tmp_path):
    assert PATTERN.search("    m = cfg.model") and PATTERN.search("def f(c: DictConfig):")
    assert not PATTERN.search("    m = spec.model") and not PATTERN.search("mycfg.x = 1")
