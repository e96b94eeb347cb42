"""Every example in the README runs when pasted (issue 44): the ``gpdlm`` commands of its shell blocks
are extracted with a Markdown parser and

* single runs (``gpdlm train key=value ...``) compose with ``--cfg job`` (the overrides are checked as
  ``gpdlm`` checks them: an unknown option or key is an error) -- exit 0;
* multiruns (``gpdlm train -m ...``) and ``gpdlm sweep beta ...`` give their plan, every job
  composed, as ``--dry-run`` does (without its timing of iterations);
* the informational commands (``--help``, ``datasets list|info``) run;
* the small study block (a smoke preset, then ``runs``, ``select``, ``compare``, ``report``) runs for
  real, in a fresh interpreter (slow).

``gpdlm ui`` starts a server and is the one command left out (tests/commands/test_ui.py covers it).
A README command this file does not know how to check fails the test, so a new example gets a check.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap

import pytest
from markdown_it import MarkdownIt

from tests.conftest import REPO, run_cli

README = REPO / "README.md"
SHELL = ("bash", "sh", "shell", "console")
NOT_RUN = {"ui"}  # starts a web server


def readme_blocks() -> list[list[list[str]]]:
    """The README's shell blocks, each a list of ``gpdlm`` commands as argument lists (``\\``-continued
    lines joined, ``# comments`` dropped)."""
    blocks = []
    for tok in MarkdownIt("commonmark").parse(README.read_text(encoding="utf-8")):
        if tok.type != "fence" or tok.info.strip().split(" ")[0] not in SHELL:
            continue
        commands = []
        for line in tok.content.replace("\\\n", " ").splitlines():
            args = shlex.split(line, comments=True)
            if args and args[0] == "gpdlm":
                commands.append(args[1:])
        blocks.append(commands)
    return blocks


COMMANDS = [c for block in readme_blocks() for c in block]
STUDY = next(b for b in readme_blocks() if any(c[:1] == ["report"] for c in b))


def _kind(args: list[str]) -> str:
    if args and args[0] in ("train", "bias"):
        return "multirun" if ("-m" in args or "--multirun" in args) else "single"
    if args[:2] == ["sweep", "beta"]:
        return "sweep"
    if args[:1] in (["--help"], ["-h"], ["--version"]) or args[:2] in (["datasets", "list"], ["datasets", "info"]):
        return "info"
    if args and args[0] in NOT_RUN:
        return "not run"
    if any(args == c for c in STUDY):
        return "study"
    return "unknown"


def test_the_readme_has_examples_and_every_one_is_checked():
    kinds = [_kind(c) for c in COMMANDS]
    assert len(COMMANDS) >= 20
    assert "unknown" not in kinds, [c for c, k in zip(COMMANDS, kinds) if k == "unknown"]
    assert {"single", "multirun", "sweep", "info", "study"} <= set(kinds)
    assert ["train"] in COMMANDS and ["train", "-m", "model=dlm,svgp", "seed=0,1,2"] in COMMANDS  # the two commands


@pytest.mark.parametrize("args", [c for c in COMMANDS if _kind(c) == "single"], ids=" ".join)
def test_single_run_examples_compose(args, tmp_path, capsys):
    rc, err = run_cli([*args, "--cfg", "job"], tmp_path, capsys)
    assert rc == 0, err
    assert not (tmp_path / "mlflow.db").exists()  # composed, not run


@pytest.mark.parametrize("args", [c for c in COMMANDS if _kind(c) in ("multirun", "sweep")], ids=" ".join)
def test_sweep_examples_plan(args, monkeypatch, tmp_path):
    from gpdlm_cli.config_check import check_overrides
    from gpdlm_cli.sweep.plan import plan

    monkeypatch.chdir(tmp_path)
    if args[0] == "sweep":
        from gpdlm_cli.commands.sweep import sweep_overrides

        assert check_overrides(args[2:]) is None
        multiruns = sweep_overrides(args[1], args[2:])
    else:
        rest = [a for a in args[1:] if a not in ("-m", "--multirun")]
        assert check_overrides(rest, command=args[0]) is None
        multiruns = [rest]
    plans = [plan([a for a in m if a not in ("-m", "--multirun")]) for m in multiruns]
    assert plans and all(len(p.jobs) >= 1 for p in plans)
    if args == ["train", "-m", "model=dlm,svgp", "seed=0,1,2"]:
        assert len(plans[0].jobs) == 6


@pytest.mark.parametrize("args", [c for c in COMMANDS if _kind(c) == "info"], ids=" ".join)
def test_informational_examples_run(args, tmp_path, capsys):
    rc, err = run_cli(args, tmp_path, capsys)
    assert rc == 0, err


STUDY_SCRIPT = """
import sys, json
from gpdlm_cli import cli
for args in json.loads(sys.argv[1]):
    code = cli.main(list(args))  # cli.main replaces sys.argv
    print("README-EXAMPLE", code, " ".join(args), flush=True)
    if code != 0:
        sys.exit(1)
"""


@pytest.mark.slow
def test_the_small_study_block_runs_as_pasted(tmp_path):
    """The README's "small study" block, command by command, in one fresh interpreter from an empty folder
    (one process, so the imports are paid once: ~30 s)."""
    import json

    commands = [c for c in STUDY if _kind(c) == "study" or c[:1] == ["train"]]
    assert commands[0][:3] == ["train", "-m", "+experiment=regression_logloss_smoke"]
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
        MPLBACKEND="Agg",
    )
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(STUDY_SCRIPT), json.dumps(commands)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    ran = [ln for ln in done.stdout.splitlines() if ln.startswith("README-EXAMPLE")]
    assert done.returncode == 0, (ran, done.stderr[-3000:])
    assert len(ran) == len(commands) and all(ln.split()[1] == "0" for ln in ran)
    assert (tmp_path / "mlflow.db").exists()
