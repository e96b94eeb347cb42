"""The Hydra job wrapper of gpdlm's Hydra subcommands (``commands/train.py``, ``commands/bias.py``).

A single run turns a GpdlmError into one line (``gpdlm: error: ...``) and exit code 2, and removes
the output folder Hydra made for it. In a multirun a job never raises into Hydra on failure: it
records its outcome for the sweep summary (see ``sweep.callback``) so one failing job does not stop
the others, and returns its objective (``sweep.objective``, a float) to the sweeper -- what
hydra-optuna-sweeper minimises. SIGTERM and SIGHUP end a job like Ctrl-C (``signals``).
"""

from __future__ import annotations

import sys
import time
import traceback

from omegaconf import DictConfig

from .exceptions import ConfigError, GpdlmError
from .runtime import threads_setting

EXIT_USER_ERROR = 2


def report_error(e: BaseException) -> str:
    from .exceptions import fault_message

    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
    if not isinstance(e, GpdlmError):
        msg = fault_message(e) or f"{type(e).__name__}: {msg}"
    print(f"gpdlm: error: {msg}", file=sys.stderr)
    return msg


def parallel_jobs(hc) -> int:
    """How many jobs of this sweep run at once on this machine (joblib's n_jobs; 1 otherwise)."""
    import os

    n = hc.launcher.get("n_jobs") if "launcher" in hc else None
    if n is None:
        return 1
    return (os.cpu_count() or 1) if n < 0 else int(n)  # joblib: n_jobs=-1 means all cores


def compose_config(overrides: list[str]):
    """The config `gpdlm train <overrides>` would run (Hydra's compose API, no job launched), with the
    command's own config folders on the search path (``sweep.compose.config_module``); composed once per
    ``sweep.compose.memoized_composes`` block."""
    from hydra import compose

    from .sweep.compose import config_module, memoized

    def make():
        with config_module():
            return compose(config_name="config", overrides=list(overrides))

    return memoized("compose_config", overrides, make)


def compose_configs(jobs: list[list[str]]) -> list:
    """``compose_config`` of each job, with one compose per job *structure*: a job that differs from an earlier
    one only in the values of leaf keys the config already has (``dataset.split.train_size=1000`` after
    ``=500``: plain ``a.b=value`` overrides, no group choice, ``+``/``~`` or package) gets a copy of that job's
    config with its values set (``OmegaConf.update``), which is the config composing it gives
    (tests/test_config_cache.py): a beta sweep's grids over several training sizes compose once per data set."""
    import copy

    from omegaconf import OmegaConf

    from .sweep.compose import config_module, overrides_parser

    with config_module():
        parser = overrides_parser()
        parsed = [parser.parse_overrides(list(j)) for j in jobs]
    out: list = []
    bases: dict[tuple, DictConfig] = {}
    for job, ovs in zip(jobs, parsed):
        shape, values = override_shape(ovs)
        base = bases.get(shape)
        if base is None or not all(is_leaf(base, o.key_or_group) for o in values):
            out.append(compose_config(job))
            bases.setdefault(shape, out[-1])
            continue
        cfg = copy.deepcopy(base)
        for o in values:
            OmegaConf.update(cfg, o.key_or_group, o.value(), merge=False)
        out.append(cfg)
    return out


def override_shape(parsed: list) -> tuple[tuple, list]:
    """``(shape, values)`` of a parsed override list: ``values`` its plain ``a.b=value`` overrides (no group
    choice, ``+``/``~``, package, sweep, list or dict), ``shape`` the rest and the keys ``values`` set. Two lists
    of one shape compose the same defaults tree; only those values differ (``compose_configs``)."""
    from hydra.core.override_parser.types import OverrideType

    values = [o for o in parsed if o.type == OverrideType.CHANGE and o.package is None and "." in o.key_or_group]
    values = [o for o in values if not o.is_sweep_override() and not isinstance(o.value(), (dict, list))]
    return (tuple(o.input_line for o in parsed if o not in values), tuple(o.key_or_group for o in values)), values


