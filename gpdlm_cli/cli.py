"""``gpdlm <subcommand>``: a small dispatcher in front of Hydra.

Only the standard library is imported at module level, so ``gpdlm --help`` answers at once; each
subcommand imports what it needs. Hydra subcommands get the remaining argv as their own.
"""

from __future__ import annotations

import os
import sys

SUBCOMMANDS = {
    "train": ("gpdlm_cli.commands.train:train_main", "train one model (or a sweep with -m); Hydra overrides"),
    "sweep": ("gpdlm_cli.commands.sweep:cli", "sweep beta: the paper's grid [n, n/2, ..., 0.01] as a multirun"),
    "datasets": ("gpdlm_cli.commands.datasets:cli", "list, describe, fetch and verify datasets"),
    "compare": ("gpdlm_cli.commands.compare:cli", "mean +- SE tables and paper figures from the MLflow runs"),
    "select": ("gpdlm_cli.commands.select:cli", "pick beta by validation metric per group; test metrics (--refit)"),
    "report": (
        "gpdlm_cli.commands.report:cli",
        "a paper's tables and a verdict per claim from the runs (--claims PAPER)",
    ),
    "reproduce": (
        "gpdlm_cli.commands.reproduce:cli",
        "run what a paper's claims need (resumable, --budget) and write its report",
    ),
    "export": (
        "gpdlm_cli.commands.export:cli",
        "write an experiment's runs to a versioned run-records file (report --from)",
    ),
    "runs": (
        "gpdlm_cli.commands.run_list:cli",
        "list an experiment's runs with status and metrics; find and close stale ones",
    ),
    "ui": ("gpdlm_cli.commands.ui:cli", "open the MLflow UI on the tracking store (127.0.0.1 by default)"),
    "bias": ("gpdlm_cli.commands.bias:bias_main", "the DLM paper's gradient-bias statistics of an estimator"),
    "predict": ("gpdlm_cli.commands.evaluate:predict_cli", "apply a run's saved model to the rows of a CSV"),
    "eval": (
        "gpdlm_cli.commands.evaluate:eval_cli",
        "recompute metrics from saved models; back-fill them into their runs",
    ),
    "resume": ("gpdlm_cli.commands.evaluate:resume_cli", "continue a stopped run from its checkpoint"),
}

HYDRA_SUBCOMMANDS = ("train", "bias", "sweep")

USAGE = """usage: gpdlm <subcommand> [args]

gpdlm: train and compare scalable Gaussian-process models (DLM and sparse GPs, RKHS SCGD/MINIMAX,
GP-LSTM, sparse-spectrum GPs)

subcommands:
{rows}

Run 'gpdlm <subcommand> --help' for its options (Hydra's help for Hydra subcommands).
Examples:
  gpdlm train                                  # the default demo (DLM on concrete)
  gpdlm train model=svgp objective.beta=0.1    # beta-ELBO
  gpdlm train -m model=dlm,svgp seed=0,1,2     # a multirun sweep
"""


def usage() -> str:
    rows = "\n".join(f"  {name:<10} {desc}" for name, (_, desc) in SUBCOMMANDS.items())
    return USAGE.format(rows=rows)


#: the exit code when the reader of stdout went away (``gpdlm datasets list | head -1``): a shell's code for a
#: command ended by SIGPIPE (128 + 13), without a message -- as ``yes | head -1`` ends
EXIT_STDOUT_CLOSED = 141


def main(argv: list[str] | None = None) -> int:
    sweep = sys.modules.get("gpdlm_cli.sweep.callback")
    if sweep is not None:  # each command's exit code is its own sweeps' (a test or notebook runs several)
        sweep.OUTCOMES.clear()
    try:
        return _main(argv)
    except BrokenPipeError:
        return _stdout_closed()
    finally:  # the command's own config folders (-cd, hydra.searchpath) end with it (a test calls main again)
        compose = sys.modules.get("gpdlm_cli.sweep.compose")
        if compose is not None:
            compose.use_searchpath(())


