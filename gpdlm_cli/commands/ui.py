"""``gpdlm ui [--port N] [--host H] [--tracking-uri URI]``: the MLflow UI on gpdlm's tracking store.

Replaces itself with ``python -m mlflow ui --backend-store-uri <uri> --host 127.0.0.1 --port 5000
--workers 1`` (the same Python, so the venv's MLflow). One worker process rather than MLflow's
default four: a personal UI needs no more, and it starts several times faster. The store is the one ``gpdlm train`` writes to by default
(``sqlite:///<cwd>/mlflow.db``) unless ``--tracking-uri`` names another. The server listens on
127.0.0.1 only -- reachable from this machine alone -- unless ``--host`` says otherwise (e.g.
``--host 0.0.0.0`` to serve the network; MLflow has no authentication, so do that only on a
trusted network). A SQLite store whose file does not exist is an error (the UI would silently
create an empty one).

What it opens: the address printed is the experiment's training runs in gpdlm's view (the classic
runs table rather than MLflow 3's GenAI view, key params and metrics as columns; see
``tracking.tracker.configure_view``), for ``--experiment`` (default: ``gpdlm``, else the experiment
with the latest run). The server runs without MLflow's job-execution service
(``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false``): gpdlm uses no GenAI jobs, and that service alone
starts eight more Python processes (~1 GB); the UI is then two processes (~0.5 GB).
"""

from __future__ import annotations

import os
import sys

from ..analysis import records as R
from ..analysis import store
from . import _cli

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 5000
DEFAULT_WORKERS = 1
# server features gpdlm does not use, off (MLflow's environment variables)
SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def build_parser():
    p = _cli.make_parser("gpdlm ui", "Open the MLflow UI on gpdlm's tracking store (bound to 127.0.0.1 by default).")
    p.epilog = "examples:\n  gpdlm ui\n  gpdlm ui --port 5001\n  gpdlm ui --tracking-uri sqlite:///runs/mlflow.db"
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default: {DEFAULT_PORT})")
    p.add_argument(
        "--host", default=DEFAULT_HOST, help=f"interface to bind (default: {DEFAULT_HOST}, this machine only)"
    )
    p.add_argument(
        "--tracking-uri",
        default=None,
        metavar="URI",
        help="MLflow tracking URI (default: sqlite:///<cwd>/mlflow.db, as for gpdlm train)",
    )
    p.add_argument(
        "--experiment",
        default=None,
        help="the experiment the printed address opens (default: gpdlm, else the one with the latest run)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=DEFAULT_WORKERS,
        help=f"server worker processes (default: {DEFAULT_WORKERS}; MLflow's own default is 4)",
    )
    return p


def build_argv(
    uri: str, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, workers: int = DEFAULT_WORKERS
) -> list[str]:
    """The command line of the MLflow UI server."""
    return [
        sys.executable,
        "-m",
        "mlflow",
        "ui",
        "--backend-store-uri",
        uri,
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        str(workers),
    ]


def command(argv: list[str]) -> list[str]:
    """Parse and check gpdlm ui's arguments; the server's argv (raises AnalysisError on bad input)."""
    args = build_parser().parse_args(argv)
    if not 1 <= args.port <= 65535:
        raise R.AnalysisError(f"--port must be in 1..65535; got {args.port}")
    if args.workers < 1:
        raise R.AnalysisError(f"--workers must be >= 1; got {args.workers}")
    if not args.host.strip():
        raise R.AnalysisError("--host must not be empty")
    uri = store.resolve_uri(args.tracking_uri)
    db = store.sqlite_path(uri)
    if db is not None and not db.exists():
        raise R.AnalysisError(
            f"no MLflow store at {db} (nothing tracked there yet): run 'gpdlm train' in that "
            f"directory first, or pass --tracking-uri"
        )
    return build_argv(uri, args.host, args.port, args.workers)


def server_env() -> dict:
    """The environment of the server: this one, with the unused MLflow services off (a user's own
    setting of those variables wins)."""
    return {**SERVER_ENV, **os.environ}


def landing_experiment(uri: str, name: str | None):
    """(id, name) of the experiment to open, with gpdlm's view configured on every experiment of
    the store (older stores lack it); None when the store has no experiment to show."""
    from mlflow.tracking import MlflowClient

    from ..tracking.tracker import configure_view

    client = MlflowClient(tracking_uri=uri)
    exps = [e for e in client.search_experiments() if e.name != "Default" or name == "Default"]
    for e in exps:
        configure_view(client, e.experiment_id, e.tags)
    if name is not None:
        chosen = [e for e in exps if e.name == name]
        if not chosen:
            raise R.AnalysisError(
                f"experiment '{name}' does not exist in {uri}; experiments there: "
                f"{', '.join(sorted(e.name for e in exps)) or '(none)'}"
            )
        return chosen[0].experiment_id, name
    named = [e for e in exps if e.name == R.DEFAULT_EXPERIMENT]
    if named:
        return named[0].experiment_id, named[0].name
    latest = max(exps, key=lambda e: e.last_update_time or 0, default=None)
    return (latest.experiment_id, latest.name) if latest else None


def main(argv: list[str]) -> int:
    from ..tracking.tracker import view_url

    cmd = command(argv)
    args = build_parser().parse_args(argv)
    uri, host, port = (cmd[cmd.index(o) + 1] for o in ("--backend-store-uri", "--host", "--port"))
    shown = f"[{host}]" if ":" in host else host
    base = f"http://{'127.0.0.1' if host == '0.0.0.0' else shown}:{port}"
    target = landing_experiment(uri, args.experiment)
    where = f"{view_url(base, target[0])}  (training runs of '{target[1]}')" if target else base
    print(f"gpdlm: MLflow UI for {uri}: open {where}  (Ctrl-C to stop)", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(cmd[0], cmd, server_env())
    return 0  # not reached


def cli() -> int:
    return _cli.run_cli(main)