def is_leaf(cfg: DictConfig, key: str) -> bool:
    """Whether ``key`` (dotted) is a value in ``cfg``: not a node, not absent."""
    from omegaconf import ListConfig, OmegaConf

    absent = object()
    value = OmegaConf.select(cfg, key, default=absent, throw_on_resolution_failure=False)
    return value is not absent and not isinstance(value, (DictConfig, ListConfig))


def _run_single(cfg: DictConfig, runner, hc, overrides: list[str]):
    """A single run: ``runner``'s result; a GpdlmError becomes one line and its exit code (2 by
    default), a fault (full disk, unwritable folder, failing store) one line and exit 1, Ctrl-C,
    SIGTERM or SIGHUP exit 130, 143 or 129; a rejected run's output folder is removed."""
    from . import build  # torch and gpytorch: imported by the job, never by a launcher that only dispatches
    from .run.artifacts import discard_rejected_output
    from .signals import exit_code, killed_reason

    try:
        build.configure_threads(threads_setting(cfg.get("threads", "auto")))
        return runner(cfg, hc.runtime.output_dir, overrides=overrides)
    except GpdlmError as e:
        discard_rejected_output(hc.runtime.output_dir, report_error(e))
        sys.exit(getattr(e, "exit_code", EXIT_USER_ERROR))
    except KeyboardInterrupt as e:
        stopped = killed_reason(e) or "interrupted"  # never None for a KeyboardInterrupt
        _log_killed(hc.runtime.output_dir, stopped)
        print(f"gpdlm: {stopped}", file=sys.stderr)
        sys.exit(exit_code(e))
    except Exception as e:  # a full disk, an unwritable folder, a failing store: one line, exit 1
        from .exceptions import fault_message

        if fault_message(e) is None:
            raise  # a bug: Hydra shows where
        discard_rejected_output(hc.runtime.output_dir, report_error(e))
        sys.exit(1)


def _check_sweep_launcher(cfg: DictConfig, hc) -> None:
    """``sweep.warm_start`` and ``sweep.batched`` need the default (in-process) launcher and exclude
    each other: a ConfigError otherwise (``sweep.callback.sweep_launcher_conflict``; `gpdlm train` refuses a
    command-line launcher before the sweep starts, this catches the rest, e.g. a preset's launcher)."""
    from .sweep.callback import sweep_launcher_conflict

    sweep = cfg.get("sweep", {})
    message = sweep_launcher_conflict(
        "BasicLauncher" in str(hc.launcher.get("_target_", "")),
        bool(sweep.get("batched", False)),
        bool(sweep.get("warm_start", False)),
    )
    if message:
        raise ConfigError(message)


def _run_sweep_job(cfg: DictConfig, runner, hc, overrides: list[str], context: dict, outcome: dict):
    """One job of a multirun: ``(metrics, None)``, or ``(None, reason)`` when it failed (reported, its
    reason in the job's gpdlm.log). A kill is recorded for the sweep summary, then raised. ``outcome``:
    what the job's record carries besides its status (``resumed``: the stopped run it continued)."""
    from . import build
    from .run.artifacts import append_log
    from .signals import killed_reason
    from .sweep.callback import job_number, record_outcome

    sweep_dir, job = hc.sweep.dir, job_number(hc)
    try:
        _check_sweep_launcher(cfg, hc)
        build.configure_threads(threads_setting(cfg.get("threads", "auto"), parallel_jobs(hc)))
        metrics = runner(
            cfg,
            hc.runtime.output_dir,
            overrides=overrides,
            parent_run_id=context.get("parent_run_id"),
            skip_finished=cfg.sweep.skip_finished,
            outcome=outcome,
        )
    except Exception as e:  # a job failure is reported, never raised into the sweep
        from .exceptions import fault_message

        reason = report_error(e)
        if not isinstance(e, GpdlmError) and fault_message(e) is None:
            traceback.print_exc(file=sys.stderr)
        append_log(hc.runtime.output_dir, f"job failed: {reason}")
        return None, reason
    except BaseException as e:  # Ctrl-C, SIGTERM/SIGHUP, a submitit preemption: recorded, then stop
        why = killed_reason(e)
        if why:
            _log_killed(hc.runtime.output_dir, why)
            record_outcome(sweep_dir, job, "killed", overrides, why)
        raise
    return metrics, None


