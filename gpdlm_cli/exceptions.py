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


def param_error(param: str, owner: str, allowed: str, value) -> ConfigError:
    """An error in scikit-learn's shape: which parameter, of what, allowed range, value received."""
    return ConfigError(f"the '{param}' parameter of {owner} must be {allowed}; got {value!r} instead")