def _broken_pipe(e: BaseException | None) -> bool:
    """Is ``e`` (or what it was raised from) a write to a closed stdout pipe?"""
    seen = 0
    while e is not None and seen < 10:
        if isinstance(e, BrokenPipeError):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def _stdout_closed() -> int:
    """stdout's reader went away: end quietly. What is still buffered goes to /dev/null, so that the
    interpreter's final flush does not raise again ("Exception ignored ... BrokenPipeError")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real stdout (a test's capture)
        pass
    return EXIT_STDOUT_CLOSED


def _main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        from . import __version__

        print(f"gpdlm {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name in ("-sc", "--shell-completion"):
        return _shell_completion(rest)
    if name not in SUBCOMMANDS:
        print(f"gpdlm: error: unknown subcommand '{name}'; choose from: {', '.join(SUBCOMMANDS)}", file=sys.stderr)
        return 2
    target = SUBCOMMANDS[name][0]
    module, func = target.split(":")
    _say_starting(name, rest)
    import importlib

    from .runtime import configure_process_env
    from .signals import exit_code, install_signal_handlers, killed_reason

    configure_process_env()  # before torch is imported (runtime.py: speed on a shared machine)
    install_signal_handlers()  # SIGTERM/SIGHUP end the command like Ctrl-C: runs end KILLED
    if name in HYDRA_SUBCOMMANDS:  # the user's own config folders (-cd, hydra.searchpath) for gpdlm's composes
        from .sweep.compose import cache_config_files, searchpath_of, use_searchpath, without_config_dir

        cache_config_files()  # each config file parsed once per process, not once per compose
        use_searchpath(searchpath_of(rest))
        if name != "sweep":  # `gpdlm sweep KIND` puts them first itself (commands.sweep)
            rest = _hydra_flags_first(rest)
    if name in ("train", "sweep") and "--dry-run" in rest:
        return _dry_run(name, [a for a in without_config_dir(rest) if a != "--dry-run"])
    if name in ("train", "sweep") and _cfg_flags(rest) is not None and (name == "sweep" or _multirun(rest)):
        return _show_sweep_configs(name, without_config_dir(rest))
    if name in HYDRA_SUBCOMMANDS:  # unknown config options: one line, not Hydra's page
        from .config_check import check_overrides

        message = check_overrides(rest[1:] if name == "sweep" else rest, command=name)
        if message:
            print(f"gpdlm: error: {message}", file=sys.stderr)
            return 2
    fn = getattr(importlib.import_module(module), func)
    sys.argv = [f"gpdlm {name}"] + rest
    hydra_full_error = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises instead of printing a trimmed traceback: one line below
    try:
        result = fn()
    except KeyboardInterrupt as e:  # Ctrl-C, or Terminated (SIGTERM, SIGHUP)
        _abort_sweeps()
        print(f"gpdlm: {killed_reason(e)}", file=sys.stderr)
        return exit_code(e)
    except Exception as e:
        if _broken_pipe(e):  # `gpdlm ... | head`: not an error of the command
            _abort_sweeps("FAILED", "stdout was closed")
            return _stdout_closed()
        code = _one_line_error(e, hydra_full_error, run_folder=name in HYDRA_SUBCOMMANDS)
        _abort_sweeps("FAILED", str(e))
        if code is None:
            raise
        return code
    finally:
        if hydra_full_error is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = hydra_full_error
    if _sweep_failed():
        return 1
    return int(result or 0) if isinstance(result, int) else 0


def _hydra_flags_first(rest: list[str]) -> list[str]:
    """``rest`` with its ``-cd DIR`` / ``--config-dir[=]DIR`` and ``-m`` / ``--multirun`` moved before the
    overrides: Hydra's argument parser takes flags before the overrides or after all of them, and answered
    ``a=1 -cd myconf b=2`` with its usage page ("unrecognized arguments: b=2") after gpdlm's check had
    passed. Neither flag's meaning depends on where it stands."""
    from .sweep.compose import split_config_dir

    config_dir, others = split_config_dir(rest)
    multirun = [a for a in others if a in ("-m", "--multirun")]
    return [*config_dir, *multirun, *(a for a in others if a not in ("-m", "--multirun"))]


#: commands that train; they import torch, gpytorch and MLflow (seconds, tens of seconds on a loaded machine)
TRAINING_COMMANDS = ("train", "sweep", "bias", "resume")
QUIET_FLAGS = {
    "-h",
    "--help",
    "--hydra-help",
    "-i",
    "--info",
    "-c",
    "--cfg",
    "-sc",
    "--shell-completion",
    "--dry-run",
    "-p",
    "--package",
    "--resolve",
}


def _say_starting(name: str, rest: list[str]) -> None:
    """One line on stdout as soon as a training command starts, before the slow imports: the
    command is alive (not when it only prints help, a config or a plan)."""
    if name not in TRAINING_COMMANDS or any(a in QUIET_FLAGS for a in rest):
        return
    what = "a multirun" if any(a in ("-m", "--multirun") for a in rest) or name == "sweep" else "a run"
    print(f"gpdlm {name}: starting {what} (loading torch, the config and the data)...", flush=True)