def past_deadline(cfg: DictConfig) -> str | None:
    """Why a multirun job is not started: ``sweep.deadline`` (seconds since the epoch; `gpdlm reproduce --budget`
    passes it to every multirun) has passed. The reproduce process stops its own jobs before the deadline; jobs a
    parallel launcher (joblib, Slurm, Ray) starts in other processes check it here, so a budget ends a multirun
    after the jobs in flight instead of after all of its jobs. None: no deadline, or not reached."""
    deadline = cfg.get("sweep", {}).get("deadline")
    if deadline is None or time.time() < float(deadline):
        return None
    return f"past the budget of gpdlm reproduce (sweep.deadline {time.strftime('%H:%M:%S', time.localtime(float(deadline)))})"


def run_job(cfg: DictConfig, runner, run_name=None):
    """Run ``runner(cfg, output_dir, overrides=..., ...)`` as a Hydra job of any gpdlm subcommand.

    Single run: a GpdlmError becomes one line and exit code 2 (and the empty output folder is
    removed); Ctrl-C, SIGTERM or SIGHUP end it with 130, 143 or 129. Multirun: the job joins the
    sweep's parent run (named by ``run_name(cfg, swept_keys)`` unless ``tracking.run_name`` is
    set), records its outcome and returns its ``sweep.objective`` metric to the sweeper (+inf when
    it failed); a failure never raises into Hydra, so the other jobs go on."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from .signals import install_signal_handlers

    install_signal_handlers()
    hc = HydraConfig.get()
    overrides = list(hc.overrides.task)
    if hc.mode != RunMode.MULTIRUN:
        return _run_single(cfg, runner, hc, overrides)

    from .sweep.callback import job_number, job_objective, read_context, record_outcome

    if "joblib" in str(hc.launcher.get("_target_", "")).lower():  # a worker must not outlive its sweep
        from .signals import exit_with_parent

        exit_with_parent()
    sweep_dir, job = hc.sweep.dir, job_number(hc)
    context = read_context(sweep_dir)
    if run_name is not None and not cfg.tracking.get("run_name"):
        from omegaconf import OmegaConf

        OmegaConf.update(cfg, "tracking.run_name", run_name(cfg, context.get("swept", [])), merge=False)
    late = past_deadline(cfg)
    if late is not None:  # `gpdlm reproduce --budget`: a job a parallel launcher starts after it is not trained
        print(f"gpdlm: skipped: {late}", file=sys.stderr, flush=True)
        record_outcome(sweep_dir, job, "skipped", overrides, late)
        return float("inf")
    outcome: dict = {}
    started = time.monotonic()
    metrics, failure = _run_sweep_job(cfg, runner, hc, overrides, context, outcome)
    if failure is not None:
        record_outcome(sweep_dir, job, "failed", overrides, failure)
        return float("inf")
    try:
        value = job_objective(cfg, metrics, context)
    except GpdlmError as e:  # sweep.objective names no metric of this run
        record_outcome(sweep_dir, job, "failed", overrides, report_error(e))
        return float("inf")
    status = "skipped" if metrics is None else "finished"
    record_outcome(sweep_dir, job, status, overrides, seconds=time.monotonic() - started, **outcome)
    return value


def _log_killed(output_dir, why: str) -> None:
    """The reason in the run's gpdlm.log, unless the run wrote its partial results (which say it)."""
    import json
    from pathlib import Path

    from .run.artifacts import append_log

    partial = Path(output_dir) / "metrics.json"
    try:
        if partial.exists() and json.loads(partial.read_text()).get("status"):
            return
    except (OSError, ValueError):
        pass
    if Path(output_dir).is_dir():
        append_log(output_dir, f"run KILLED: {why}")
