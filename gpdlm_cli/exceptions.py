"""The error family of gpdlm. Every error a user can cause derives from GpdlmError, and the CLI
prints it as one line (``gpdlm: error: ...``) with a non-zero exit instead of a traceback."""


class GpdlmError(Exception):
    """Base class: an error with a message meant for the user."""


class ConfigError(GpdlmError, ValueError):
    """A configuration value is out of range or of the wrong type."""


class DataError(GpdlmError, ValueError):
    """A dataset is missing, malformed or does not fit the task."""


class UnsupportedCombination(GpdlmError, ValueError):
    """Two config choices that are each valid do not work together (e.g. estimator=exact with a
    Poisson likelihood)."""


class NumericalError(GpdlmError, RuntimeError):
    """Training broke numerically (non-PD matrix after jitter retries, NaN loss)."""


class EnvironmentFault(GpdlmError, RuntimeError):
    """The machine, not the input, stopped the command: a full disk, an unwritable folder, a locked
    or unreachable tracking store. Exit code 1 (bad input is 2)."""

    exit_code = 1


class TrackingError(EnvironmentFault):
    """The MLflow store or server cannot be used (locked, unreachable, full)."""


class ResultsNotSaved(EnvironmentFault):
    """A run trained but some of its result files could not be written; the message says what was
    and was not saved."""


def param_error(param: str, owner: str, allowed: str, value) -> ConfigError:
    """An error in scikit-learn's shape: which parameter, of what, allowed range, value received."""
    return ConfigError(f"the '{param}' parameter of {owner} must be {allowed}; got {value!r} instead")


def fault_message(e: BaseException, run_folder: bool = True) -> str | None:
    """One line for an error of the machine rather than of gpdlm (an OSError, a database or
    tracking error), saying what happened and what to do; None for anything else (a bug: its
    traceback is kept). ``run_folder``: the command writes a Hydra run folder (train, sweep, bias),
    so ``hydra.run.dir`` is the remedy to name; the other commands write the paths they were given."""
    import errno

    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if isinstance(e, OSError) and not _is_network_error(e):
        where = e.filename or "a file"
        elsewhere = "hydra.run.dir=..." if run_folder else "another path"
        if e.errno == errno.ENOSPC:
            return f"disk full while writing {where}; free some space (or write elsewhere: {elsewhere}) and run again"
        if e.errno == errno.EROFS:
            return f"cannot write {where}: read-only file system; choose a writable folder ({elsewhere})"
        if e.errno in (errno.EACCES, errno.EPERM):
            return f"cannot write {where}: permission denied; choose a folder you can write ({elsewhere})"
        if e.errno == errno.EDQUOT:
            return f"disk quota exceeded while writing {where}; free some space and run again"
        if e.errno == errno.EISDIR:
            return f"{where} is a directory, not a file; give a file path"
        return f"cannot create or write {where}: {e.strerror or text}; check the path" + (
            " (hydra.run.dir=...)" if run_folder else ""
        )
    if "attempt to write a readonly database" in text or "readonly database" in text:
        return (
            "the MLflow store is read-only (its file or folder cannot be written; SQLite needs both); "
            "open a writable copy, or fix its permissions"
        )
    if "exceeds the maximum length" in text or getattr(e, "error_code", "") == "INVALID_PARAMETER_VALUE":
        return (
            f"MLflow refused a value: {text[:300]}; shorten it (tracking.experiment, tracking.run_name and "
            f"parameter values have MLflow's length limits)"
        )
    if "database or disk is full" in text:
        return "disk full while writing the MLflow store (mlflow.db); free some space and run again"
    if "database is locked" in text:
        return "the MLflow store is locked by another process; run again when it is done, or use another store"
    module = type(e).__module__ or ""
    if module.startswith(("sqlalchemy", "sqlite3", "mlflow", "requests", "urllib3", "alembic")) or _is_network_error(e):
        return f"the MLflow store failed ({type(e).__name__}: {text[:300]}); check tracking.uri, or run with tracking.enabled=false"
    return None


def _is_network_error(e: BaseException) -> bool:
    return isinstance(e, (ConnectionError, TimeoutError)) or type(e).__module__.startswith(("urllib3", "requests"))
