"""``gpdlm ui [--port N] [--host H] [--tracking-uri URI]``: the MLflow UI on gpdlm's tracking store.

Replaces itself with ``python -m mlflow ui --backend-store-uri <uri> --host 127.0.0.1 --port 5000
--workers 1`` (the same Python, so the venv's MLflow). One worker process rather than MLflow's
default four: a personal UI needs no more, and it starts several times faster. The store is the one ``gpdlm train`` writes to by default
(``sqlite:///<cwd>/mlflow.db``) unless ``--tracking-uri`` names another. The server listens on
127.0.0.1 only -- reachable from this machine alone -- unless ``--host`` says otherwise (e.g.
``--host 0.0.0.0`` to serve the network; MLflow has no authentication, so do that only on a
trusted network). A SQLite store whose file does not exist is an error (the UI would silently
create an empty one).
"""

from __future__ import annotations

import os
import sys

from . import runs as R

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 5000
DEFAULT_WORKERS = 1


def build_parser():
    p = R.make_parser("gpdlm ui", "Open the MLflow UI on gpdlm's tracking store (bound to 127.0.0.1 by default).")
    p.epilog = "examples:\n  gpdlm ui\n  gpdlm ui --port 5001\n  gpdlm ui --tracking-uri sqlite:///runs/mlflow.db"
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default: {DEFAULT_PORT})")
    p.add_argument("--host", default=DEFAULT_HOST, help=f"interface to bind (default: {DEFAULT_HOST}, this machine only)")
    p.add_argument("--tracking-uri", default=None, metavar="URI",
                   help="MLflow tracking URI (default: sqlite:///<cwd>/mlflow.db, as for gpdlm train)")
    p.add_argument("--workers", type=int, default=DEFAULT_WORKERS,
                   help=f"server worker processes (default: {DEFAULT_WORKERS}; MLflow's own default is 4)")
    return p


def build_argv(uri: str, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, workers: int = DEFAULT_WORKERS) -> list[str]:
    """The command line of the MLflow UI server."""
    return [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", host, "--port", str(port),
            "--workers", str(workers)]


def command(argv: list[str]) -> list[str]:
    """Parse and check gpdlm ui's arguments; the server's argv (raises AnalysisError on bad input)."""
    args = build_parser().parse_args(argv)
    if not 1 <= args.port <= 65535:
        raise R.AnalysisError(f"--port must be in 1..65535; got {args.port}")
    if args.workers < 1:
        raise R.AnalysisError(f"--workers must be >= 1; got {args.workers}")
    if not args.host.strip():
        raise R.AnalysisError("--host must not be empty")
    uri = R.resolve_uri(args.tracking_uri)
    db = R.sqlite_path(uri)
    if db is not None and not db.exists():
        raise R.AnalysisError(f"no MLflow store at {db} (nothing tracked there yet): run 'gpdlm train' in that "
                              f"directory first, or pass --tracking-uri")
    return build_argv(uri, args.host, args.port, args.workers)


def main(argv: list[str]) -> int:
    cmd = command(argv)
    uri, host, port = (cmd[cmd.index(o) + 1] for o in ("--backend-store-uri", "--host", "--port"))
    shown = f"[{host}]" if ":" in host else host
    print(f"gpdlm: MLflow UI for {uri} at http://{shown}:{port}  (Ctrl-C to stop)", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(cmd[0], cmd)
    return 0  # not reached


def cli() -> int:
    return R.run_cli(main)
