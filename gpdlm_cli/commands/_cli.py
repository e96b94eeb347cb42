"""The command-line frame of the analysis commands (compare, select, report, runs, ui, eval):
an argparse parser whose errors are one line, the store options, and ``run_cli`` (a GpdlmError is
``gpdlm: error: ...`` and exit code 2, an MLflow failure exit code 1)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from ..analysis.records import DEFAULT_EXPERIMENT, AnalysisError
from ..exceptions import GpdlmError

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1


# ----- the command-line frame ------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2 instead of argparse's usage dump
        raise AnalysisError(f"{self.prog}: {message}")


def make_parser(prog: str, description: str) -> argparse.ArgumentParser:
    return _Parser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)


def add_store_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--experiment", default=DEFAULT_EXPERIMENT, help="MLflow experiment (default: gpdlm)")
    p.add_argument(
        "--tracking-uri",
        default=None,
        metavar="URI",
        help="MLflow tracking URI (default: sqlite:///<cwd>/mlflow.db, as for gpdlm train)",
    )


def run_cli(fn: Callable[[list[str]], int], argv: list[str] | None = None) -> int:
    """Call ``fn(argv)``; a GpdlmError becomes ``gpdlm: error: ...`` (one line) and exit code 2, an
    MLflow failure one line and exit code 1."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return int(fn(argv) or 0)
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_BAD_INPUT)
    except GpdlmError as e:
        print(f"gpdlm: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as e:
        from mlflow.exceptions import MlflowException

        if isinstance(e, MlflowException):
            print(f"gpdlm: error: MLflow: {_one_line(e)}", file=sys.stderr)
            return EXIT_FAILED
        raise


def _one_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[0] if lines else type(e).__name__
