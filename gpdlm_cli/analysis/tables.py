"""Tables of the analysis commands: CSV, Markdown and the terminal (rich)."""

from __future__ import annotations

import csv
import sys
from pathlib import Path


# ----- tables ---------------------------------------------------------------------------------------
def write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for row in rows:
            w.writerow(["" if v is None else (repr(v) if isinstance(v, float) else v) for v in row])


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(esc(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def print_table(title: str, header: list[str], rows: list[list[str]], numeric_from: int = 0, file=None) -> None:
    """The table on the terminal (rich), every cell, header and title printed as it is: text in brackets is
    not read as rich markup (``[sweep]``, a run name's ``[a,b]`` were dropped)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    class _Console(Console):
        def on_broken_pipe(self) -> None:  # rich exits with 1; the CLI ends a closed pipe quietly (cli.py)
            self.quiet = True
            raise BrokenPipeError(32, "the reader of the output went away")

    out = file or sys.stdout
    console = _Console(file=out, width=None if out.isatty() else 200)
    table = Table(title=escape(title), show_lines=False)
    for i, h in enumerate(header):
        table.add_column(escape(str(h)), justify="right" if i >= numeric_from else "left", overflow="fold")
    for row in rows:
        table.add_row(*[escape(str(c)) for c in row])
    console.print(table)