def _shell_completion(rest: list[str]) -> int:
    """Hydra's shell completion through the dispatcher. ``gpdlm -sc install=bash`` prints Hydra's
    script for the program ``gpdlm``; the shell then calls ``gpdlm -sc query=bash`` with COMP_LINE
    = "gpdlm train model=d...": the subcommand word is completed here, and the rest of the line is
    handed to that subcommand's Hydra app without it."""
    import os

    line = os.environ.get("COMP_LINE", "")
    words = line.split()
    query = any(a.startswith("query=") for a in rest)
    if query and (len(words) < 2 or (len(words) == 2 and not line.endswith(" "))):
        typed = words[1] if len(words) == 2 else ""
        print(" ".join(n for n in SUBCOMMANDS if n.startswith(typed)))
        return 0
    sub = words[1] if query and len(words) > 1 else "train"
    if sub not in ("train", "bias"):
        return 0  # no Hydra options to complete for the other subcommands
    if query:
        os.environ["COMP_LINE"] = line.replace(f" {sub}", "", 1)
    from .runtime import configure_process_env

    configure_process_env()
    module, func = SUBCOMMANDS[sub][0].split(":")
    import importlib

    sys.argv = ["gpdlm", "-sc", *rest]
    try:
        getattr(importlib.import_module(module), func)()
    except SystemExit as e:
        return int(e.code or 0) if not isinstance(e.code, str) else 1
    return 0


def _dry_run(name: str, rest: list[str]) -> int:
    """``gpdlm train -m ... --dry-run`` / ``gpdlm sweep beta ... --dry-run``: the sweep's plan and its
    estimated wall time (``sweep.plan``), without running it; one plan per multirun that ``gpdlm sweep
    beta`` would launch (one per dataset configuration), and their total."""
    from .exceptions import GpdlmError
    from .hydra_apps import report_error

    try:
        from .config_check import check_overrides
        from .sweep.plan import plan

        if name == "sweep" and not rest:
            raise GpdlmError("gpdlm sweep --dry-run needs a sweep kind: gpdlm sweep beta ... --dry-run")
        if name != "sweep" and not any(a in ("-m", "--multirun") for a in rest):
            raise GpdlmError("--dry-run describes a multirun: add -m (gpdlm train -m ... --dry-run)")
        # the user's overrides, before anything is composed (one line for an unknown option or key); the
        # multiruns of `gpdlm sweep beta` add only its grid and pinned values of these overrides' own sweeps
        message = check_overrides([a for a in (rest[1:] if name == "sweep" else rest) if a not in ("-m", "--multirun")])
        if message:
            raise GpdlmError(message)
        if name == "sweep":
            from .commands.sweep import sweep_overrides

            multiruns = sweep_overrides(rest[0], rest[1:])
        else:
            multiruns = [rest]
        plans = [plan([a for a in args if a not in ("-m", "--multirun")], estimate=True) for args in multiruns]
    except GpdlmError as e:
        report_error(e)
        return 2
    for p in plans:
        print(p.summary())
        for shape, stages in p.per_shape.items():
            model, dataset, n, batch, m, est = shape[:6]
            expected = p.iterations.get(shape)
            caps = list(expected.caps) if expected is not None and expected.caps else [None] * len(stages)
            parts = ", ".join(
                f"{s}: {it} it"
                + (f" (cap {cap})" if cap is not None and cap != it else "")
                + f" x {ms:.1f} ms"
                + (" (L-BFGS)" if lb else "")
                + (" shared" if sh else "")
                + (f", {secs:.0f} s with its first-order start" if secs > it * ms / 1000 + 1e-9 else "")
                for (s, sh, it, ms, lb, secs), cap in zip(stages, caps)
            )
            parts += f"; iterations: {expected.source if expected is not None else 'cap (upper bound)'}"
            how = "" if est in ("", "auto") else f", estimator {est}"
            how += "".join(
                f", {label} {getattr(shape, f)}"
                for f, label in (("mode", "mode"), ("lag", "lag"), ("units", "units"), ("num_features", "features"))
                if getattr(shape, f, None) is not None
            )
            print(f"  {model} on {dataset} (train_size {n}, batch {batch or 'full'}, M {m}{how}): {parts}")
        if p.extrapolated:
            print(f"  ({p.probe_note()})")
        print(f"  (probes: {p.probe_s:.0f} s timing steps, {p.iteration_s:.0f} s on the stopping rules' iterations)")
    if len(plans) > 1:
        from .sweep.plan import _duration

        total = sum(p.estimate_s or 0.0 for p in plans)
        print(
            f"gpdlm: {len(plans)} multiruns (one beta grid per dataset configuration), "
            f"{sum(len(p.jobs) for p in plans)} jobs, estimated wall time {_duration(total)} in all "
            f"({_bound(plans)})"
        )
    return 0


def _bound(plans) -> str:
    """What a total of plans' estimates is (``SweepPlan.bound``): an upper bound, expected, or partly at caps."""
    from .sweep.plan import SweepPlan

    whole = SweepPlan(
        [],
        "",
        False,
        False,
        "",
        1,
        iterations={(i, k): e for i, p in enumerate(plans) for k, e in p.iterations.items()},
    )
    return whole.bound()


