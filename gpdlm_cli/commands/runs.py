"""Compatibility names for ``commands/evaluate.py``, which still imports ``from . import runs as R``.

The code moved: run records to ``gpdlm_cli.analysis.records``, the store to ``analysis.store``,
tables to ``analysis.tables``, the command-line frame to ``commands._cli``. Delete this module once
evaluate.py imports those directly (issue 20: its restructure is another part's).
"""

from __future__ import annotations

from ..analysis.records import AnalysisError, split_list
from ..analysis.store import get_experiment, is_training_run, open_store, search_all
from ._cli import make_parser, run_cli

__all__ = ["AnalysisError", "get_experiment", "is_training_run", "make_parser", "open_store", "run_cli",
           "search_all", "split_list"]
