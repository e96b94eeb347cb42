"""A trained run's learned hyperparameters, as the model uses them (issue 47, item 2).

gpytorch keeps a positive hyperparameter as a raw value (``raw_lengthscale``, ``raw_outputscale``,
``raw_noise``) and a constraint that maps it to the value the model uses (softplus, plus a lower bound
for the noise); ``model.pt`` holds the raw values. ``hyperparameters`` walks every gpytorch module of a
method -- its model, likelihood and objectives, any family -- and reads each raw parameter through its
constraint (a raw parameter without one, e.g. ``ConstantMean``'s, through the module's own property):

* ``values``: ``{path: value}``, the path the parameter's module has under ``model`` or ``likelihood``
  (``model.covar_module.base_kernel.lengthscale``), the value a float or a list (one lengthscale per
  input dimension with ARD); each parameter once, even where two modules share it;
* ``metrics``: the same as MLflow metrics named ``hp.<name>``, ``<name>`` the parameter's own name when
  no other parameter has it (``hp.noise``, ``hp.outputscale``, ``hp.lengthscale`` or, with ARD,
  ``hp.lengthscale.0``, ``hp.lengthscale.1``, ...), else its path; plus ``hp.num_inducing`` (the rows of
  the inducing inputs) where the model has them.

Values are in the units the model trained in: standardised inputs (a lengthscale is in standard
deviations of its input) and standardised targets (noise and outputscale are fractions of the target's
variance). ``save_hyperparameters`` writes ``hyperparameters.json`` in the run folder and logs the metrics.
"""

from __future__ import annotations

import json
import math

import torch

FILE = "hyperparameters.json"
PREFIX = "hp."
INDUCING_NAMES = ("inducing_points", "Z")  # how gpdlm's and gpytorch's sparse models name their inducing inputs
MAX_ELEMENTS = 4096  # a raw parameter larger than this is a weight matrix, not a hyperparameter


def _value(t: torch.Tensor):
    t = t.detach().to("cpu", torch.float64)
    return float(t.reshape(())) if t.numel() == 1 else [float(v) for v in t.flatten()]


def _roots(method) -> list[tuple[str, torch.nn.Module]]:
    roots = [("model", method.model), ("likelihood", method.likelihood)]
    roots += [(type(m).__name__, m) for m in method.modules]
    return [(name, m) for name, m in roots if isinstance(m, torch.nn.Module)]


def hyperparameters(method) -> dict:
    """``{"values": {path: value}, "metrics": {"hp.<name>": float}, "num_inducing": M or None}`` for a
    built (trained) method; see the module docstring."""
    import gpytorch

    seen: set[int] = set()
    values: dict[str, object] = {}
    num_inducing = None
    for root_name, root in _roots(method):
        for path, module in root.named_modules():
            prefix = f"{root_name}.{path}." if path else f"{root_name}."
            for pname, p in module.named_parameters(recurse=False):
                if num_inducing is None and pname in INDUCING_NAMES and p.dim() == 2:
                    num_inducing = int(p.shape[0])
                if id(p) in seen or not pname.startswith("raw_") or p.numel() > MAX_ELEMENTS:
                    continue
                if not isinstance(module, gpytorch.Module):
                    continue
                seen.add(id(p))
                name = pname[len("raw_") :]
                constraint = module._constraints.get(f"{pname}_constraint") if hasattr(module, "_constraints") else None
                with torch.no_grad():
                    if constraint is not None:
                        value = constraint.transform(p)
                    elif isinstance(getattr(type(module), name, None), property):
                        value = getattr(module, name)
                    else:
                        value = p
                values[prefix + name] = _value(value)
        if num_inducing is None:
            for bname, b in root.named_buffers():
                if bname.rsplit(".", 1)[-1] in INDUCING_NAMES and b.dim() == 2:
                    num_inducing = int(b.shape[0])
                    break
    return {"values": values, "metrics": _metric_names(values, num_inducing), "num_inducing": num_inducing}


def _metric_names(values: dict, num_inducing: int | None) -> dict[str, float]:
    leaves = [path.rsplit(".", 1)[-1] for path in values]
    metrics: dict[str, float] = {}
    for path, value in values.items():
        leaf = path.rsplit(".", 1)[-1]
        name = PREFIX + (leaf if leaves.count(leaf) == 1 else path)
        if isinstance(value, list):
            metrics.update({f"{name}.{i}": v for i, v in enumerate(value)})
        else:
            metrics[name] = value
    if num_inducing is not None:
        metrics[PREFIX + "num_inducing"] = float(num_inducing)
    return {k: v for k, v in metrics.items() if math.isfinite(v)}


def save_hyperparameters(run, method) -> dict:
    """``hyperparameters.json`` in the run's folder (atomically; an OSError is recorded by ``run.save`` as
    for the other result files) and its ``hp.*`` metrics to the run's tracker; returns the record. A
    family whose modules cannot be read this way records what could be read, never fails the run."""
    from ..files import write_atomic

    try:
        record = hyperparameters(method)
    except Exception as e:  # a family's module this walk does not understand: say so, keep the run
        record = {"values": {}, "metrics": {}, "num_inducing": None, "error": f"{type(e).__name__}: {e}"}
    record["units"] = "standardised inputs and targets (as the model trained)"
    run.save(FILE, lambda p: write_atomic(p, json.dumps(record, indent=2, sort_keys=True)))
    if record["metrics"]:
        run.tracker.log_metrics(record["metrics"])
    return record


__all__ = ["FILE", "hyperparameters", "save_hyperparameters"]
