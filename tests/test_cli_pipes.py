"""``gpdlm ... | head -1``: a command whose stdout's reader went away ends quietly -- exit 141 (a shell's code
for SIGPIPE, as ``yes | head -1``) or 0, and nothing on stderr (it was "gpdlm: error: the MLflow store failed
(BrokenPipeError)" or a traceback)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpdlm_cli import cli

from .conftest import REPO

COMMANDS = [
    ["--help"],
    ["--version"],
    ["datasets", "list"],
    ["datasets", "info", "concrete"],
    ["datasets", "--help"],
    ["compare", "--help"],
    ["train", "--cfg", "job"],
]


@pytest.mark.slow
def test_a_closed_stdout_ends_every_printing_command_quietly(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    procs = []
    for argv in COMMANDS:
        r, w = os.pipe()
        os.close(r)  # the reader is gone before the command writes: every write is EPIPE
        procs.append(
            (
                argv,
                subprocess.Popen(
                    [sys.executable, "-m", "gpdlm_cli.cli", *argv],
                    cwd=tmp_path,
                    env=env,
                    stdout=w,
                    stderr=subprocess.PIPE,
                    text=True,
                ),
            )
        )
        os.close(w)
    for argv, proc in procs:
        _, err = proc.communicate(timeout=180)
        assert proc.returncode in (0, cli.EXIT_STDOUT_CLOSED), (argv, proc.returncode, err)
        assert err == "", (argv, err)
    assert [p.returncode for a, p in procs if a[:2] == ["datasets", "info"]] == [cli.EXIT_STDOUT_CLOSED]


def test_a_broken_pipe_raised_by_a_command_is_not_an_error(monkeypatch, capsys):
    """In process: the dispatcher turns a BrokenPipeError (or an error raised from one) into exit 141,
    without the one-line error it gives other OSErrors."""
    from gpdlm_cli.commands import datasets

    def broken(argv=None, out=None):
        try:
            raise BrokenPipeError(32, "Broken pipe")
        except BrokenPipeError as e:
            raise RuntimeError("while printing") from e

    monkeypatch.setattr(datasets, "main", broken)
    monkeypatch.setattr(cli, "_stdout_closed", lambda: cli.EXIT_STDOUT_CLOSED)  # keep pytest's stdout
    assert cli.main(["datasets", "list"]) == 141
    assert capsys.readouterr().err == ""


def test_rich_tables_raise_broken_pipe_instead_of_exiting_with_1():
    """rich's Console exits with SystemExit(1) on a closed pipe (``gpdlm runs | head -1`` ended with 1);
    gpdlm's tables raise BrokenPipeError, which the dispatcher ends with 141."""
    from gpdlm_cli.analysis.tables import print_table

    class Closed:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

        def isatty(self):
            return False

    with pytest.raises(BrokenPipeError):
        print_table("t", ["a", "b"], [["1", "2"]], file=Closed())


def test_a_table_prints_brackets_as_text():
    """rich read '[sweep]' (the sweep parents' label in `gpdlm runs`) and '[0.1,1]' as markup and dropped them."""
    import io

    from gpdlm_cli.analysis.tables import print_table

    out = io.StringIO()
    print_table("runs [x]", ["name", "beta [grid]"], [["sweep-1 [sweep]", "[0.1,1]"]], file=out)
    text = out.getvalue()
    assert "sweep-1 [sweep]" in text and "[0.1,1]" in text and "beta [grid]" in text and "runs [x]" in text