def _multirun(rest: list[str]) -> bool:
    return any(a in ("-m", "--multirun") for a in rest)


def _cfg_flags(rest: list[str]) -> tuple[str, str | None, bool, list[str]] | None:
    """Hydra's ``--cfg/-c TYPE [--package/-p PKG] [--resolve]`` in ``rest``: (TYPE, PKG, resolve, the
    other arguments), or None without ``--cfg``. An unknown TYPE is left to the caller's check."""
    kind, package, resolve, others = None, None, False, []
    it = iter(rest)
    for a in it:
        flag, eq, value = a.partition("=")
        if flag in ("--cfg", "-c", "--package", "-p") and flag.startswith("-"):
            value = value if eq else next(it, "")
            if flag in ("--cfg", "-c"):
                kind = value
            else:
                package = value
        elif a == "--resolve":
            resolve = True
        else:
            others.append(a)
    return None if kind is None else (kind, package, resolve, others)


def _show_sweep_configs(name: str, rest: list[str]) -> int:
    """``gpdlm train -m ... --cfg job|hydra|all`` (and ``gpdlm sweep beta ... --cfg ...``): Hydra prints
    one run's config and refuses ``--cfg`` with ``--multirun``; gpdlm prints every job's config, each
    after a ``# job i of N: <overrides>`` line, as ``gpdlm train <overrides> --cfg TYPE`` would."""
    from .exceptions import GpdlmError
    from .hydra_apps import report_error

    flags = _cfg_flags(rest)
    if flags is None:  # the caller checked that a --cfg flag is present
        raise ValueError("_show_sweep_configs needs a --cfg flag")
    kind, package, resolve, others = flags
    try:
        if kind not in ("job", "hydra", "all"):
            raise GpdlmError(f"--cfg takes job, hydra or all; got {kind!r}")
        from .config_check import check_overrides

        args = [a for a in others if a not in ("-m", "--multirun")]
        message = check_overrides(args[1:] if name == "sweep" else args, command=name)
        if message:
            raise GpdlmError(message)
        from .sweep.plan import job_overrides

        if name == "sweep":
            if not args:
                raise GpdlmError("gpdlm sweep --cfg needs a sweep kind: gpdlm sweep beta ... --cfg job")
            from .commands.sweep import sweep_overrides

            multiruns = [[a for a in r if a != "-m"] for r in sweep_overrides(args[0], args[1:])]
        else:
            multiruns = [args]
        jobs = [job for m in multiruns for job in job_overrides(m)[0]]
    except GpdlmError as e:
        report_error(e)
        return 2
    from hydra.core.global_hydra import GlobalHydra

    from .sweep.compose import config_module

    with config_module():
        hydra = GlobalHydra.instance().hydra
        if hydra is None:  # config_module() initialises Hydra
            raise RuntimeError("Hydra is not initialised")
        for i, job in enumerate(jobs):
            print(f"# job {i + 1} of {len(jobs)}: {' '.join(job)}", flush=True)
            hydra.show_cfg("config", list(job), kind, package, resolve)
    return 0


def _sweep_failed() -> bool:
    """After a multirun: did any job fail or get killed? (the sweep callback has printed which and why)"""
    sweep = sys.modules.get("gpdlm_cli.sweep.callback")
    return bool(sweep and any(o["status"] in ("failed", "killed") for o in sweep.OUTCOMES))


def _one_line_error(e: Exception, hydra_full_error: str | None, run_folder: bool = True) -> int | None:
    """Print an error that reached the top as ``gpdlm: error: ...`` and return the exit code: a
    GpdlmError (its code; 2 = bad input), an error of the machine (``fault_message``: 1), a Hydra
    or OmegaConf config error (2). None for anything else: a bug, whose traceback is kept (also
    when the user asked for Hydra's with HYDRA_FULL_ERROR=1)."""
    from .exceptions import GpdlmError, fault_message

    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if isinstance(e, GpdlmError):
        print(f"gpdlm: error: {text}", file=sys.stderr)
        return getattr(e, "exit_code", 2)
    msg = fault_message(e, run_folder=run_folder)
    if msg is not None:
        print(f"gpdlm: error: {msg}", file=sys.stderr)
        return 1
    if hydra_full_error != "1" and type(e).__module__.startswith(("hydra", "omegaconf")):
        print(f"gpdlm: error: {text}", file=sys.stderr)
        return 2
    return None


def _abort_sweeps(status: str = "KILLED", reason: str | None = None) -> None:
    sweep = sys.modules.get("gpdlm_cli.sweep.callback")
    if sweep:
        sweep.abort_active_sweeps(status, reason)


if __name__ == "__main__":
    sys.exit(main())
